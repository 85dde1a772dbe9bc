"""lpxtop's numbers against `vllm bench serve` on real vLLM: a short run of benchmarks/reference.py.

At concurrency C (1 and 2 here) `vllm bench serve` loads a real vLLM (small-llama, 4 slots, so C+1
requests fit) while `lpxtop once` probes it with requests shaped like the benchmark's (64 output tokens,
a prompt the server counts as the benchmark's ~50 tokens); a second benchmark run, alone at C+1, stands
for "lpxtop's probe is one more client". Asserted, with the tolerances below:

- lpxtop's server-side mean TTFT is Δsum/Δcount of vLLM's TTFT histogram read directly with
  prometheus_client from the very pages lpxtop read (a loopback pass-through keeps them), over lpxtop's
  whole run (to its last page): exact, up to the JSON's rounding to 0.001 ms;
- ITL p50 and p95 and TPOT p50 agree with the benchmark's requests of the same run, in lpxtop's window;
- TTFT p50 and p95 agree with the benchmark's at C = 1 in the same run: one benchmark client and the
  probe, each arriving at moments that have nothing to do with the other's, each finding the other's
  request decoding; at C = 2 the probe's TTFT p50 is not above the benchmark clients';
- ITL p50 and TPOT p50 lie near the run alone at C+1 (another run: the server's speed drifts), when the
  benchmark agrees with itself across the two runs (its ITL p50 within 30 %; on the development VM,
  2026-12-06, it read 104.9 ms alone at C+1 = 3 and 47.3 ms beside lpxtop at C = 2 minutes later, lpxtop
  47.4 ms: the machine, not a client, had changed speed);
- the clients' mean TTFT over the server's window exceeds the server's own mean by a few ms (the time
  outside vLLM's TTFT clock: HTTP, tokenization, the network).

TTFT is not held to the run alone at C+1, though that is the usual reading of "the probe is one more
client". Measured here: closed-loop clients with a fixed output length start together (each round's C+1
requests sent within ~10 ms of each other, round after round), so every benchmark request prefills beside
its siblings' prefills (C+1 = 3: TTFT p50 58, 56 and 75 ms by position in the round), while the probe
arrives at a random moment and prefills beside decodes. lpxtop samples the time average, as it must
(docs/measurement.md, "when probes leave"); the benchmark's TTFT is its own clients' rhythm. lpxtop's TTFT p50 was 6-14 ms below
the C+1 run's at C = 1 and 25-31 ms below at C = 2; the benchmark's own clients beside it, phase-locked
with each other at C = 2, were 11-15 ms above lpxtop's probe.

Figures: five runs of `python benchmarks/reference.py --concurrency 1,2 --probes 30 --rounds 15` (this
test's settings; --keep DIR kept the benchmark's per-request detail) on a quiet 2-core box, 2026-12-01.
lpxtop minus the benchmark beside it, in ms (C = 1 | C = 2), and the benchmark's own value over the runs:
  ITL p50   +0.1..+0.2 | +0.1..+0.2     (benchmark 8.5-9.4 | 9.2-9.8)
  ITL p95   +0.2..+0.8 | +0.2..+1.4     (12.7-14.8 | 14.8-15.9)
  TPOT p50  +0.2..+0.3 | +0.2..+0.5     (9.1-10.0 | 9.9-10.6)
  TTFT p50  -2.2..+1.4 | -14.5..-11.2   (33.5-38.5 | 48.9-54.5)
  TTFT p95  -6.5..+11.3, and +108 once  (40.0-54.2)
lpxtop's TPOT is always a little higher: during a probe's life the benchmark client always sends a new
request (one prefill merged into the probe's decode steps), while the probe, which rests between probes,
is in flight for ~3/4 of a benchmark request's life. The +108 ms p95: two of 30 probes met a stall that
the server's own histogram recorded too (its mean TTFT 51.8 ms in that window against 31.8-36.7 in the
others; none of those probes client-limited): a p95 of 30 samples is set by its two slowest.
How far a sample of 30 moves, from the benchmark's own requests (2,000 bootstrap draws of 30, 5th-95th
percentile, C = 1): TTFT p50 +-2-3 ms, TTFT p95 35-83 ms (38-133 in the stalled run), ITL p95 +-1 ms,
TPOT p50 +-0.4 ms. Against the run alone at C+1: ITL p50 -0.5..+0.8 ms, TPOT p50 -0.4..+1.4 ms (at most
15 %). Server mean: equal to the direct reading in all ten, always to lpxtop's last page; the clients' mean
minus the server's: +2.6..+4.9 ms (and -2.7..+7.1 in a run at C = 1, 2, 4 and 8 with 40 probes, where the
window's edges cut the benchmark's requests less cleanly).

Each tolerance is a few times the largest difference seen, and at least the samples' own spread: √2
times the 5th-95th percentile width of a probe-sized sample of the benchmark's requests (the run alone, and
for a comparison with the requests beside lpxtop's, those too, the wider of the two), about 3.3 standard
deviations of the difference between two such samples. On the quiet box that width is a few ms and the fixed
tolerances rule; on a slow or busy machine (CI, 2026-12-02: ITL 37 ms instead of 9, TTFT ~1 s, a 30-request
TPOT p50 moving 36.5-45.8 ms) the samples' own spread does, instead of failing on noise. The requests beside
lpxtop's need their own: with prefills that slow, a request's TPOT depends on whether another's prefill fell
into its decode, and the two humps are far apart (the development VM, 2026-12-06, C = 1: 25-33 ms without, 46-62
ms with; a 30-request p50 moved 38.5-51.6 ms, while the run alone's moved 44.1-48.8), so lpxtop's 42.1 against
the benchmark's 52.1 was noise, not a difference in what the two clients measure.

At C = 2 the probe's TTFT p50 is held below the run alone at C+1 (three phase-locked clients prefilling
together), not below the two benchmark clients beside it: on the quiet box it was below both, but on the
slow CI machine the two clients beside it, prefilling as a pair, read 1093 ms where the probe, whose
prefill met their decodes, read 1697 ms and the run alone at 3 read 2000 ms.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator

import pytest

from tests.support.realservers import (
    VLLM_MODEL,
    ServerProcess,
    missing_parts,
    running,
    start_server,
    unavailable,
    warm_up,
)

pytestmark = [pytest.mark.realserver, pytest.mark.timeout(1200)]
LEVELS = (1, 2)
PROBES, ROUNDS = 30, 15
SLOTS = 4

# ms allowed between lpxtop and the benchmark beside it, as a function of the benchmark's value v
TOLERANCES = {
    "itl_p50": lambda v: max(1.0, 0.1 * v),  # seen <= 0.2 ms
    "itl_p95": lambda v: max(3.0, 0.2 * v),  # seen <= 1.4 ms; a 30-probe sample's spread +-1 ms
    # seen <= 0.5 ms on the quiet box, lpxtop's always higher (see above); on the slow development VM of
    # 2026-12-06 (ITL ~40-90 ms, TTFT ~1 s) lpxtop's was 14-19 % from the benchmark's beside it, on either side,
    # in five rows of eight (C = 1 and 2, four runs), within 5 % in the others: not explained yet, so 25 %
    "tpot_p50": lambda v: max(1.5, 0.25 * v),
}
STALL_SLACK_MS = 20.0  # a TTFT p95 further above the benchmark's only where the server's own histogram holds one
ALONE_REL = 0.3  # ITL p50 and TPOT p50 against the run alone at C+1: seen <= 15 %
OUTSIDE_MS = (-10.0, 25.0)  # the clients' mean TTFT minus the server's over its window: seen -2.7..+7.1


def ttft_p50_tol(v: float) -> float:
    """Seen <= 2.2 ms apart at C = 1; a 30-probe p50 moves +-3 ms."""
    return 2.0 + 0.2 * v


def ttft_p95_below(v: float) -> float:
    """lpxtop's p95 was at most 6.5 ms (13 %) below the benchmark's at C = 1."""
    return 5.0 + 0.3 * v


def ttft_p95_above(v: float) -> float:
    """A 30-sample p95 drawn from the benchmark's own requests reached 1.6x its p95 (83 against 54 ms)."""
    return max(20.0, v)


