"""What the steps of every agent platform share (a Dify app or workflow, a Coze bot: one request per step,
sent by the one measured stream): the fields every platform step has, a failed step, the nodes of a Dify
workflow or chatflow as the step keeps them, and the prompt each sends."""

from __future__ import annotations

import json
import secrets

from lpxtop.engine.agent.tools import ToolSet
from lpxtop.engine.probe.difyevents import NodeTimeline
from lpxtop.engine.probe.stream import StreamOutcome
from lpxtop.model.agent import AgentStep, CallTrace
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.platform import AgentNode
from lpxtop.textsafe import scrub

USER = "lpxtop-probe"  # the end user the platforms see (Dify's `user`, Coze's `user_id`)
MAX_NAME_CHARS = 100


def ms(t_ns: int | None, origin_ns: int) -> float | None:
    return None if t_ns is None else (t_ns - origin_ns) / 1e6


def prompt(endpoint: EndpointConfig, tools: ToolSet) -> str:
    """The question of an agent step, with a fresh random prefix unless turned off (so no cache answers it)."""
    text = tools.prompt
    if endpoint.random_prefix:
        text = f"[{secrets.token_hex(6)}] {text}"
    return text


def base_fields(endpoint: EndpointConfig, outcome: StreamOutcome) -> dict:
    """The fields of every platform step: who, when, and the request's trace context."""
    return {"endpoint": endpoint.name, "api": endpoint.api, "wall_time": outcome.wall_time,
            "start_ns": outcome.start_ns, "calls": (CallTrace.of(outcome),)}


def failed_step(fields: dict, outcome: StreamOutcome) -> AgentStep:
    """A step whose request failed: what was measured before, and the failure's class and message."""
    return AgentStep(**fields, error_kind=outcome.error_kind, error_message=scrub(outcome.error_message),
                     http_status=outcome.status, failed_call=1)


def name_of(text: str | None) -> str:
    return (scrub(text) or "")[:MAX_NAME_CHARS]


def nodes_of(timeline: NodeTimeline, start_ns: int) -> tuple[tuple[AgentNode, ...], int]:
    """A workflow's node runs as the step keeps them (text from outside scrubbed), and how many were left out."""
    nodes = []
    for run in timeline.runs:
        seen = None
        if run.started_ns is not None and run.finished_ns is not None and run.finished_ns >= run.started_ns:
            seen = (run.finished_ns - run.started_ns) / 1e6
        nodes.append(AgentNode(
            title=name_of(run.title) or "?", node_type=name_of(run.node_type) or "?",
            node_id=name_of(run.node_id) or None, status=name_of(run.status) or "unknown",
            start_ms=ms(run.started_ns, start_ns), seen_ms=seen,
            elapsed_ms=run.elapsed_s * 1000.0 if run.elapsed_s is not None else None,
            error=scrub(run.error)[:200] if run.error else None,
        ))
    return tuple(nodes), timeline.left_out


def is_json(text: str | None) -> bool | None:
    if text is None:
        return None
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


TOOL_NODE_TYPES = ("tool",)  # Dify's node type of a Tool node


def tool_node_fields(nodes: tuple[AgentNode, ...]) -> dict:
    """A workflow's (or chatflow's) first Tool node as the step's tool: its start is the tool decision (the
    node before it decided to call it), its end the tool's result, its time as the client saw it the tool's
    time. Empty when no Tool node ran."""
    node = next((n for n in nodes if n.node_type in TOOL_NODE_TYPES and n.start_ms is not None), None)
    if node is None:
        return {}
    fields: dict = {"tool_calls": 1, "tool_name": node.title, "time_to_tool_name_ms": node.start_ms,
                    "time_to_tool_call_ms": node.start_ms}
    if node.seen_ms is not None:
        fields["tool_ms"] = node.seen_ms
        fields["time_to_observation_ms"] = node.start_ms + node.seen_ms  # type: ignore[operator]
    return fields
