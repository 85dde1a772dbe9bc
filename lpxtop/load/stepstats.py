"""A step's requests, kept compactly, and the step's statistics computed from them.

Definitions as `vllm bench serve` (and lpxtop's probes: docs/measurement.md, "The figures"; a step's window: docs/load.md): TTFT at the
first token-bearing event, E2E at the last, TPOT = (E2E − TTFT)/(N − 1) with N from `usage`, ITL pooled
over every gap between token-bearing events of every successful request, throughputs over the measured
duration = first send to last completion of the counted requests. Percentiles with linear interpolation,
std over the population (numpy's defaults, as vLLM).

Memory stays bounded by the step: each request is kept as a few numbers (`RequestRecord`, no token list)
and the pooled ITL gaps in one `array('d')`; the live view reads only the most recent requests.
"""

from __future__ import annotations

from array import array
from collections import Counter, deque
from dataclasses import dataclass

from lpxtop.model.load import ClientHealth, Dist, ServerDuringStep, StepResult
from lpxtop.model.probe import Sample, quantile_sorted
from lpxtop.textsafe import scrub

LIVE_REQUESTS = 500  # the live view's percentiles cover at most this many recent requests
LIVE_GAPS = 5000


@dataclass(slots=True)
class RequestRecord:
    """One finished request of a step, reduced to what the statistics and the JSONL need."""

    phase: str  # "warmup" | "measured" | "drain"
    start_wall: float
    start_ns: int
    end_ns: int  # when the request was over (its body read): the completion time for throughputs
    ok: bool
    error_kind: str | None
    error_message: str | None
    http_status: int | None
    response_id: str | None
    ttft_ms: float | None
    e2e_ms: float | None
    tpot_ms: float | None
    output_tokens: int | None
    output_tokens_approx: bool
    prompt_tokens: int | None
    token_events: int
    lag_ms: float  # the most the generator's loop was late while this request was in flight
    # The W3C trace context the request carried (engine/probe/tracecontext.py), and the wall clock as it was sent
    trace_id: str | None = None
    span_id: str | None = None
    sent_wall_ns: int | None = None

    @classmethod
    def of(cls, sample: Sample, end_ns: int, lag_ms: float, phase: str) -> RequestRecord:
        return cls(
            phase=phase,
            start_wall=sample.wall_time,
            start_ns=sample.start_ns,
            end_ns=end_ns,
            ok=sample.ok,
            error_kind=sample.error_kind,
            error_message=sample.error_message,
            http_status=sample.http_status,
            response_id=sample.response_id,
            ttft_ms=sample.ttft_ms,
            e2e_ms=sample.e2e_ms,
            tpot_ms=sample.tpot_ms,
            output_tokens=sample.output_tokens,
            output_tokens_approx=sample.output_tokens_approx,
            prompt_tokens=sample.prompt_tokens,
            token_events=len(sample.token_event_ms),
            lag_ms=lag_ms,
            trace_id=sample.trace_id,
            span_id=sample.span_id,
            sent_wall_ns=sample.sent_wall_ns,
        )

    def to_json(self, step: int, mode: str, level: float) -> dict:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 3)

        return {
            "step": step,
            mode: level if mode == "rate" else int(level),
            "phase": self.phase,
            "counted": self.phase == "measured",
            "start_time": round(self.start_wall, 6),
            "latency_ms": round((self.end_ns - self.start_ns) / 1e6, 3),
            "ok": self.ok,
            "error": self.error_kind,
            "error_message": scrub(self.error_message),
            "http_status": self.http_status,
            "response_id": self.response_id,
            "ttft_ms": r(self.ttft_ms),
            "e2e_ms": r(self.e2e_ms),
            "tpot_ms": r(self.tpot_ms),
            "output_tokens": self.output_tokens,
            "output_tokens_approximate": self.output_tokens_approx,
            "prompt_tokens": self.prompt_tokens,
            "token_events": self.token_events,
            "client_lag_ms": round(self.lag_ms, 3),
            "trace_id": self.trace_id,
            "span_id": self.span_id,
        }

    def meets(self, bounds: dict[str, float]) -> bool:
        """Whether this request met every per-request bound (the goodput's test)."""
        if not self.ok:
            return False
        for name, bound in bounds.items():
            value = {"ttft": self.ttft_ms, "tpot": self.tpot_ms, "e2e": self.e2e_ms}[name]
            if name == "tpot" and value is None:
                continue  # a one-token answer has no TPOT (vLLM counts it as met too)
            if value is None or value > bound:
                return False
        return True


