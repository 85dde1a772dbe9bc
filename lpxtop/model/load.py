"""A load test's results and live state: frozen records the load controller publishes and every reader
(the dashboard, `--json`, `--csv`, a recording) renders.

Per-step keys in `StepResult.to_json` follow `vllm bench serve`'s result names (`completed`, `failed`,
`duration`, `request_throughput`, `output_throughput`, `mean_ttft_ms`, `median_ttft_ms`, `p95_ttft_ms` ...,
the same for `tpot`, `itl` and `e2el`), so scripts and plots made for it read lpxtop's steps too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from lpxtop.jsonout import json_safe
from lpxtop.model.chain import StepChain
from lpxtop.model.probe import quantile_sorted

SCHEMA = "lpxtop-load/1"
MODES = ("concurrency", "rate", "input_tokens")
QUANTILES = (50, 90, 95, 99)
# Time of a step in these phases is not measured: warm-up before, drain after the measured window.
RHYTHM_WINDOW_MS = 50.0
SCHEDULES = ("together", "staggered", "arrivals")  # how a step's requests were scheduled (see Rhythm)
PHASES = ("starting", "warmup", "measuring", "draining", "judging", "done", "stopped", "failed")


def _r(x: float | None, digits: int = 3) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, digits)


@dataclass(frozen=True)
class Dist:
    """Summary of one latency over a step's requests: mean, population std (numpy's default, as vLLM),
    max and the p50/p90/p95/p99 quantiles with linear interpolation."""

    count: int
    mean: float
    std: float
    p50: float
    p90: float
    p95: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Dist | None:
        ordered = sorted(values)
        if not ordered:
            return None
        n = len(ordered)
        mean = math.fsum(ordered) / n
        var = math.fsum((v - mean) ** 2 for v in ordered) / n
        return cls(
            count=n,
            mean=mean,
            std=math.sqrt(var),
            p50=quantile_sorted(ordered, 0.50),
            p90=quantile_sorted(ordered, 0.90),
            p95=quantile_sorted(ordered, 0.95),
            p99=quantile_sorted(ordered, 0.99),
            max=ordered[-1],
        )

    def quantile(self, q: int) -> float:
        return {50: self.p50, 90: self.p90, 95: self.p95, 99: self.p99}[q]

    def stat(self, name: str) -> float:
        """A statistic by the SLO's name for it: p50/p90/p95/p99, mean, median or max."""
        if name == "median":
            return self.p50
        return float(getattr(self, name))


@dataclass(frozen=True)
class ObjectiveResult:
    """One SLO objective judged on a step: the step's value and whether it met the bound."""

    objective: str  # as written, normalized: "ttft_p95<=500ms"
    metric: str  # "ttft_p95", "error_rate", "output_throughput"
    value: float | None  # in the objective's base unit (ms, share 0..1, tokens/s); None: no data
    met: bool

    def to_json(self) -> dict:
        return {"objective": self.objective, "metric": self.metric, "value": _r(self.value, 4), "met": self.met}


@dataclass(frozen=True)
class ServerDuringStep:
    """What the server itself reported during a step's measured window (None: it does not say).

    Peaks come from the /metrics scrapes in the window; counters (`preemptions`, the prefix cache, the
    server's own TTFT and queue time, as exact means Δsum/Δcount) are differences between the readings
    at the window's two ends.
    """

    kind: str | None = None
    status: str = "ok"  # or why there are no server figures ("no /metrics: HTTP 404")
    scrapes: int = 0
    peak_requests_waiting: float | None = None
    peak_requests_running: float | None = None
    peak_kv_cache_usage: float | None = None
    last_requests_waiting: float | None = None
    first_requests_waiting: float | None = None
    preemptions: float | None = None
    prefix_cache_hit_rate: float | None = None
    mean_ttft_ms: float | None = None
    mean_queue_ms: float | None = None
    generation_tokens: float | None = None
    # The GPUs' energy over the same two counter readings (engine/gpu/accel/energy.py), and per generated token
    energy_j: float | None = None
    joules_per_output_token: float | None = None
    energy_gpus: tuple[str, ...] = ()
    energy_note: str | None = None  # why there is no figure, or how it was taken ("power": integrated readings)

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "status": self.status,
            "scrapes": self.scrapes,
            "peak_requests_waiting": self.peak_requests_waiting,
            "peak_requests_running": self.peak_requests_running,
            "peak_kv_cache_usage": _r(self.peak_kv_cache_usage, 4),
            "first_requests_waiting": self.first_requests_waiting,
            "last_requests_waiting": self.last_requests_waiting,
            "preemptions": self.preemptions,
            "prefix_cache_hit_rate": _r(self.prefix_cache_hit_rate, 4),
            "mean_ttft_ms": _r(self.mean_ttft_ms),
            "mean_queue_ms": _r(self.mean_queue_ms),
            "generation_tokens": self.generation_tokens,
            "energy_j": _r(self.energy_j, 3),
            "joules_per_output_token": _r(self.joules_per_output_token, 4),
            "energy_gpus": list(self.energy_gpus),
            "energy_note": self.energy_note,
        }


