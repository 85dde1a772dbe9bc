"""The agent probe's rolling window: the last steps (bounded like the chat probe's) and their summary."""

from __future__ import annotations

from collections import Counter, deque

from lpxtop.engine.agent.chain import chain_budget
from lpxtop.engine.agent.nodes import summarize_nodes
from lpxtop.engine.window import DEFAULT_MAX_SAMPLES, DEFAULT_WINDOW_S, Tally
from lpxtop.model.agent import SEGMENTS, AgentStep, AgentView
from lpxtop.model.probe import Percentiles

_TIMINGS = ("time_to_tool_name_ms", "time_to_tool_call_ms", "call1_e2e_ms", "tool_ms", "answer_ttft_ms",
            "answer_e2e_ms", "step_ms", "time_to_observation_ms", "app_latency_ms", "client_latency_ms",
            "app_ttft_ms", "app_generate_ms", "output_tokens", "total_tokens")


class AgentWindow:
    """The last `window_s` seconds (at most `max_samples`) of one endpoint's agent steps, plus lifetime counts.

    A `client_limited` step (lpxtop itself was late while it ran) stays in the window and its counts, but
    its times are left out of the percentiles, the chain budget and the breakdown unless
    `include_client_limited`, or unless no other step is in the window (as the chat probe's window does).
    """

    def __init__(self, window_s: float = DEFAULT_WINDOW_S, max_samples: int = DEFAULT_MAX_SAMPLES, *,
                 include_client_limited: bool = False) -> None:
        self.window_s = window_s
        self.include_client_limited = include_client_limited
        self.tally = Tally()
        self.steps: deque[AgentStep] = deque(maxlen=max_samples)
        self._view: tuple[tuple, AgentView] | None = None

    def add(self, step: AgentStep) -> None:
        self.steps.append(step)
        self.tally.add(step)
        self._prune(step.wall_time)

    def reset(self) -> None:
        self.steps.clear()
        self.tally.reset()
        self._view = None

    def _prune(self, now: float) -> None:
        horizon = now - self.window_s
        while self.steps and self.steps[0].wall_time < horizon:
            self.steps.popleft()

    def view(self, *, api: str, now: float, chain_steps: int, in_flight: bool = False) -> AgentView:
        """The window summarized; recomputed only when a step came or went (or a setting changed)."""
        self._prune(now)
        first = self.steps[0] if self.steps else None
        tally = self.tally
        key = (len(self.steps), id(first), tally.sent, chain_steps, in_flight, api, tally.client_limited)
        cached = self._view
        if cached is not None and cached[0] == key:
            return cached[1]
        view = summarize(tuple(self.steps), api=api, chain_steps=chain_steps, in_flight=in_flight,
                         sent=tally.sent, ok=tally.ok, failed=tally.failed, errors=dict(tally.errors),
                         last_error=tally.last_error, last_error_time=tally.last_error_time,
                         client_limited=tally.client_limited, include_client_limited=self.include_client_limited)
        self._view = (key, view)
        return view


def summarize(
    steps: tuple[AgentStep, ...], *, api: str, chain_steps: int, in_flight: bool = False, sent: int | None = None,
    ok: int | None = None, failed: int | None = None, errors: dict[str, int] | None = None,
    last_error: str | None = None, last_error_time: float | None = None, client_limited: int | None = None,
    include_client_limited: bool = False,
) -> AgentView:
    """An AgentView of `steps` (counts default to the steps' own). The times come from the steps during
    which lpxtop was not late, unless `include_client_limited` or there are no such steps."""
    timed = steps if include_client_limited else tuple(s for s in steps if not s.client_limited)
    with_limited = bool(steps) and (include_client_limited or not timed) and any(s.client_limited for s in steps)
    if not timed:
        timed = steps
    values: dict[str, list[float]] = {name: [] for name in _TIMINGS}
    for step in timed:
        for name in _TIMINGS:
            value = getattr(step, name)
            if value is not None and value == value:
                values[name].append(value)
    with_call = [s for s in steps if s.args_valid_json is not None]
    valid = sum(1 for s in with_call if s.args_valid_json and s.args_valid_schema is not False)
    segments = [s.segments_ms for s in timed]
    measured = [seg for seg in segments if seg is not None]
    breakdown = {name: sum(seg[name] for seg in measured) / len(measured) for name in SEGMENTS} if measured else {}
    if errors is None:
        errors = dict(Counter(s.error_kind for s in steps if s.error_kind))
    resolutions = [s.app_latency_resolution_ms for s in timed if s.app_latency_resolution_ms is not None]
    return AgentView(
        api=api,
        status=agent_status(steps),
        steps_sent=len(steps) if sent is None else sent,
        steps_ok=sum(1 for s in steps if s.ok) if ok is None else ok,
        steps_failed=sum(1 for s in steps if not s.ok) if failed is None else failed,
        errors=errors,
        time_to_tool_name_ms=Percentiles.of(values["time_to_tool_name_ms"]),
        time_to_tool_call_ms=Percentiles.of(values["time_to_tool_call_ms"]),
        call1_e2e_ms=Percentiles.of(values["call1_e2e_ms"]),
        tool_ms=Percentiles.of(values["tool_ms"]),
        answer_ttft_ms=Percentiles.of(values["answer_ttft_ms"]),
        answer_e2e_ms=Percentiles.of(values["answer_e2e_ms"]),
        step_ms=Percentiles.of(values["step_ms"]),
        tool_call_valid_pct=100.0 * valid / len(with_call) if with_call else None,
        chain=chain_budget(values["step_ms"], chain_steps),
        breakdown_ms=breakdown,
        last_error=last_error,
        last_error_time=last_error_time,
        samples=steps,
        chain_steps=chain_steps,
        time_to_observation_ms=Percentiles.of(values["time_to_observation_ms"]),
        app_latency_ms=Percentiles.of(values["app_latency_ms"]),
        client_latency_ms=Percentiles.of(values["client_latency_ms"]),
        in_flight=in_flight,
        app_ttft_ms=Percentiles.of(values["app_ttft_ms"]),
        app_generate_ms=Percentiles.of(values["app_generate_ms"]),
        app_latency_resolution_ms=max(resolutions) if resolutions else None,
        output_tokens=Percentiles.of(values["output_tokens"]),
        total_tokens=Percentiles.of(values["total_tokens"]),
        nodes=summarize_nodes(timed),
        steps_client_limited=sum(1 for s in steps if s.client_limited) if client_limited is None else client_limited,
        percentiles_with_client_limited=with_limited,
    )


def agent_status(steps: tuple[AgentStep, ...]) -> str:
    """As the chat probe's status, counting only transport failures: a model that answered with text
    instead of a tool call is a misbehaving model on a server that is up."""
    if not steps:
        return "pending"
    recent = steps[-5:]
    if all(not s.answered for s in steps[-3:]):
        return "down"
    if any(not s.answered for s in recent):
        return "degraded"
    return "up"
