"""One probe's result, and percentile summaries over a window of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class Percentiles:
    """p50/p95/p99/mean/max of a window, linear interpolation (numpy's default, as vllm bench serve)."""

    p50: float
    p95: float
    p99: float
    mean: float
    max: float
    count: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Percentiles | None:
        return cls.of_sorted(sorted(values))

    @classmethod
    def of_sorted(cls, ordered: Sequence[float]) -> Percentiles | None:
        """As `of`, for values already in ascending order."""
        if not ordered:
            return None
        return cls(
            p50=quantile_sorted(ordered, 0.50),
            p95=quantile_sorted(ordered, 0.95),
            p99=quantile_sorted(ordered, 0.99),
            mean=sum(ordered) / len(ordered),
            max=ordered[-1],
            count=len(ordered),
        )

    def to_json(self, digits: int = 3) -> dict:
        return {
            "p50": round(self.p50, digits),
            "p95": round(self.p95, digits),
            "p99": round(self.p99, digits),
            "mean": round(self.mean, digits),
            "max": round(self.max, digits),
        }


def quantile_sorted(ordered: Sequence[float], q: float) -> float:
    """Quantile of sorted values with linear interpolation between closest ranks (numpy 'linear')."""
    if not ordered:
        raise ValueError("no values")
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    frac = pos - lo
    return ordered[lo] + (ordered[hi] - ordered[lo]) * frac


@dataclass(frozen=True)
class Sample:
    """The outcome of one streaming request, measured at byte arrival.

    Times in milliseconds relative to `start_ns` (perf_counter_ns taken just before sending).
    `error_kind` is None for a success, else one of the classes in ERROR_KINDS.
    """

    endpoint: str
    wall_time: float  # time.time() at start, for display and charts
    start_ns: int  # time.perf_counter_ns() just before the request was sent
    ok: bool
    error_kind: str | None = None
    error_message: str | None = None
    http_status: int | None = None
    response_id: str | None = None
    model: str | None = None
    connect_ms: float | None = None  # time spent waiting for a pooled/new connection
    first_event_ms: float | None = None  # first SSE event of any kind (may be role-only)
    ttft_ms: float | None = None  # first token-bearing event
    e2e_ms: float | None = None  # last token-bearing event
    token_event_ms: tuple[float, ...] = ()  # arrival of each token-bearing event
    tokens_per_event: tuple[int, ...] = ()  # 1 each unless the server says otherwise
    output_tokens: int | None = None
    output_tokens_approx: bool = False  # True when counted from events (no usage chunk)
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    retry_after_s: float | None = None
    end_wall_time: float | None = None  # time.time() when the probe ended (None: when it began)
    client_limited: bool = False  # lpxtop itself was late while it ran (loop lag or CPU wait): see engine/probe/clientlimit.py
    # lpxtop's own wait for a free connection of its pool before sending (not in TTFT); None: no request got a slot
    pool_wait_ms: float | None = None
    redirected_to: str | None = None  # the final URL when the server redirected the probe (query string left out)
    # The W3C trace context the request carried (`traceparent`, engine/probe/tracecontext.py): lpxtop's client
    # span (lpxtop/otel), so the server's own spans of this request can be joined to it
    trace_id: str | None = None
    span_id: str | None = None
    sent_wall_ns: int | None = None  # time.time_ns() at start_ns (the wall clock as the request counted as sent)

    @property
    def itl_ms(self) -> tuple[float, ...]:
        """Gaps between consecutive token-bearing events."""
        t = self.token_event_ms
        return tuple(b - a for a, b in zip(t, t[1:]))

    # Cached on the (frozen) sample: the window's sorted lists read them when the sample comes and goes.
    @cached_property
    def tpot_ms(self) -> float | None:
        """(E2E − TTFT) / (N − 1), only for N > 1."""
        n = self.output_tokens
        if not self.ok or n is None or n <= 1 or self.e2e_ms is None or self.ttft_ms is None:
            return None
        return (self.e2e_ms - self.ttft_ms) / (n - 1)

    @cached_property
    def decode_tokens_per_s(self) -> float | None:
        """(N − 1) / (E2E − TTFT): the decode rate a user of this stream sees."""
        n = self.output_tokens
        if not self.ok or n is None or n <= 1 or self.e2e_ms is None or self.ttft_ms is None:
            return None
        span = self.e2e_ms - self.ttft_ms
        return (n - 1) / (span / 1000.0) if span > 0 else None

    @property
    def error_text(self) -> str | None:
        if self.error_kind is None:
            return None
        return f"{self.error_kind}: {self.error_message}" if self.error_message else self.error_kind


ERROR_KINDS = (
    "refused",
    "dns",
    "tls",
    "connect_timeout",
    "first_token_timeout",
    "read_timeout",
    "http_401",
    "http_403",
    "http_404",
    "http_429",
    "http_4xx",
    "http_5xx",
    "http_3xx",  # a redirect not followed (a POST moved by 301/302/303, a loop, too many hops)
    "http_other",  # a final status that is neither the answer nor an error (another 2xx, > 599)
    "stream_cut",
    "bad_json",
    "error_event",
    "not_streamed",  # one JSON body (or a page) instead of an event stream: see engine/probe/reads.py body_error
    "empty",
    "no_model",  # GET /models answered an empty list and no model was named: nothing to ask for
    "client_fd_limit",  # lpxtop's own file descriptors ran out (EMFILE/ENFILE): its limit, not the server's
    "other",
)