class StepRequests:
    """The counted requests of one step (those sent inside its measured window), and the pooled gaps."""

    def __init__(self) -> None:
        self.records: list[RequestRecord] = []
        self.gaps = array("d")
        self.recent: deque[RequestRecord] = deque(maxlen=LIVE_REQUESTS)
        self.recent_gaps: deque[float] = deque(maxlen=LIVE_GAPS)
        self.completed = 0
        self.failed = 0
        self.output_tokens = 0
        self.first_start_ns: int | None = None
        self.last_end_ns: int | None = None

    def add(self, record: RequestRecord, sample: Sample) -> None:
        self.records.append(record)
        self.recent.append(record)
        if record.ok:
            self.completed += 1
            self.output_tokens += record.output_tokens or 0
            gaps = sample.itl_ms
            self.gaps.extend(gaps)
            self.recent_gaps.extend(gaps)
        else:
            self.failed += 1
        if self.first_start_ns is None or record.start_ns < self.first_start_ns:
            self.first_start_ns = record.start_ns
        if self.last_end_ns is None or record.end_ns > self.last_end_ns:
            self.last_end_ns = record.end_ns

    def add_failure(self, record: RequestRecord) -> None:
        """A counted request that never finished (the step's deadline passed): a failure without a sample."""
        self.records.append(record)
        self.recent.append(record)
        self.failed += 1
        if self.first_start_ns is None or record.start_ns < self.first_start_ns:
            self.first_start_ns = record.start_ns
        if self.last_end_ns is None or record.end_ns > self.last_end_ns:
            self.last_end_ns = record.end_ns

    @property
    def duration_s(self) -> float:
        if self.first_start_ns is None or self.last_end_ns is None:
            return 0.0
        return max(0.0, (self.last_end_ns - self.first_start_ns) / 1e9)


def summarize(
    base: StepResult,
    records: list[RequestRecord] | deque[RequestRecord],
    gaps,
    duration_s: float,
    *,
    goodput_bounds: dict[str, float] | None = None,
    client: ClientHealth | None = None,
    server: ServerDuringStep | None = None,
    status: str | None = None,
) -> StepResult:
    """`base` (the step's plan: level, mode, targets) filled with the statistics of `records`."""
    ok = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    errors = Counter(r.error_kind or "other" for r in failed)
    total_out = sum(r.output_tokens or 0 for r in ok)
    total_in = sum(r.prompt_tokens or 0 for r in ok)
    per_s = (lambda x: x / duration_s) if duration_s > 0 else (lambda x: None)
    good = None
    if goodput_bounds:
        good = per_s(sum(1 for r in ok if r.meets(goodput_bounds)))
    return StepResult(
        **{
            **_base_fields(base),
            "status": status or base.status,
            "duration_s": duration_s,
            "completed": len(ok),
            "failed": len(failed),
            "errors": tuple(sorted(errors.items())),
            "total_input_tokens": total_in,
            "total_output_tokens": total_out,
            "input_tokens_from_usage": all(r.prompt_tokens is not None for r in ok),
            "output_tokens_approx": any(r.output_tokens_approx for r in ok),
            "request_throughput": per_s(len(ok)),
            "output_throughput": per_s(total_out),
            "total_token_throughput": per_s(total_in + total_out),
            "request_goodput": good,
            "ttft_ms": Dist.of([r.ttft_ms for r in ok if r.ttft_ms is not None]),
            "tpot_ms": Dist.of([r.tpot_ms for r in ok if r.tpot_ms is not None]),
            "itl_ms": Dist.of(gaps),
            "e2el_ms": Dist.of([r.e2e_ms for r in ok if r.e2e_ms is not None]),
            "client": client if client is not None else base.client,
            "server": server if server is not None else base.server,
        }
    )


def _base_fields(step: StepResult) -> dict:
    return {name: getattr(step, name) for name in StepResult.__dataclass_fields__}


def client_health(
    lags_ms, cpu_wait_share: float | None, *, lag_limit_ms: float, cpu_wait_limit: float, fd_failures: int = 0
) -> ClientHealth:
    """Judge whether the generator was short of CPU: its loop late (p99 of the lateness sampled through the
    window, `ticklag.TickLag`) beyond `lag_limit_ms`, or its thread waiting for a CPU beyond `cpu_wait_limit`
    of the window; or short of file descriptors: `fd_failures` of the step's requests could not open a
    connection (EMFILE/ENFILE, error kind `client_fd_limit`), so the load was not held as planned."""
    ordered = sorted(lags_ms)
    p99 = quantile_sorted(ordered, 0.99) if ordered else None
    worst = ordered[-1] if ordered else None
    reasons = []
    if p99 is not None and p99 > lag_limit_ms:
        reasons.append(f"its event loop ran {p99:.0f} ms late (p99 over the step; limit {lag_limit_ms:g} ms)")
    if cpu_wait_share is not None and cpu_wait_share > cpu_wait_limit:
        reasons.append(
            f"its thread waited for a CPU {cpu_wait_share * 100:.0f} % of the step (limit {cpu_wait_limit * 100:g} %)"
        )
    reason = ("lpxtop's load generator was short of CPU: " + "; ".join(reasons)) if reasons else None
    if fd_failures:
        fds = (f"lpxtop's load generator ran out of file descriptors: {fd_failures} request(s) could not open a "
               "connection (client_fd_limit; raise `ulimit -n`)")
        reason = f"{fds}; {reason}" if reason else fds
    return ClientHealth(
        lag_p99_ms=p99,
        lag_max_ms=worst,
        cpu_wait_share=cpu_wait_share,
        limited=reason is not None,
        reason=reason,
    )


