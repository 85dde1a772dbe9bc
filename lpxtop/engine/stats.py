"""Bounded rolling windows of probe samples, and the per-endpoint summary built from them."""

from __future__ import annotations

import itertools
from collections import Counter, deque
from collections.abc import Iterable

from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.probe import Percentiles, Sample
from lpxtop.model.server import ServerMetrics
from lpxtop.model.snapshot import EndpointView, ServerPoint

DEFAULT_WINDOW_S = 300.0
DEFAULT_MAX_SAMPLES = 300
SERVER_HISTORY = 300


class EndpointWindow:
    """The last `window_s` seconds (at most `max_samples`) of one endpoint's probes, plus lifetime counters."""

    def __init__(self, window_s: float = DEFAULT_WINDOW_S, max_samples: int = DEFAULT_MAX_SAMPLES) -> None:
        self.window_s = window_s
        self.samples: deque[Sample] = deque(maxlen=max_samples)
        self.server_history: deque[ServerPoint] = deque(maxlen=SERVER_HISTORY)
        self.sent = 0
        self.ok = 0
        self.failed = 0
        self.errors: Counter[str] = Counter()
        self.last_error: str | None = None
        self.last_error_time: float | None = None

    def add(self, sample: Sample) -> None:
        self.samples.append(sample)
        self.sent += 1
        if sample.ok:
            self.ok += 1
        else:
            self.failed += 1
            self.errors[sample.error_kind or "other"] += 1
            self.last_error = sample.error_text
            self.last_error_time = sample.wall_time
        self._prune(sample.wall_time)

    def add_server_point(self, metrics: ServerMetrics, wall_time: float) -> None:
        self.server_history.append(
            ServerPoint(wall_time, metrics.requests_waiting, metrics.requests_running, metrics.kv_cache_usage)
        )

    def reset(self) -> None:
        self.samples.clear()
        self.server_history.clear()
        self.sent = self.ok = self.failed = 0
        self.errors.clear()
        self.last_error = None
        self.last_error_time = None

    def _prune(self, now: float) -> None:
        horizon = now - self.window_s
        while self.samples and self.samples[0].wall_time < horizon:
            self.samples.popleft()
        while self.server_history and self.server_history[0].wall_time < horizon:
            self.server_history.popleft()

    def view(
        self,
        config: EndpointConfig,
        *,
        now: float,
        model: str | None,
        server: ServerMetrics | None,
        server_kind: str,
        in_flight: bool = False,
    ) -> EndpointView:
        """Summarize the window into an immutable view."""
        self._prune(now)
        samples = tuple(self.samples)
        good = [s for s in samples if s.ok]
        approx = any(s.output_tokens_approx for s in good)
        return EndpointView(
            config=config,
            status=endpoint_status(samples),
            model=model,
            server_kind=server_kind,
            probes_sent=self.sent,
            probes_ok=self.ok,
            probes_failed=self.failed,
            errors=dict(self.errors),
            ttft_ms=Percentiles.of(_present(s.ttft_ms for s in good)),
            itl_ms=Percentiles.of(list(itertools.chain.from_iterable(s.itl_ms for s in good))),
            tpot_ms=Percentiles.of(_present(s.tpot_ms for s in good)),
            e2e_ms=Percentiles.of(_present(s.e2e_ms for s in good)),
            output_tokens_per_s=Percentiles.of(_present(s.decode_tokens_per_s for s in good)),
            output_tokens=Percentiles.of(_present(s.output_tokens for s in good)),
            output_tokens_approx=approx,
            last_error=self.last_error,
            last_error_time=self.last_error_time,
            samples=samples,
            server=server,
            server_history=tuple(self.server_history),
            in_flight=in_flight,
        )


def _present(values: Iterable[float | int | None]) -> list[float]:
    return [float(v) for v in values if v is not None]


def endpoint_status(samples: tuple[Sample, ...]) -> str:
    """up: the last probes succeeded; degraded: some of the last 5 failed; down: the last 3 failed
    (or every probe so far, when there are fewer); pending: nothing finished yet."""
    if not samples:
        return "pending"
    recent = samples[-5:]
    last3 = samples[-3:]
    if all(not s.ok for s in last3):
        return "down"
    if any(not s.ok for s in recent):
        return "degraded"
    return "up"
