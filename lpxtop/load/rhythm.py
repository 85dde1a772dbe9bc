"""The rhythm of a step's sends: how synchronised its requests left (docs/load-vs-vllm-bench.md).

A closed loop sends each worker's next request the moment its previous one ends. When every request takes
the same number of the server's steps (one output length, `--ignore-eos`), requests that started together
end together, so the workers send in rounds: all C within a few tens of milliseconds, then nothing until
the round ends. `vllm bench serve --max-concurrency C` at its default `--request-rate inf` does the same (a
semaphore of C over tasks that all exist from the start). A round meets the server differently from users
who arrive independently: its prefills share steps in which (almost) nothing decodes, where an independent
arrival's prefill joins a full decoding batch.

Two figures over the send times of a step's counted requests (all the requests sent in its window):
- `synchrony` (closed loop of C workers): for each request, the share of the other C − 1 workers whose
  request left within `WINDOW_MS` of it (before or after), averaged over the requests. 1.0: every round
  left within 50 ms; sends spread evenly over a request's duration T give about 0.1 s / T.
- `dispersion`: the index of dispersion (variance / mean) of the number of sends in consecutive
  `WINDOW_MS` bins over the sends' span: 1 for independent (Poisson) arrivals, below 1 for evenly spaced
  sends, far above 1 for rounds.

`schedule` says how the closed loop's workers started: "together" (at once, as `vllm bench serve`) or
"staggered" (`--stagger`: spread over the warm-up, so that they stay apart); "arrivals" for an open loop.
`ttft_from` says where each request's clock started: "sent" (when it went out, lpxtop's default) or "call"
(`--ttft-from call`: when the worker made it, before lpxtop's own loop sent it, as `vllm bench serve`).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from lpxtop.model.load import RHYTHM_WINDOW_MS as WINDOW_MS
from lpxtop.model.load import Rhythm


def synchrony(send_ns: Sequence[int], workers: int, window_ms: float = WINDOW_MS) -> float | None:
    """Mean share of the other `workers` − 1 whose send fell within `window_ms` of each send (see above)."""
    if workers < 2 or len(send_ns) < 2:
        return None
    times = sorted(send_ns)
    reach = int(window_ms * 1e6)
    total = 0.0
    for t in times:
        lo = bisect.bisect_left(times, t - reach)
        hi = bisect.bisect_right(times, t + reach)
        # one worker has one request in flight: at most workers − 1 others can be near it
        total += min(hi - lo - 1, workers - 1) / (workers - 1)
    return total / len(times)


def dispersion(send_ns: Sequence[int], window_ms: float = WINDOW_MS) -> float | None:
    """Variance / mean of the sends per `window_ms` bin over the sends' span (None with fewer than 2 bins)."""
    if len(send_ns) < 2:
        return None
    first, last = min(send_ns), max(send_ns)
    width = int(window_ms * 1e6)
    bins = (last - first) // width + 1
    if bins < 2:
        return None
    counts = [0] * bins
    for t in send_ns:
        counts[(t - first) // width] += 1
    mean = len(send_ns) / bins
    variance = sum((c - mean) ** 2 for c in counts) / bins
    return variance / mean


def rhythm_of(send_ns: Sequence[int], *, schedule: str, workers: int | None, ttft_from: str = "sent") -> Rhythm:
    """The rhythm of sends at `send_ns` (perf_counter_ns); `workers` is a closed loop's concurrency."""
    return Rhythm(
        schedule=schedule,
        ttft_from=ttft_from,
        synchrony=synchrony(send_ns, workers) if workers is not None else None,
        dispersion=dispersion(send_ns),
        sends=len(send_ns),
    )
