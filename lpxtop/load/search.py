"""Which load to try next, when to stop, and what the answer is.

Two ways to choose the steps:
- `Walk`: the user's list (`--concurrency 1,5,10,20`), in order; every step runs.
- `CapacitySearch` (`--sweep concurrency|rate` with `--slo`): start low and double until a step fails,
  then bisect between the last pass and the first fail, until they are within `precision` of each other
  (a concurrency search: or neighbours, so small concurrencies are found exactly). A step fails when it misses
  the SLO, when the server is over-saturated (`saturation`), or when lpxtop itself was short of CPU
  (`client_limited`: its figures cannot be trusted, so it bounds the search from above and is never the
  answer). A stopped (partial) step ends the search.

The capacity is the highest usable step that met the SLO with every lower tried step meeting it too (a
noisy pass above a fail is not believed); the knee is where throughput per unit of latency peaks.
"""

from __future__ import annotations

from collections.abc import Sequence

from lpxtop.humanize import spoken_ms
from lpxtop.model.load import Capacity, StepResult, format_level

GROWTH = 2.0
SATURATED_RATE_SHARE = 0.85  # open loop: completions below this share of the offered rate
FLAT_GAIN = 0.03  # closed loop: throughput grew by less than this while the load grew by >= 20 %


def passed(step: StepResult) -> bool:
    return bool(step.slo_met) and step.usable and step.saturated is None


class Walk:
    """The user's list of loads, in the order given."""

    search = False

    def __init__(self, levels: Sequence[float]) -> None:
        self.levels = tuple(levels)

    def next_level(self, steps: Sequence[StepResult]) -> float | None:
        if steps and steps[-1].status == "partial":
            return None
        return self.levels[len(steps)] if len(steps) < len(self.levels) else None

    def stop_reason(self, steps: Sequence[StepResult]) -> str:
        return "every listed step ran" if len(steps) >= len(self.levels) else "stopped"


class CapacitySearch:
    """Grow, then bisect, for the highest load meeting the SLO."""

    search = True

    def __init__(
        self,
        mode: str,
        start: float,
        max_level: float,
        *,
        precision: float = 0.1,
        max_steps: int = 16,
    ) -> None:
        self.mode = mode
        self.integer = mode != "rate"
        self.start = start
        self.max_level = max_level
        self.precision = precision
        self.max_steps = max_steps
        self.levels = (start,)
        self._reason = ""

    def next_level(self, steps: Sequence[StepResult]) -> float | None:
        if not steps:
            return self.start
        if steps[-1].status == "partial":
            self._reason = "stopped"
            return None
        if len(steps) >= self.max_steps:
            self._reason = f"stopped after {self.max_steps} steps (--max-steps)"
            return None
        fails = sorted(s.level for s in steps if not passed(s))
        hi = fails[0] if fails else None
        passes = sorted(s.level for s in steps if passed(s) and (hi is None or s.level < hi))
        lo = passes[-1] if passes else None
        if hi is None:
            assert lo is not None
            if lo >= self.max_level:
                self._reason = f"every step passed up to the highest load allowed ({format_level(self.mode, self.max_level)}, --max-level)"
                return None
            return self._round(min(self.max_level, lo * GROWTH))
        if lo is None:
            lowest = min(s.level for s in steps)
            if self.integer and lowest <= 1 or not self.integer and len(steps) >= 4:
                self._reason = f"even {format_level(self.mode, lowest)} failed"
                return None
            return self._round(lowest / GROWTH)
        if self.integer:
            mid = (lo + hi) // 2
            if mid <= lo:
                # "did not", not "failed": the step above may be one that could not be judged (client-limited)
                self._reason = f"{int(lo)} met the SLO and {int(hi)} did not: neighbours, nothing between to try"
                return None
            if hi - lo <= int(self.precision * lo):
                self._reason = (f"{int(lo)} met the SLO and {int(hi)} did not, within {self.precision * 100:g} % "
                                "of each other")
                return None
            return float(mid)
        if (hi - lo) / hi <= self.precision:
            self._reason = (f"{lo:g} req/s met the SLO and {hi:g} req/s did not, within {self.precision * 100:g} % "
                            "of each other")
            return None
        return self._round((lo + hi) / 2)

    def _round(self, value: float) -> float:
        if self.integer:
            return float(max(1, int(round(value))))
        return float(f"{value:.3g}")

    def stop_reason(self, steps: Sequence[StepResult]) -> str:
        return self._reason or "search finished"


