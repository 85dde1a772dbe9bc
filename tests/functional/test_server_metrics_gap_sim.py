"""The client/engine TTFT gap against the simulated server, idle and under a closed-loop load that queues.

Measured before this rule: "client p50 minus server p50" read -1, +1, +36 and +1,107 ms at concurrency 1, 2, 4 and 8
where the real time outside vLLM's TTFT clock was ~6 ms at every level. Here the load's requests carry
long prompts (a different population from the probe's short one, as a benchmark's are) and the sim
queues them behind 2 slots. The truth is the sim's own record: for each probe, its measured TTFT minus
the engine's own TTFT for that request (the clock its histogram and its span use). The time the sim's
HTTP handler takes to write the token after the engine made it is outside the engine, so it belongs to
the gap: on a busy box that wake-up alone can take tens of ms. The gap must be that truth or nothing
(with a reason) at every level; the old estimator is shown to swing.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time

import pytest

from lpxtop.engine.probe import run_probe
from lpxtop.engine.scrape import tracker as server_tracker
from lpxtop.engine.scrape.servers import ServerScraper
from lpxtop.http import HttpClient
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.probe import Sample
from lpxtop.model.server import ServerMetrics
from lpxtop.model.server_gap import ttft_gap
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread

pytestmark = pytest.mark.timing  # measures time against tolerances: runs alone under pytest-xdist

# The sim's handler wakes up and writes a little after its engine observes the TTFT: the record's
# truth and the histogram's clock differ by that (sub-millisecond idle; more with both cores loaded).
TOLERANCE_MS = 3.0
LONG_PROMPT = "lorem ipsum " * 500  # ~1000 tokens: 100 ms of simulated prefill against the probe's ~2 ms
MIN_PROBES = 6
SIM = SimConfig(model="m", ttft_ms=12.0, itl_ms=2.0, max_num_seqs=2, jitter=0.0, prefill_ms_per_token=0.1)


def config(url: str, name: str, prompt: str | None = None) -> EndpointConfig:
    extra = {"prompt": prompt} if prompt else {}
    return EndpointConfig(name=name, url=url, model="m", max_tokens=8, timeout_s=20.0,
                          first_token_timeout_s=15.0, **extra)


async def run_level(
    concurrency: int, seconds: float
) -> tuple[list[Sample], ServerMetrics, list[float], list[float]]:
    """Probes at exponential gaps beside `concurrency` closed-loop clients; scrapes every 0.4 s.

    It runs `seconds`, and longer (up to 4 times) until MIN_PROBES probes are in: a loaded box slows the
    probes, which queue behind the load's long prefills.
    """
    with start_sim_in_thread(SIM) as sim:
        async with HttpClient() as client:
            started = time.monotonic()
            samples: list[Sample] = []
            scraper = ServerScraper(config(sim.url, "probe"))

            def over() -> bool:
                elapsed = time.monotonic() - started
                return elapsed >= 4 * seconds or (elapsed >= seconds and len(samples) >= MIN_PROBES)

            async def load(i: int) -> None:
                endpoint = config(sim.url, f"load-{i}", LONG_PROMPT)
                for _ in range(1000):
                    if over():
                        return
                    await run_probe(client, endpoint)

            async def probes() -> None:
                endpoint, rng = config(sim.url, "probe"), random.Random(concurrency)
                for _ in range(1000):
                    await asyncio.sleep(rng.expovariate(1 / 0.12))
                    if over():
                        return
                    samples.append(await run_probe(client, endpoint))

            async def scrapes() -> None:
                for _ in range(1000):
                    if over():
                        return
                    await scraper.scrape(client)
                    await asyncio.sleep(0.4)

            await scraper.scrape(client)
            await asyncio.wait_for(asyncio.gather(probes(), scrapes(), *(load(i) for i in range(concurrency))),
                                   4 * seconds + 30)
            metrics = await scraper.scrape(client)
        ok = [s for s in samples if s.ok]
        truth, server_ttft = [], []
        for s in ok:
            record = sim.server.record_for(s.response_id)
            assert record is not None
            assert record.server_ttft_ms is not None
            server_ttft.append(record.server_ttft_ms)
            truth.append(s.ttft_ms - server_ttft[-1])
    return ok, metrics, truth, server_ttft


async def check_levels(levels: tuple[int, ...], seconds: float, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_tracker, "HISTOGRAMS_EVERY_S", 0.0)  # read them at every scrape
    old_errors = []
    for concurrency in levels:
        samples, metrics, truth, server_ttft = await run_level(concurrency, seconds)
        assert len(samples) >= MIN_PROBES, concurrency
        assert metrics.ok and metrics.server_ttft_ms is not None and metrics.server_ttft_ms.mean is not None
        gap = ttft_gap(samples, metrics)
        true_gap = statistics.fmean(truth)
        old = statistics.median(s.ttft_ms for s in samples) - metrics.server_ttft_ms.p50
        old_errors.append(old - true_gap)
        shown = "--" if gap.value_ms is None else f"{gap.value_ms:+.1f} ({gap.method})"
        print(f"\nconcurrency {concurrency}: {len(samples)} probes, true gap {true_gap:+.1f} ms, lpxtop {shown}"
              f"{'' if gap.reason is None else ': ' + gap.reason}; client p50 - server p50 {old:+.1f} ms")
        if concurrency == 0:
            # Only the probes used the server: every interval pairs, and the gap is exact.
            assert gap.method == "probe_only", gap
            assert gap.probes >= 0.6 * len(samples)
            # The server's own figures, idle: the TTFT mean is the engine's record of each request's TTFT
            # (the histogram's clock starts at the engine's entry, a hair after the front end's receipt),
            # and the queue time, a fraction of a millisecond in vLLM's 0-300 ms bucket (a few ms when the
            # box is busy and the sim's loop is late), reads as that where interpolation would say 150 ms.
            ttft = metrics.server_ttft_ms
            assert abs(ttft.mean - statistics.fmean(server_ttft)) <= TOLERANCE_MS, (ttft, server_ttft)
            assert ttft.max_at_most is not None and max(server_ttft) <= ttft.max_at_most + TOLERANCE_MS
            queue = metrics.server_queue_ms
            assert queue is not None and queue.p50 < 15.0 and queue.p50_range[1] < 15.0, queue
        if gap.value_ms is None:
            assert gap.reason, gap
            continue
        assert abs(gap.value_ms - true_gap) <= TOLERANCE_MS, (concurrency, gap, true_gap)
        assert gap.low_ms - TOLERANCE_MS <= true_gap <= gap.high_ms + TOLERANCE_MS, (concurrency, gap, true_gap)
    if len(levels) > 1:
        # The estimator it replaces, client p50 minus server p50, is off by tens of ms under this load.
        assert max(abs(e) for e in old_errors[1:]) > 20.0, old_errors


async def test_gap_idle_and_under_a_queueing_load(monkeypatch: pytest.MonkeyPatch) -> None:
    await check_levels((0, 2), seconds=1.5, monkeypatch=monkeypatch)


@pytest.mark.slow
async def test_gap_at_concurrency_1_2_4_8(monkeypatch: pytest.MonkeyPatch) -> None:
    await check_levels((0, 1, 2, 4, 8), seconds=5.0, monkeypatch=monkeypatch)
