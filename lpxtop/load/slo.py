"""The SLO a load test judges each step by: `ttft_p95<=500ms,e2e_p95<=10s,error_rate<=1%`.

Objectives, comma-separated, each `METRIC OP VALUE`:
- latencies `ttft`, `itl`, `tpot`, `e2e` (or `e2el`, vLLM's name) with `_p50` `_p90` `_p95` `_p99`
  `_mean` `_median` `_max`, bounded above (`<=`, `<`); values in `ms` (the default), `s` or `us`;
- `error_rate` bounded above, as `1%` or a share `0.01`;
- `output_throughput` (tokens/s) and `request_throughput` (requests/s), bounded below (`>=`, `>`).

A step meets the SLO when every objective holds on its measured figures; a figure the step has no data
for (no successful request) does not hold. The latency bounds also judge each request on its own for the
goodput (requests per second that met every per-request bound: TTFT, TPOT, E2E), as `vllm bench serve
--goodput` does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lpxtop.model.load import ObjectiveResult, StepResult

LATENCIES = {"ttft": "ttft_ms", "itl": "itl_ms", "tpot": "tpot_ms", "e2e": "e2el_ms", "e2el": "e2el_ms"}
STATS = ("p50", "p90", "p95", "p99", "mean", "median", "max")
THROUGHPUTS = ("output_throughput", "request_throughput")
_OBJECTIVE = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|>=|<|>|=<|=>)\s*([0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*([a-z%/]*)\s*$")
_TIME_UNITS = {"": 1.0, "ms": 1.0, "s": 1000.0, "us": 0.001, "µs": 0.001}


class SloError(ValueError):
    """An SLO that cannot be read; the message says which objective and what is allowed."""


@dataclass(frozen=True)
class Objective:
    """One bound: `metric` is "ttft_p95", "error_rate", "output_throughput" ...; `threshold` in base units
    (ms for latencies, a 0..1 share for error_rate, per second for throughputs)."""

    metric: str
    op: str
    threshold: float
    text: str

    @property
    def latency(self) -> str | None:
        """"ttft", "itl", "tpot" or "e2e" for a latency objective, else None."""
        name = self.metric.rsplit("_", 1)[0]
        return "e2e" if name == "e2el" else name if name in LATENCIES else None

    @property
    def stat(self) -> str:
        return self.metric.rsplit("_", 1)[1]

    def holds(self, value: float | None) -> bool:
        if value is None:
            return False
        t = self.threshold
        return {"<=": value <= t, "<": value < t, ">=": value >= t, ">": value > t}[self.op]

    def value_of(self, step: StepResult) -> float | None:
        """The step's figure this objective judges (None when the step has no data for it)."""
        if self.metric == "error_rate":
            return step.error_rate
        if self.metric == "output_throughput":
            return step.output_throughput
        if self.metric == "request_throughput":
            return step.request_throughput
        latency = self.latency
        assert latency is not None
        dist = getattr(step, LATENCIES[latency])
        return None if dist is None else dist.stat(self.stat)


@dataclass(frozen=True)
class Slo:
    """The parsed SLO; `text` is the normalized form (printed, and written to JSON)."""

    objectives: tuple[Objective, ...]

    @property
    def text(self) -> str:
        return ",".join(o.text for o in self.objectives)

    def judge(self, step: StepResult) -> tuple[tuple[ObjectiveResult, ...], bool]:
        """Each objective on `step`, and whether all of them held."""
        results = []
        for objective in self.objectives:
            value = objective.value_of(step)
            results.append(ObjectiveResult(objective.text, objective.metric, value, objective.holds(value)))
        return tuple(results), all(r.met for r in results)

    def request_bounds(self) -> dict[str, float]:
        """Per-request bounds for the goodput: {"ttft": ms, "tpot": ms, "e2e": ms}, the tightest of each."""
        bounds: dict[str, float] = {}
        for o in self.objectives:
            if o.latency in ("ttft", "tpot", "e2e") and o.op in ("<=", "<"):
                bounds[o.latency] = min(bounds.get(o.latency, o.threshold), o.threshold)
        return bounds

    def failed_names(self, results: tuple[ObjectiveResult, ...]) -> str:
        """The objectives that failed, as people say them: "ttft p95, error rate"."""
        return ", ".join(r.metric.replace("_", " ") for r in results if not r.met)


def parse_slo(text: str) -> Slo:
    """Read an SLO string; raise SloError naming the objective at fault."""
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise SloError("empty SLO: write objectives such as ttft_p95<=500ms,error_rate<=1%")
    return Slo(tuple(_objective(p) for p in parts))


def _objective(part: str) -> Objective:
    found = _OBJECTIVE.match(part.strip().lower())
    if found is None:
        raise SloError(f"SLO objective {part.strip()!r}: expected METRIC<=VALUE, e.g. ttft_p95<=500ms")
    metric, op, number, unit = found.groups()
    op = {"=<": "<=", "=>": ">="}.get(op, op)
    value = float(number)
    if metric == "error_rate":
        if op not in ("<=", "<"):
            raise SloError(f"SLO objective {part.strip()!r}: error_rate is an upper bound (use <= or <)")
        if unit == "%":
            value /= 100.0
        elif unit:
            raise SloError(f"SLO objective {part.strip()!r}: error_rate takes a percentage (1%) or a share (0.01)")
        elif value > 1:
            raise SloError(f"SLO objective {part.strip()!r}: a bare error_rate is a share 0..1; write {value:g}% for percent")
        return Objective(metric, op, value, f"error_rate{op}{value * 100:g}%")
    if metric in THROUGHPUTS:
        if op not in (">=", ">"):
            raise SloError(f"SLO objective {part.strip()!r}: {metric} is a lower bound (use >= or >)")
        expected = ("", "tok/s", "tokens/s") if metric == "output_throughput" else ("", "req/s", "/s")
        if unit not in expected:
            raise SloError(f"SLO objective {part.strip()!r}: {metric} is per second ({expected[1]})")
        suffix = "tok/s" if metric == "output_throughput" else "req/s"
        return Objective(metric, op, value, f"{metric}{op}{value:g}{suffix}")
    name, _, stat = metric.rpartition("_")
    if name not in LATENCIES or stat not in STATS:
        raise SloError(
            f"SLO objective {part.strip()!r}: unknown metric {metric!r}; use ttft/itl/tpot/e2e with "
            f"_p50/_p90/_p95/_p99/_mean/_median/_max, error_rate, output_throughput or request_throughput"
        )
    if op not in ("<=", "<"):
        raise SloError(f"SLO objective {part.strip()!r}: latencies are upper bounds (use <= or <)")
    if unit not in _TIME_UNITS:
        raise SloError(f"SLO objective {part.strip()!r}: unknown time unit {unit!r} (ms, s or us)")
    ms = value * _TIME_UNITS[unit]
    if name == "e2el":
        name = "e2e"
    if stat == "median":
        stat = "p50"
    return Objective(f"{name}_{stat}", op, ms, f"{name}_{stat}{op}{_ms_text(ms)}")


def _ms_text(ms: float) -> str:
    return f"{ms / 1000:g}s" if ms >= 1000 and (ms / 1000) == round(ms / 1000, 3) else f"{ms:g}ms"