@dataclass(frozen=True)
class Rhythm:
    """How synchronised a step's sends were (lpxtop/load/rhythm.py defines the figures)."""

    schedule: str
    synchrony: float | None = None  # closed loop only
    dispersion: float | None = None
    sends: int = 0
    ttft_from: str = "sent"  # where each request's clock started: "sent" or "call" (lpxtop/load/rhythm.py)

    def to_json(self) -> dict:
        return {
            "schedule": self.schedule,
            "ttft_from": self.ttft_from,
            "window_ms": RHYTHM_WINDOW_MS,
            "synchrony": None if self.synchrony is None else round(self.synchrony, 4),
            "dispersion": None if self.dispersion is None else round(self.dispersion, 3),
            "sends": self.sends,
        }

    def describe(self) -> str:
        """A few words for a table: "rounds 0.97", "spread 0.06"."""
        mark = " call" if self.ttft_from == "call" else ""  # the reference's clock (--ttft-from call)
        if self.synchrony is None:
            return ("--" if self.dispersion is None else f"disp {self.dispersion:.1f}") + mark
        return f"{'rounds' if self.synchrony >= 0.25 else 'spread'} {self.synchrony:.2f}{mark}"


@dataclass(frozen=True)
class ClientHealth:
    """Was the load generator itself short of CPU during the step? (see lpxtop/engine/probe/clientlimit.py)

    `lag_p99_ms` / `lag_max_ms`: how late the generator's event loop ran, sampled every 25 ms through the
    measured window (p99: how late a read arriving at a random moment was stamped, at worst one in 100).
    `cpu_wait_share`: the share of the window the generator's thread spent runnable but not running.
    """

    lag_p99_ms: float | None = None
    lag_max_ms: float | None = None
    cpu_wait_share: float | None = None
    limited: bool = False
    reason: str | None = None

    def to_json(self) -> dict:
        return {
            "loop_lag_p99_ms": _r(self.lag_p99_ms),
            "loop_lag_max_ms": _r(self.lag_max_ms),
            "cpu_wait_share": _r(self.cpu_wait_share, 4),
            "client_limited": self.limited,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class StepResult:
    """One step of a load test: the load it held and what it measured over its measured window.

    `duration_s` is the measured duration: from the first send to the last completion of the counted
    requests (those sent inside the window), the throughputs are over it. `status` is "done", "partial"
    (stopped by the user; never chosen as the capacity) or "timed_out" (counted requests still running at
    the step's deadline were cancelled). While a step runs, the live view holds a `StepResult` with
    status "running" over the requests finished so far.
    """

    index: int
    mode: str  # "concurrency" | "rate" | "input_tokens"
    level: float  # the swept value: concurrency, request rate (req/s) or input tokens
    concurrency: int | None  # closed loop: requests kept in flight
    request_rate: float | None  # open loop: mean arrivals per second
    burstiness: float | None
    max_concurrency: int | None  # open loop: cap on requests in flight
    input_tokens_target: int | None
    output_tokens_target: int
    status: str
    started_at: float  # wall clock of the step's first request (warm-up included)
    duration_s: float
    completed: int
    failed: int
    errors: tuple[tuple[str, int], ...] = ()
    total_input_tokens: int = 0
    total_output_tokens: int = 0
    input_tokens_from_usage: bool = True  # False: a server sent no usage for some requests
    output_tokens_approx: bool = False  # True: some output counts came from events, not usage
    request_throughput: float | None = None
    output_throughput: float | None = None
    total_token_throughput: float | None = None
    request_goodput: float | None = None
    ttft_ms: Dist | None = None
    tpot_ms: Dist | None = None
    itl_ms: Dist | None = None
    e2el_ms: Dist | None = None
    slo: tuple[ObjectiveResult, ...] = ()
    slo_met: bool | None = None  # None without an SLO
    saturated: str | None = None  # why the server looked over-saturated in this step, or None
    client: ClientHealth = field(default_factory=ClientHealth)
    server: ServerDuringStep | None = None
    arrivals_delayed: int = 0  # open loop: arrivals that waited for a free slot (max_concurrency)
    wall_s: float = 0.0  # the whole step: warm-up, window, drain
    window_extended_s: float = 0.0  # closed loop: the window ran this much longer, until every worker sent once
    rhythm: Rhythm | None = None  # how synchronised the counted requests' sends were
    # the counted requests joined to their server spans (--traces-listen: lpxtop/load/chain.py); None without
    chain: StepChain | None = None

    @property
    def requests(self) -> int:
        return self.completed + self.failed

    @property
    def error_rate(self) -> float | None:
        return self.failed / self.requests if self.requests else None

    @property
    def usable(self) -> bool:
        """May this step be chosen as the capacity? Not when partial, timed out or client-limited."""
        return self.status == "done" and not self.client.limited

    def level_text(self) -> str:
        return format_level(self.mode, self.level)

    def to_json(self) -> dict:
        out: dict = {
            "index": self.index,
            "status": self.status,
            "concurrency": self.concurrency,
            "request_rate": self.request_rate,
            "burstiness": self.burstiness,
            "max_concurrency": self.max_concurrency,
            "input_tokens_target": self.input_tokens_target,
            "output_tokens_target": self.output_tokens_target,
            "started_at": self.started_at,
            "duration": _r(self.duration_s, 4),
            "completed": self.completed,
            "failed": self.failed,
            "errors": dict(sorted(self.errors)),
            "error_rate": _r(self.error_rate, 4),
            "total_input_tokens": self.total_input_tokens,
            "total_output_tokens": self.total_output_tokens,
            "input_tokens_from_usage": self.input_tokens_from_usage,
            "output_tokens_approximate": self.output_tokens_approx,
            "request_throughput": _r(self.request_throughput, 4),
            "output_throughput": _r(self.output_throughput, 3),
            "total_token_throughput": _r(self.total_token_throughput, 3),
            "request_goodput": _r(self.request_goodput, 4),
        }
        for name, dist in (("ttft", self.ttft_ms), ("tpot", self.tpot_ms), ("itl", self.itl_ms), ("e2el", self.e2el_ms)):
            out[f"mean_{name}_ms"] = _r(dist.mean) if dist else None
            out[f"median_{name}_ms"] = _r(dist.p50) if dist else None
            out[f"std_{name}_ms"] = _r(dist.std) if dist else None
            for q in QUANTILES:
                out[f"p{q}_{name}_ms"] = _r(dist.quantile(q)) if dist else None
            out[f"max_{name}_ms"] = _r(dist.max) if dist else None
        out["slo_met"] = self.slo_met
        out["slo"] = [o.to_json() for o in self.slo]
        out["saturated"] = self.saturated
        out["client_limited"] = self.client.limited
        out["client"] = self.client.to_json()
        out["server"] = self.server.to_json() if self.server is not None else None
        out["arrivals_delayed"] = self.arrivals_delayed
        out["wall_s"] = _r(self.wall_s, 3)
        out["window_extended_s"] = _r(self.window_extended_s, 3)
        out["rhythm"] = self.rhythm.to_json() if self.rhythm is not None else None
        out["chain"] = self.chain.summary.to_json() if self.chain is not None else None
        out["ttft_split"] = self.chain.split_json() if self.chain is not None else None
        return json_safe(out)  # a server's +Inf or NaN never reaches a report, a recording or an export


@dataclass(frozen=True)
class Capacity:
    """The answer of a load test: the highest load that met the SLO in a usable step, and why."""

    mode: str
    level: float | None  # None: no step met the SLO (or there was no SLO)
    step_index: int | None
    reason: str
    sentence: str  # "capacity: 12 concurrent requests (ttft p95 430 ms, ...); 14 failed ttft p95"

    def to_json(self) -> dict:
        concurrency = int(self.level) if self.level is not None and self.mode == "concurrency" else None
        rate = self.level if self.level is not None and self.mode == "rate" else None
        tokens = int(self.level) if self.level is not None and self.mode == "input_tokens" else None
        return {
            "concurrency": concurrency,
            "request_rate": rate,
            "input_tokens": tokens,
            "step": self.step_index,
            "reason": self.reason,
            "summary": self.sentence,
        }


@dataclass(frozen=True)
class Progress:
    """Where a load test stands, as AIPerf and vllm bench say it: step `step` of `steps` (None for a
    search, whose length is not known), time since the first step began, and an estimate of the time left
    (None when it cannot be told: a search, or before the first step)."""

    step: int
    steps: int | None
    elapsed_s: float | None
    eta_s: float | None


@dataclass(frozen=True)
class LoadState:
    """The load test as it stands: the plan, the step under way (with its live figures), the finished
    steps, and, once known, the capacity. Never mutated: the controller publishes a new one."""

    target: str
    model: str | None
    mode: str
    search: bool
    planned_levels: tuple[float, ...]  # the list to walk, or the search's first level
    slo_text: str | None
    duration_s: float
    warmup_s: float
    phase: str = "starting"
    step_index: int | None = None
    level: float | None = None
    phase_started: float | None = None  # wall clock
    phase_ends: float | None = None  # wall clock; None while draining (it ends when the counted requests do)
    in_flight: int = 0
    sent: int = 0  # requests sent in this step so far (warm-up and drain included)
    live: StepResult | None = None  # the running step over its counted requests finished so far
    live_recent: int = 0  # how many recent requests the live percentiles cover
    steps: tuple[StepResult, ...] = ()
    capacity: Capacity | None = None
    knee_index: int | None = None  # index into `steps`: where throughput per unit of latency peaked
    message: str = ""
    seq: int = 0

    @property
    def finished(self) -> bool:
        return self.phase in ("done", "stopped", "failed")

    def time_left_s(self, now: float) -> float | None:
        if self.phase_ends is None:
            return None
        return max(0.0, self.phase_ends - now)

    def progress(self, now: float) -> Progress:
        """Step k of n, elapsed, ETA (a list's remaining steps at the mean wall time of the finished ones,
        or warm-up + window before any finished)."""
        total = None if self.search else len(self.planned_levels)
        k = self.step_index + 1 if self.step_index is not None else len(self.steps)
        if self.finished:
            k = len(self.steps)
        first = self.steps[0].started_at if self.steps else (self.live.started_at if self.live else self.phase_started)
        if self.finished and self.steps:
            last = self.steps[-1]
            return Progress(k, total, max(0.0, last.started_at + last.wall_s - self.steps[0].started_at), 0.0)
        elapsed = None if first is None else max(0.0, now - first)
        eta = None
        if total is not None and self.step_index is not None and not self.finished:
            walls = [s.wall_s for s in self.steps if s.wall_s > 0]
            per_step = sum(walls) / len(walls) if walls else self.warmup_s + self.duration_s
            left = self.time_left_s(now) or 0.0
            if self.phase in ("starting", "warmup"):
                left += self.duration_s
            step_start = self.live.started_at if self.live is not None else self.phase_started
            if step_start is not None:  # the drain and judging that follow the window, as the steps before
                left = max(left, per_step - (now - step_start))
            eta = left + max(0, total - k) * per_step
        return Progress(k, total, elapsed, eta)

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "model": self.model,
            "mode": self.mode,
            "search": self.search,
            "phase": self.phase,
            "step_index": self.step_index,
            "level": self.level,
            "in_flight": self.in_flight,
            "steps": [s.to_json() for s in self.steps],
            "capacity": self.capacity.to_json() if self.capacity else None,
            "knee_step": self.knee_index,
            "message": self.message,
        }


def format_level(mode: str, level: float | None) -> str:
    """A step's load as people say it: "12 concurrent", "2.5 req/s", "1024 input tokens"."""
    if level is None:
        return "--"
    if mode == "concurrency":
        return f"{int(level)} concurrent"
    if mode == "rate":
        return f"{level:g} req/s"
    return f"{int(level)} input tokens"


def level_unit(mode: str) -> str:
    return {"concurrency": "concurrency", "rate": "req/s", "input_tokens": "input tokens"}[mode]
