"""One agent step against a Dify app: `POST /v1/chat-messages`, `response_mode: streaming`.

The app runs its own agent loop (its model decides on a tool, the app runs it, the model answers), so a
step is one request, sent by the one measured stream (engine/probe/stream.py) and read by the Dify
app sink (engine/probe/difyapp.py, which says what each event means). This module builds the request
and the step: `message_end`'s `metadata.usage.latency`, the app's own time for the message, is shown
beside the client's time to that event: the difference is network and gateway; where the app reports
them (newer Dify), its model's own TTFT and generation time beside the client's answer TTFT. A chatflow
(advanced-chat app) also reports its nodes, which the step keeps one by one (lpxtop/model/platform.py).

The API key comes from the environment variable the endpoint names (`api_key_env`), as for every probe.
"""

from __future__ import annotations

from lpxtop.engine.agent.platform import (
    USER,
    base_fields,
    failed_step,
    is_json,
    ms,
    name_of,
    nodes_of,
    prompt,
    tool_node_fields,
)
from lpxtop.engine.agent.tools import ToolSet
from lpxtop.engine.probe.difyapp import DifyAppSink
from lpxtop.engine.probe.stream import measured_stream
from lpxtop.http import HttpClient
from lpxtop.model.agent import AgentStep
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.textsafe import scrub


def dify_url(endpoint: EndpointConfig) -> str:
    return endpoint.api_url("/chat-messages")


def dify_body(endpoint: EndpointConfig, tools: ToolSet) -> dict:
    # A new conversation each time: an old one's history would grow every prompt and hide prefill time.
    return {"inputs": {}, "query": prompt(endpoint, tools), "response_mode": "streaming", "conversation_id": "",
            "user": USER}


async def run_dify_step(client: HttpClient, endpoint: EndpointConfig, tools: ToolSet) -> AgentStep:
    """One Dify app step; never raises (except CancelledError)."""
    events = DifyAppSink()
    outcome = await measured_stream(client, endpoint, dify_url(endpoint), dify_body(endpoint, tools), events)
    start = outcome.start_ns
    nodes, left_out = nodes_of(events.nodes, start)
    fields: dict = {
        **base_fields(endpoint, outcome),
        "time_to_tool_name_ms": ms(events.tool_decision_ns, start),
        "time_to_tool_call_ms": ms(events.tool_decision_ns, start),  # Dify sends the whole call at once
        "time_to_observation_ms": ms(events.observation_ns, start),
        "call1_response_id": events.message_id,
        "nodes": nodes, "nodes_left_out": left_out,
    }
    if events.tool_decision_ns is not None:
        fields["tool_calls"] = 1
        fields["tool_name"] = name_of(events.tool_name)
        if events.observation_ns is not None:
            fields["tool_ms"] = (events.observation_ns - events.tool_decision_ns) / 1e6
        fields["args_valid_json"] = is_json(events.tool_input)
        fields["args_valid_schema"] = None  # the app's tools and their schemas live in Dify
    else:
        fields.update(tool_node_fields(nodes))  # a chatflow's Tool node
    if not outcome.ok:
        return failed_step(fields, outcome)
    fields["answer_ttft_ms"] = ms(events.answer_first_ns, start)
    fields["answer_e2e_ms"] = ms(events.answer_last_ns, start)
    fields["step_ms"] = fields["answer_e2e_ms"]
    fields["client_latency_ms"] = ms(events.message_end_ns, start)
    for name, value in (("app_latency_ms", events.app_latency_s), ("app_ttft_ms", events.app_ttft_s),
                        ("app_generate_ms", events.app_generate_s)):
        if value is not None:
            fields[name] = value * 1000.0
    fields["input_tokens"] = events.prompt_tokens
    fields["output_tokens"] = events.completion_tokens
    if events.answer_first_ns is None:
        return AgentStep(**fields, error_kind="empty", error_message="the app ended the message without an answer")
    if events.tool_decision_ns is None and not nodes:  # a chatflow need not call a tool
        return AgentStep(**fields, error_kind="no_tool_call",
                         error_message="the app answered without calling a tool")
    if fields.get("args_valid_json") is False:
        return AgentStep(**fields, error_kind="bad_tool_args",
                         error_message=f"{fields['tool_name']}: tool_input is not valid JSON: "
                                       f"{(scrub(events.tool_input) or '')[:80]!r}")
    return AgentStep(**fields)