def saturation(previous: StepResult | None, step: StepResult) -> str | None:
    """Why the server looks over-saturated in `step` (compared with the step before it), or None.

    Open loop: completions fell behind the offered rate (the queue grows without bound), or the client
    had to hold arrivals back at its cap. Any loop: errors climbing from one step to the next. Closed loop:
    throughput stayed flat while the load and the server's queue grew.
    """
    if step.status != "done" or step.requests == 0:
        return None
    if step.mode == "rate" and step.request_rate and step.duration_s > 0:
        achieved = step.requests / step.duration_s
        if achieved < SATURATED_RATE_SHARE * step.request_rate:
            return (f"completions kept up with {achieved:.3g} of {step.request_rate:g} req/s offered: "
                    "the queue grows without bound")
        if step.arrivals_delayed:
            return f"{step.arrivals_delayed} arrivals waited for a free slot (--max-concurrency {step.max_concurrency})"
    if previous is None or previous.status != "done" or previous.level >= step.level:
        return None
    err, prev_err = step.error_rate or 0.0, previous.error_rate or 0.0
    if err >= 0.05 and err >= prev_err + 0.05:
        return f"errors climbing: {err * 100:.0f} % of requests failed (was {prev_err * 100:.0f} %)"
    if step.mode == "concurrency" and step.level >= 1.2 * previous.level:
        a, b = previous.output_throughput, step.output_throughput
        if a and b is not None and b < a * (1 + FLAT_GAIN):
            qa = previous.server.peak_requests_waiting if previous.server else None
            qb = step.server.peak_requests_waiting if step.server else None
            if qa is not None and qb is not None and qb > qa:
                return (f"throughput flat ({a:.0f} → {b:.0f} tok/s) while the server's queue grew "
                        f"({qa:g} → {qb:g} waiting)")
    return None


def knee(steps: Sequence[StepResult]) -> int | None:
    """Index (into `steps`) of the knee: the step with the most output throughput per unit of mean E2E latency
    (Kleinrock's "power", throughput / delay, whose maximum is the classic knee of the throughput-latency
    curve). None until the curve has bent: while the best step is the highest load tried, or with < 3 steps."""
    # only steps whose figures are trusted: a client-limited step's latency is partly lpxtop's own
    done = [s for s in steps if s.usable and s.output_throughput and s.e2el_ms and s.e2el_ms.mean > 0]
    if len(done) < 3:
        return None
    best = max(done, key=lambda s: s.output_throughput / s.e2el_ms.mean)  # type: ignore[operator,union-attr]
    if best.level >= max(s.level for s in done):
        return None
    return next(i for i, s in enumerate(steps) if s is best)


def capacity(mode: str, steps: Sequence[StepResult], have_slo: bool, stop_reason: str) -> Capacity:
    """The answer, as data and as one sentence."""
    if not have_slo:
        return Capacity(mode, None, None, "no --slo given: every step is reported, none judged",
                        "capacity: not judged (no --slo)")
    tried = sorted((s for s in steps if s.status != "partial" or passed(s)), key=lambda s: s.level)
    best: StepResult | None = None
    first_fail: StepResult | None = None
    for s in tried:
        if passed(s):
            if first_fail is None:
                best = s
        elif first_fail is None:
            first_fail = s
    fail_text = ""
    if first_fail is not None:
        fail_text = f"; {_level_short(mode, first_fail.level)} {_why_failed(first_fail)}"
    if best is None:
        reason = "no step met the SLO" if steps else "no step finished"
        if first_fail is not None:
            reason += f" ({_level_short(mode, first_fail.level)} {_why_failed(first_fail)})"
        return Capacity(mode, None, None, reason, f"capacity: none — {reason}")
    index = next(i for i, s in enumerate(steps) if s is best)
    sentence = f"capacity: {_capacity_level(mode, best.level)} ({_figures(best)}){fail_text}"
    return Capacity(mode, best.level, index, stop_reason, sentence)


def _capacity_level(mode: str, level: float) -> str:
    if mode == "concurrency":
        n = int(level)
        return f"{n} concurrent request{'s' if n != 1 else ''}"
    if mode == "rate":
        return f"{level:g} requests/s"
    return f"{int(level)} input tokens"


def _level_short(mode: str, level: float) -> str:
    return {"concurrency": f"{int(level)}", "rate": f"{level:g} req/s"}.get(mode, f"{int(level)} tokens")


def _why_failed(step: StepResult) -> str:
    if step.client.limited:
        return "was client-limited (lpxtop short of CPU)"
    if step.status == "timed_out":
        return "timed out"
    missed = [r.metric.replace("_", " ") for r in step.slo if not r.met]
    if missed:
        return "failed " + ", ".join(missed)
    if step.saturated:
        return f"over-saturated ({step.saturated})"
    return "failed"


def _figures(step: StepResult) -> str:
    parts = []
    shown = set()
    for r in step.slo:
        if r.metric in shown or r.value is None:
            continue
        shown.add(r.metric)
        if r.metric == "error_rate":
            continue
        if r.metric.endswith("throughput"):
            unit = "tok/s" if r.metric.startswith("output") else "req/s"
            parts.append(f"{r.metric.replace('_', ' ')} {r.value:.3g} {unit}")
        else:
            parts.append(f"{r.metric.replace('_', ' ')} {spoken_ms(r.value)}")
    parts.append(f"{step.failed} error{'s' if step.failed != 1 else ''}" if step.failed == 0
                 else f"{step.failed} errors ({(step.error_rate or 0) * 100:.1f} %)")
    return ", ".join(parts)
