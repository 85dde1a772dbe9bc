"""An endpoint's window: the last probes (bounded) and the summary built from them (`EndpointWindow`), and the
outcome count every probe window keeps for its loop's whole life (`Tally`, the agent step's window too:
engine/agent/window.py)."""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, insort
from collections import Counter, deque
from collections.abc import Sequence
from typing import Protocol

from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.probe import Percentiles, Sample
from lpxtop.model.server import ServerMetrics
from lpxtop.model.snapshot import EndpointView, GaugeSummary, ServerPoint, ServerSummary
from lpxtop.numbers import finite_or_none

DEFAULT_WINDOW_S = 300.0
DEFAULT_MAX_SAMPLES = 300
SERVER_HISTORY = 300


class Outcome(Protocol):
    """What a tally counts of a finished probe (a `Sample`, an `AgentStep`)."""

    @property
    def ok(self) -> bool: ...
    @property
    def client_limited(self) -> bool: ...
    @property
    def error_kind(self) -> str | None: ...
    @property
    def error_text(self) -> str | None: ...
    @property
    def wall_time(self) -> float: ...


class Tally:
    """How many probes a loop sent, how many succeeded and failed (by error kind), how many lpxtop was late
    for (`client_limited`), and the last error with its time: counts over the loop's whole life, not only the
    window's, until a reset."""

    __slots__ = ("sent", "ok", "failed", "client_limited", "errors", "last_error", "last_error_time")

    def __init__(self, sent: int = 0, ok: int = 0, failed: int = 0, client_limited: int = 0,
                 errors: dict[str, int] | None = None, last_error: str | None = None,
                 last_error_time: float | None = None) -> None:
        self.sent = sent
        self.ok = ok
        self.failed = failed
        self.client_limited = client_limited
        self.errors: Counter[str] = Counter(errors or {})
        self.last_error = last_error
        self.last_error_time = last_error_time

    def add(self, outcome: Outcome) -> None:
        self.sent += 1
        if outcome.client_limited:
            self.client_limited += 1
        if outcome.ok:
            self.ok += 1
        else:
            self.failed += 1
            self.errors[outcome.error_kind or "other"] += 1
            self.last_error = outcome.error_text
            self.last_error_time = outcome.wall_time

    def reset(self) -> None:
        self.sent = self.ok = self.failed = self.client_limited = 0
        self.errors.clear()
        self.last_error = None
        self.last_error_time = None


class EndpointWindow:
    """The last `window_s` seconds (at most `max_samples`) of one endpoint's probes, plus lifetime counters.

    A `client_limited` probe (lpxtop itself was late while it ran) stays in the window and its counts,
    but its times are left out of the percentiles unless `include_client_limited`, or unless no other
    successful probe is in the window (then the percentiles come from the client-limited ones, and the
    view says so: a marked figure rather than none, as for `once -n 1` on a busy host).
    """

    def __init__(
        self, window_s: float = DEFAULT_WINDOW_S, max_samples: int = DEFAULT_MAX_SAMPLES, *,
        include_client_limited: bool = False,
    ) -> None:
        self.window_s = window_s
        self.include_client_limited = include_client_limited
        self.tally = Tally()
        self.last_sample_end: float | None = None  # wall clock when the last probe finished
        self.samples: deque[Sample] = deque(maxlen=max_samples)
        self.server_history: deque[ServerPoint] = deque(maxlen=SERVER_HISTORY)
        # Each measure's values over the window, kept sorted as samples come and go: a few bisections
        # per probe instead of re-sorting ~4,600 ITL gaps for each summary. Arrays of doubles rather
        # than lists of floats: 8 bytes a value instead of 32.
        self._sorted: dict[str, array[float]] = {name: array("d") for name in (*_MEASURES, "itl_ms")}
        # the same for the client-limited probes left out of them, and how many of each are in the window
        self._limited: dict[str, array[float]] = {name: array("d") for name in (*_MEASURES, "itl_ms")}
        self._counted = {False: 0, True: 0}
        self._approx = 0  # successful samples in the window whose token count is approximate
        # The summary depends on the samples alone: rebuilt only when a sample comes or goes, not for
        # each /metrics scrape or in-flight flag that also makes a new view.
        self._summary: _Summary | None = None

    def add(self, sample: Sample) -> None:
        self._summary = None
        if len(self.samples) == self.samples.maxlen:
            self._count(self.samples[0], insert=False)  # the deque drops it on append
        self.samples.append(sample)
        self._count(sample, insert=True)
        self.tally.add(sample)
        # from the sample, not the clock: a replay adds the same samples later and must get the same figures
        self.last_sample_end = sample.end_wall_time if sample.end_wall_time is not None else sample.wall_time
        self._prune(sample.wall_time)

    def add_server_point(self, metrics: ServerMetrics, wall_time: float) -> None:
        # a gauge may legally be +Inf or NaN in /metrics: charts and sparklines get finite numbers or None
        self.server_history.append(
            ServerPoint(wall_time, finite_or_none(metrics.requests_waiting), finite_or_none(metrics.requests_running),
                        finite_or_none(metrics.kv_cache_usage))
        )

    def reset(self) -> None:
        self._summary = None
        self.samples.clear()
        for name in self._sorted:
            self._sorted[name] = array("d")
            self._limited[name] = array("d")
        self._counted = {False: 0, True: 0}
        self._approx = 0
        self.server_history.clear()
        self.tally.reset()
        self.last_sample_end = None

    def _prune(self, now: float) -> None:
        horizon = now - self.window_s
        while self.samples and self.samples[0].wall_time < horizon:
            self._count(self.samples.popleft(), insert=False)
            self._summary = None
        while self.server_history and self.server_history[0].wall_time < horizon:
            self.server_history.popleft()

    def _count(self, sample: Sample, insert: bool) -> None:
        """Put a successful sample's values into the sorted arrays, or take them out.

        Only finite numbers enter (a 400-digit token count, or a measure computed from one, is left
        out): the same test on the way in and out keeps the arrays consistent.
        """
        if not sample.ok:
            return
        apart = sample.client_limited and not self.include_client_limited
        arrays = self._limited if apart else self._sorted
        self._counted[apart] += 1 if insert else -1
        change = insert_sorted if insert else remove_sorted
        for name in _MEASURES:
            value = _measure(sample, name)
            if value is not None:
                change(arrays[name], value)
        itl = arrays["itl_ms"]
        for gap in sample.itl_ms:
            if math.isfinite(gap):
                change(itl, gap)
        if sample.output_tokens_approx:
            self._approx += 1 if insert else -1

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
        tally = self.tally
        if summary is None:
            only_limited = not self._counted[False] and self._counted[True] > 0
            summary = self._summary = _Summary(tuple(self.samples), self._limited if only_limited else self._sorted,
                                               self._approx > 0)
            summary.with_client_limited = only_limited or (self.include_client_limited and tally.client_limited > 0)
        server_summary = None
        if self.samples and self.last_sample_end is not None:
            server_summary = summarize_server(self.server_history, self.samples[0].wall_time, self.last_sample_end)
        return EndpointView(
            config=config,
            status=summary.status,
            model=model,
            server_kind=server_kind,
            probes_sent=tally.sent,
            probes_ok=tally.ok,
            probes_failed=tally.failed,
            probes_client_limited=tally.client_limited,
            percentiles_with_client_limited=summary.with_client_limited,
            errors=dict(tally.errors),
            ttft_ms=summary.ttft_ms,
            itl_ms=summary.itl_ms,
            tpot_ms=summary.tpot_ms,
            e2e_ms=summary.e2e_ms,
            output_tokens_per_s=summary.output_tokens_per_s,
            output_tokens=summary.output_tokens,
            output_tokens_approx=summary.output_tokens_approx,
            last_error=tally.last_error,
            last_error_time=tally.last_error_time,
            samples=summary.samples,
            server=server,
            server_history=tuple(self.server_history),
            in_flight=in_flight,
            server_summary=server_summary,
        )


