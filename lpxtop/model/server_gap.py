"""Time outside the engine: the probe's TTFT minus the server's own TTFT, from comparable quantities only.

The server's TTFT histogram holds every request it served (the load, other users, the probes); the
probe's TTFT is the probe's alone. Their medians are two estimators over two populations: under a
load that queues, "client p50 minus server p50" read -1, +1, +36 and +1,107 ms at concurrency 1, 2, 4
and 8 where the real time outside vLLM's TTFT clock was ~6 ms at every level (tests/functional/test_server_metrics_gap_sim.py). So the gap is
shown only where the two sides describe the same requests, and otherwise not at all, with the reason:

- ``probe_only`` (exact): between two reads of the server's histogram the server counted exactly as
  many first tokens as lpxtop's probes had between those reads, so the histogram's sum growth is the
  server's TTFT of those very probes: gap = (Σ probe TTFT − Δsum) / n.
- ``joined_spans`` (exact, per probe): the server's own span of each probe came back with its TTFT
  (--traces-listen: lpxtop/engine/traces), so gap = the mean over those probes of client TTFT − server
  TTFT for that very request. It comes first: it holds under any load.
- ``window_means`` (an estimate with a range): other requests shared the window, but the histogram
  says every TTFT in it lay within a narrow range [a, b] (a server that did not queue). The probes'
  server TTFTs lay in it too, so their gap is within [client mean − b, client mean − a] for certain;
  the value is the client mean minus the server's exact mean over the window, which is in that range.
  A range wider than MAX_RANGE_MS is not shown: the server's TTFTs then vary with what other requests
  did (queueing, long prompts), which says nothing about the probe's.

The server's queue-time and prefill histograms cannot stand in for the probe's own: they too describe
the whole population, and a closed-loop load that enters the queue right as a request leaves it sees
other waits than a probe arriving at a random moment. They give the reason instead ("requests queued").
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lpxtop.model.probe import Sample
from lpxtop.model.server import ServerMetrics

if TYPE_CHECKING:
    from lpxtop.model.chain import ChainSummary

MAX_RANGE_MS = 20.0  # a window_means gap is shown only when the server's TTFTs fit in a range this narrow
QUEUED_MS = 1.0  # a mean queue time above this says the server queued requests in the window
METHODS = ("joined_spans", "probe_only", "window_means")


@dataclass(frozen=True)
class TtftGap:
    """The probe's TTFT minus the server's own for the same requests (ms), with how it was found.

    `value_ms` is None when no comparable quantities exist; `reason` then says why. `low_ms`/`high_ms`
    bound the true gap (equal to the value for ``probe_only``). `probes` is how many probes it covers.
    """

    value_ms: float | None
    method: str | None = None
    low_ms: float | None = None
    high_ms: float | None = None
    probes: int = 0
    reason: str | None = None

    @property
    def estimate(self) -> bool:
        return self.method == "window_means"

    def to_json(self) -> dict:
        def r(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else round(x, 3)

        return {
            "value": r(self.value_ms),
            "method": self.method,
            "estimate": self.estimate,
            "range": None if self.value_ms is None else [r(self.low_ms), r(self.high_ms)],
            "probes": self.probes,
            "reason": self.reason,
        }


# A TTFT beyond a day is no measurement (a hostile or broken sample): it cannot be placed on the clock.
MAX_TTFT_MS = 86_400_000.0


def ttft_gap(samples: Sequence[Sample], server: ServerMetrics | None, chain: ChainSummary | None = None) -> TtftGap:
    """The gap for one endpoint: its probes in the window (oldest first) against its server's metrics, or
    its probes joined to their own server spans (`chain`) when there are any."""
    outside = chain.outside_ms if chain is not None else None
    if outside is not None and outside.count and math.isfinite(outside.mean):
        return TtftGap(outside.mean, "joined_spans", outside.mean, outside.mean, outside.count)
    if server is None or not server.ok:
        return TtftGap(None, reason="no server metrics")
    latency = server.server_ttft_ms
    if latency is None:
        return TtftGap(None, reason=f"{server.kind} has no TTFT histogram")
    intervals = [iv for iv in server.ttft_intervals if iv.end_ns > iv.start_ns]
    # (start, first token, TTFT, lpxtop itself was late): a probe whose own process was held up (the
    # engine's loop or thread late, `client_limited`) has lpxtop's delay in its TTFT, not the network's
    probes = sorted(
        (s.start_ns, s.start_ns + int(s.ttft_ms * 1e6), s.ttft_ms, bool(getattr(s, "client_limited", False)))
        for s in samples
        if s.ok and s.ttft_ms is not None and math.isfinite(s.ttft_ms) and 0 <= s.ttft_ms < MAX_TTFT_MS
    )
    if not probes:
        return TtftGap(None, reason="no successful probe yet")
    starts = [p[0] for p in probes]

    # probe_only: reads between which the server counted just the probes' first tokens
    n, client_ms, server_ms = 0, 0.0, 0.0
    for iv in intervals:
        if iv.count is None or iv.sum_ms is None or iv.count < 0.5:
            continue
        at = bisect.bisect_left(starts, iv.start_ns)
        inside, late = [], False
        while at < len(probes) and probes[at][0] <= iv.end_ns:
            if probes[at][1] <= iv.end_ns:
                inside.append(probes[at][2])
                late = late or probes[at][3]
            at += 1
        if inside and not late and abs(len(inside) - iv.count) < 0.5:
            n += len(inside)
            client_ms += math.fsum(inside)
            server_ms += iv.sum_ms
    if n:
        value = (client_ms - server_ms) / n
        return TtftGap(value, "probe_only", value, value, n)

    if latency.count <= 0 or latency.mean is None:
        return TtftGap(None, reason="the server counted no first token in its window yet")
    if intervals:  # the probes of the window the server's mean covers
        first = bisect.bisect_left(starts, intervals[0].start_ns)
        end = intervals[-1].end_ns
        window = [p[2] for p in probes[first:] if p[1] <= end and not p[3]]
    else:  # no read times (a replayed recording of an older lpxtop): the whole window
        window = [p[2] for p in probes if not p[3]]
    if not window:
        return TtftGap(None, reason="no successful probe in the server's window")
    client_mean = math.fsum(window) / len(window)
    at_least, at_most = latency.min_at_least, latency.max_at_most
    queue = server.server_queue_ms
    if at_least is None or at_most is None or at_most - at_least > MAX_RANGE_MS:
        if queue is not None and queue.mean is not None and queue.mean > QUEUED_MS:
            return TtftGap(None, reason=(
                f"the server queued other requests (mean wait {queue.mean:.0f} ms): "
                "its TTFT is theirs, not the probe's"
            ))
        spread = "up to no known bound" if at_most is None else f"over {at_least or 0:.0f}–{at_most:.0f} ms"
        return TtftGap(None, reason=(
            f"the server's TTFTs in its window spread {spread} with other requests in it: "
            "too wide to compare with the probe's"
        ))
    value = client_mean - latency.mean
    low, high = client_mean - at_most, client_mean - at_least
    return TtftGap(min(max(value, low), high), "window_means", low, high, len(window))
