"""One agent step against a Dify app: `POST /v1/chat-messages`, `response_mode: streaming`.

The app runs its own agent loop (its model decides on a tool, the app runs it, the model answers), so a
step is one request, sent by the one measured stream (engine/probe/stream.py) and read by the Dify
app sink (engine/probe/difyapp.py, which says what each event means). This module builds the request
and the step: `message_end`'s `metadata.usage.latency`, the app's own time for the message, is shown
beside the client's time to that event: the difference is network and gateway.

The API key comes from the environment variable the endpoint names (`api_key_env`), as for every probe.
"""

from __future__ import annotations

import json
import secrets

from lpxtop.engine.agent.tools import ToolSet
from lpxtop.engine.probe.difyapp import DifyAppSink
from lpxtop.engine.probe.stream import StreamOutcome, measured_stream
from lpxtop.http import HttpClient
from lpxtop.model.agent import AgentStep, CallTrace
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.textsafe import scrub

USER = "lpxtop-probe"


def dify_url(endpoint: EndpointConfig) -> str:
    return endpoint.url.rstrip("/") + "/chat-messages"


def dify_body(endpoint: EndpointConfig, tools: ToolSet) -> dict:
    query = tools.prompt
    if endpoint.random_prefix:
        query = f"[{secrets.token_hex(6)}] {query}"
    # A new conversation each time: an old one's history would grow every prompt and hide prefill time.
    return {"inputs": {}, "query": query, "response_mode": "streaming", "conversation_id": "", "user": USER}


def _ms(t_ns: int | None, origin_ns: int) -> float | None:
    return None if t_ns is None else (t_ns - origin_ns) / 1e6


async def run_dify_step(client: HttpClient, endpoint: EndpointConfig, tools: ToolSet) -> AgentStep:
    """One Dify app step; never raises (except CancelledError)."""
    events = DifyAppSink()
    outcome = await measured_stream(client, endpoint, dify_url(endpoint), dify_body(endpoint, tools), events)
    start = outcome.start_ns
    fields: dict = {
        "endpoint": endpoint.name, "api": "dify", "wall_time": outcome.wall_time, "start_ns": start,
        "calls": (CallTrace.of(outcome),),
        "time_to_tool_name_ms": _ms(events.tool_decision_ns, start),
        "time_to_tool_call_ms": _ms(events.tool_decision_ns, start),  # Dify sends the whole call at once
        "time_to_observation_ms": _ms(events.observation_ns, start),
        "call1_response_id": events.message_id,
    }
    if events.tool_decision_ns is not None:
        fields["tool_calls"] = 1
        fields["tool_name"] = (scrub(events.tool_name) or "")[:100]
        if events.observation_ns is not None:
            fields["tool_ms"] = (events.observation_ns - events.tool_decision_ns) / 1e6
        fields["args_valid_json"] = _is_json(events.tool_input)
        fields["args_valid_schema"] = None  # the app's tools and their schemas live in Dify
    if not outcome.ok:
        return _failed(fields, outcome)
    fields["answer_ttft_ms"] = _ms(events.answer_first_ns, start)
    fields["answer_e2e_ms"] = _ms(events.answer_last_ns, start)
    fields["step_ms"] = fields["answer_e2e_ms"]
    fields["client_latency_ms"] = _ms(events.message_end_ns, start)
    if events.app_latency_s is not None:
        fields["app_latency_ms"] = events.app_latency_s * 1000.0
    if events.answer_first_ns is None:
        return AgentStep(**fields, error_kind="empty", error_message="the app ended the message without an answer")
    if events.tool_decision_ns is None:
        return AgentStep(**fields, error_kind="no_tool_call",
                         error_message="the app answered without calling a tool")
    if fields["args_valid_json"] is False:
        return AgentStep(**fields, error_kind="bad_tool_args",
                         error_message=f"{fields['tool_name']}: tool_input is not valid JSON: "
                                       f"{(scrub(events.tool_input) or '')[:80]!r}")
    return AgentStep(**fields)


def _failed(fields: dict, outcome: StreamOutcome) -> AgentStep:
    return AgentStep(**fields, error_kind=outcome.error_kind, error_message=scrub(outcome.error_message),
                     http_status=outcome.status, failed_call=1)


def _is_json(text: str | None) -> bool | None:
    if text is None:
        return None
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True