def server_kind(config: EndpointConfig, server: ServerMetrics | None) -> str:
    """The kind the server's own /metrics says, else the configured one, else "unknown"."""
    if server is not None and server.kind not in ("", "unknown"):
        return server.kind
    return config.server_kind or "unknown"


def _measure(sample: Sample, name: str) -> float | None:
    try:
        return finite_or_none(getattr(sample, name))
    except (ArithmeticError, TypeError, ValueError):  # e.g. TPOT from a token count too large for a float
        return None


def summarize_server(points: Sequence[ServerPoint], since: float, until: float) -> ServerSummary | None:
    """Last, max and mean of the server's gauges over the scrapes taken between `since` and `until`."""
    inside = [p for p in points if since <= p.wall_time <= until]
    if not inside:
        return None

    def gauge(values: list[float | None]) -> GaugeSummary | None:
        known = [v for v in values if v is not None]
        if not known:
            return None
        return GaugeSummary(last=known[-1], max=max(known), mean=sum(known) / len(known), count=len(known))

    return ServerSummary(
        scrapes=len(inside),
        since=inside[0].wall_time,
        until=inside[-1].wall_time,
        requests_running=gauge([p.requests_running for p in inside]),
        requests_waiting=gauge([p.requests_waiting for p in inside]),
        kv_cache_usage=gauge([p.kv_cache_usage for p in inside]),
    )


class _Summary:
    """What a window's samples say, computed once per set of samples."""

    __slots__ = ("samples", "status", "ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "output_tokens_per_s",
                 "output_tokens", "output_tokens_approx", "with_client_limited")

    def __init__(self, samples: tuple[Sample, ...], ordered: dict[str, array[float]], approx: bool) -> None:
        self.samples = samples
        self.status = endpoint_status(samples)
        self.ttft_ms = Percentiles.of_sorted(ordered["ttft_ms"])
        self.itl_ms = Percentiles.of_sorted(ordered["itl_ms"])
        self.tpot_ms = Percentiles.of_sorted(ordered["tpot_ms"])
        self.e2e_ms = Percentiles.of_sorted(ordered["e2e_ms"])
        self.output_tokens_per_s = Percentiles.of_sorted(ordered["decode_tokens_per_s"])
        self.output_tokens = Percentiles.of_sorted(ordered["output_tokens"])
        self.output_tokens_approx = approx
        self.with_client_limited = False


# The per-sample measures summarized as percentiles (besides ITL, which has many values per sample).
_MEASURES = ("ttft_ms", "tpot_ms", "e2e_ms", "decode_tokens_per_s", "output_tokens")


def insert_sorted(values: array[float], value: float) -> None:
    """Put `value` in its place in ascending `values` (NaN is left out)."""
    if value == value:  # NaN has no place in an order: leave it out rather than corrupt the list
        insort(values, value)


def remove_sorted(values: array[float], value: float) -> None:
    """Take one `value` out of ascending `values`, if it is there."""
    i = bisect_left(values, value)
    if i < len(values) and values[i] == value:
        del values[i]


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