@pytest.fixture(scope="module")
def vllm_4_slots() -> Iterator[ServerProcess]:
    """vLLM serving small-llama with 4 slots, as benchmarks/reference.py starts it: C+1 requests fit."""
    gaps = missing_parts("vllm")
    if gaps:
        unavailable(f"vllm not built (missing: {'; '.join(gaps)}); build it with tests/integration/realservers/setup.sh")
    server = start_server("vllm-4", "start-vllm.sh", ["--max-num-seqs", str(SLOTS)], {"MODEL": VLLM_MODEL})
    with running(server) as ready:
        warm_up(ready, VLLM_MODEL)
        yield ready


def load_reference():
    """benchmarks/reference.py, the script whose short run this is."""
    from benchmarks import reference

    return reference


def test_lpxtop_agrees_with_vllm_bench_serve(vllm_4_slots, tmp_path) -> None:
    reference = load_reference()
    args = argparse.Namespace(probes=PROBES, rounds=ROUNDS)
    state: dict = {}
    with reference.MetricsPassThrough(vllm_4_slots.origin) as passthrough:
        rows = [reference.measure(vllm_4_slots.origin, c, args, passthrough, tmp_path, state) for c in LEVELS]
    doc = {"server": f"{VLLM_MODEL}, {SLOTS} slots", "date": "this run", "probes": PROBES,
           "prompt": {"bench_tokens": state.get("target"), "probe_tokens": state.get("tokens")}, "rows": rows}
    print(reference.render(doc))
    for row in rows:
        check(row)


