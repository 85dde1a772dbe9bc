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
        # The percentiles depend on the samples alone: recomputed only when a sample comes or goes,
        # not for each /metrics scrape or in-flight flag that also makes a new view.
        self._summary: _Summary | None = None

    def add(self, sample: Sample) -> None:
        self._summary = None
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
        self._summary = None
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
            self._summary = None
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
        summary = self._summary
        if summary is None:
            summary = self._summary = _Summary(tuple(self.samples))
        return EndpointView(
            config=config,
            status=summary.status,
            model=model,
            server_kind=server_kind,
            probes_sent=self.sent,
            probes_ok=self.ok,
            probes_failed=self.failed,
            errors=dict(self.errors),
            ttft_ms=summary.ttft_ms,
            itl_ms=summary.itl_ms,
            tpot_ms=summary.tpot_ms,
            e2e_ms=summary.e2e_ms,
            output_tokens_per_s=summary.output_tokens_per_s,
            output_tokens=summary.output_tokens,
            output_tokens_approx=summary.output_tokens_approx,
            last_error=self.last_error,
            last_error_time=self.last_error_time,
            samples=summary.samples,
            server=server,
            server_history=tuple(self.server_history),
            in_flight=in_flight,
        )


class _Summary:
    """What a window's samples say, computed once per set of samples."""

    __slots__ = ("samples", "status", "ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "output_tokens_per_s",
                 "output_tokens", "output_tokens_approx")

    def __init__(self, samples: tuple[Sample, ...]) -> None:
        good = [s for s in samples if s.ok]
        self.samples = samples
        self.status = endpoint_status(samples)
        self.ttft_ms = Percentiles.of(_present(s.ttft_ms for s in good))
        self.itl_ms = Percentiles.of(list(itertools.chain.from_iterable(s.itl_ms for s in good)))
        self.tpot_ms = Percentiles.of(_present(s.tpot_ms for s in good))
        self.e2e_ms = Percentiles.of(_present(s.e2e_ms for s in good))
        self.output_tokens_per_s = Percentiles.of(_present(s.decode_tokens_per_s for s in good))
        self.output_tokens = Percentiles.of(_present(s.output_tokens for s in good))
        self.output_tokens_approx = any(s.output_tokens_approx for s in good)


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
