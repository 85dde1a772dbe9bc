"""The chain in what readers see: an endpoint's ChainSummary in its EndpointView, and an agent step's time
split by its calls' own server spans. The live engine (feed.py) and a replay (lpxtop/record/replay.py)
both build their views here, from a TraceJoin.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from lpxtop.engine.traces.join import TraceJoin
from lpxtop.model.agent import SPAN_SEGMENTS, AgentStep, AgentView
from lpxtop.model.chain import JoinedRequest
from lpxtop.model.snapshot import EndpointView


def with_chain(view: EndpointView, join: TraceJoin, now: float | None = None) -> EndpointView:
    """`view` with its probes' chain over the window ending at `now`, and its agent steps' span breakdown."""
    chain = join.snapshot(view.name, "probe", now=now)
    agent = view.agent
    if agent is not None and agent.samples:
        join.snapshot(view.name, "agent", now=now)  # prunes the agent calls' window to the same moment
        calls = {r.span_id: r for r in join.joined(view.name, "agent") if r.span_id}
        if calls:
            agent = with_span_breakdown(agent, calls)
    return replace(view, chain=chain, agent=agent)


def step_span_segments(step: AgentStep, calls: Mapping[str, JoinedRequest]) -> dict[str, float] | None:
    """One step's time by its calls' server spans (SPAN_SEGMENTS), or None unless every call of a fully
    measured step was joined with its queue, prefill and decode.

    queue, prefill, decode: both calls' own server figures; tool: lpxtop's tool; outside: the rest of the
    step (network, the HTTP front end and tokenization of both calls, the end of call 1's stream, lpxtop
    building call 2)."""
    if step.api != "chat" or step.step_ms is None or step.tool_ms is None or len(step.calls) < 2:
        return None
    joined = [calls.get(call.span_id) for call in step.calls]
    if any(j is None or j.queue_ms is None or j.prefill_ms is None or j.decode_ms is None for j in joined):
        return None
    queue = sum(j.queue_ms for j in joined)  # type: ignore[misc, union-attr]
    prefill = sum(j.prefill_ms for j in joined)  # type: ignore[misc, union-attr]
    decode = sum(j.decode_ms for j in joined)  # type: ignore[misc, union-attr]
    outside = max(0.0, step.step_ms - queue - prefill - decode - step.tool_ms)
    return {"queue": queue, "prefill": prefill, "decode": decode, "tool": step.tool_ms, "outside": outside}


def span_breakdown(steps: Iterable[AgentStep], calls: Mapping[str, JoinedRequest]) -> tuple[dict[str, float], int]:
    """The mean of step_span_segments over `steps` where it exists, and how many steps that is."""
    measured = [seg for seg in (step_span_segments(s, calls) for s in steps) if seg is not None]
    if not measured:
        return {}, 0
    return {name: sum(seg[name] for seg in measured) / len(measured) for name in SPAN_SEGMENTS}, len(measured)


def with_span_breakdown(agent: AgentView, calls: Mapping[str, JoinedRequest]) -> AgentView:
    """The agent view with its span breakdown, over the steps its times count (client-limited ones only
    when its percentiles take them)."""
    steps = agent.samples
    if not agent.percentiles_with_client_limited:
        steps = tuple(s for s in steps if not s.client_limited)
    breakdown, count = span_breakdown(steps, calls)
    return replace(agent, span_breakdown_ms=breakdown, span_breakdown_steps=count)