def noise(row: dict, key: str, spreads: tuple[str, ...] = ("spread_at_probe_sample",)) -> float:
    """√2 times the 5th-95th percentile width of a probe-sized sample's `key`, the widest of `spreads` (see the
    module's docstring)."""
    widths = [lo_hi[1] - lo_hi[0] for name in spreads if (lo_hi := (row.get(name) or {}).get(key))]
    return math.sqrt(2.0) * max(widths, default=0.0)


BESIDE = ("spread_at_probe_sample", "spread_beside")  # against the benchmark beside: its own requests' spread too


def check(row: dict) -> None:
    c, ours, beside, alone = row["concurrency"], row["lpxtop"], row["bench_beside"], row["bench_alone"]
    where = f"concurrency {c}: {row}"
    assert ours["status"] == "up" and ours["server_kind"] == "vllm", where
    assert ours["probes_ok"] >= PROBES - 1, where  # a random model may end a probe early: never seen
    assert beside["requests"] >= 4 * c and beside["failed"] == 0 and alone["failed"] == 0, where
    assert not [n for n in row["notes"] if "past the benchmark" in n], where
    # exact: the same pages, the same arithmetic (the JSON rounds to 0.001 ms)
    direct = row["server_direct"]
    assert direct["page"] == direct["pages"], where  # lpxtop's window ends at its last scrape
    assert direct["count"] == ours["server_ttft_count"] >= ours["probes_ok"], where
    assert math.isclose(ours["server_ttft_mean_ms"], direct["mean_ms"], abs_tol=0.0006), where
    outside = direct["clients"]["mean_ms"] - ours["server_ttft_mean_ms"]
    assert OUTSIDE_MS[0] <= outside <= OUTSIDE_MS[1], (outside, where)
    for key, tol in TOLERANCES.items():
        allowed = max(tol(beside[key]), noise(row, key, BESIDE))
        assert abs(ours[key] - beside[key]) <= allowed, (key, ours[key], beside[key], where)
    # The run alone is another run: held to it only while the server kept its speed between the two, which the
    # benchmark says itself (its ITL p50 alone within ALONE_REL of its ITL p50 beside lpxtop)
    same_speed = abs(beside["itl_p50"] - alone["itl_p50"]) <= ALONE_REL * alone["itl_p50"]
    for key in ("itl_p50", "tpot_p50") if same_speed else ():
        allowed = max(ALONE_REL * alone[key], noise(row, key))
        assert abs(ours[key] - alone[key]) <= allowed, (key, ours[key], alone[key], where)
    if c == 1:
        allowed = max(ttft_p50_tol(beside["ttft_p50"]), noise(row, "ttft_p50", BESIDE))
        assert abs(ours["ttft_p50"] - beside["ttft_p50"]) <= allowed, where
        v = beside["ttft_p95"]
        assert ours["ttft_p95"] >= v - ttft_p95_below(v), where
        stalled = (ours["server_ttft_max_at_most_ms"] or 0.0) + STALL_SLACK_MS
        assert ours["ttft_p95"] <= max(v + ttft_p95_above(v), stalled), where
    elif same_speed:
        # C+1 phase-locked clients prefill beside each other; the probe, one more client, meets no worse
        allowed = max(ttft_p50_tol(alone["ttft_p50"]), noise(row, "ttft_p50"))
        assert ours["ttft_p50"] <= alone["ttft_p50"] + allowed, where
