"""One agent step against a Coze bot: `POST {base}/v3/chat` with `"stream": true`.

`base` is the endpoint's URL without its path's `/v1` (lpxtop's default path), `/v3` or `/v3/chat`:
`https://api.coze.com`, `https://api.coze.cn`, or a Coze Studio host; another path is kept as a prefix
(a gateway's). The body is the bot (`bot_id`), lpxtop's user id, and the question as one user message,
as Coze's SDKs send it; no `conversation_id`, so each step is a new conversation. The key
(`--api-key-env`) is sent as `Authorization: Bearer`, as for every probe.

The stream is read by the Coze sink (engine/probe/cozechat.py). The step keeps the time to the tool
decision (the first `function_call` message), the tool's time (to its `tool_response`), the answer's TTFT
and E2E (its `answer` deltas; the step ends at the answer's last token), the tokens from
`chat.completed`'s `usage`, and the platform's own time for the chat: `completed_at - created_at`, in whole
seconds (so `app_latency_resolution_ms` is 1000), beside the client's time to `chat.completed`.

A chat that stops for a client-side tool (`requires_action`) is classified `requires_action`: lpxtop
runs no client-side plugin, so the step ends there, measured up to that point.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from lpxtop.engine.agent.platform import USER, base_fields, failed_step, is_json, ms, name_of, prompt
from lpxtop.engine.agent.tools import ToolSet
from lpxtop.engine.probe.cozechat import CozeChatSink
from lpxtop.engine.probe.stream import measured_stream
from lpxtop.http import HttpClient
from lpxtop.model.agent import AgentStep
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.textsafe import scrub

COZE_RESOLUTION_MS = 1000.0  # created_at and completed_at are whole seconds


def coze_url(endpoint: EndpointConfig) -> str:
    parts = urlsplit(endpoint.url)
    path = parts.path.rstrip("/")
    for suffix in ("/v3/chat", "/v3", "/v1"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    return urlunsplit((parts.scheme, parts.netloc, f"{path}/v3/chat", parts.query, ""))


def coze_body(endpoint: EndpointConfig, tools: ToolSet) -> dict:
    return {
        "bot_id": endpoint.bot_id or "",
        "user_id": USER,
        "stream": True,
        "auto_save_history": True,  # Coze's default (a chat that stops for a client-side tool needs it)
        "additional_messages": [{"role": "user", "type": "question", "content": prompt(endpoint, tools),
                                 "content_type": "text"}],
    }


async def run_coze_step(client: HttpClient, endpoint: EndpointConfig, tools: ToolSet) -> AgentStep:
    """One Coze bot step; never raises (except CancelledError)."""
    events = CozeChatSink()
    outcome = await measured_stream(client, endpoint, coze_url(endpoint), coze_body(endpoint, tools), events)
    start = outcome.start_ns
    fields: dict = {
        **base_fields(endpoint, outcome),
        "time_to_tool_name_ms": ms(events.tool_decision_ns, start),
        "time_to_tool_call_ms": ms(events.tool_decision_ns, start),  # Coze sends the whole call at once
        "time_to_observation_ms": ms(events.tool_response_ns, start),
        "call1_response_id": events.chat_id,
    }
    if events.tool_decision_ns is not None:
        fields["tool_calls"] = 1
        fields["tool_name"] = name_of(events.tool_name) or None
        if events.tool_response_ns is not None:
            fields["tool_ms"] = (events.tool_response_ns - events.tool_decision_ns) / 1e6
        fields["args_valid_json"] = is_json(events.tool_arguments)
        fields["args_valid_schema"] = None  # the bot's plugins and their schemas live in Coze
    if not outcome.ok:
        return failed_step(fields, outcome)
    fields["answer_ttft_ms"] = ms(events.answer_first_ns, start)
    fields["answer_e2e_ms"] = ms(events.answer_last_ns, start)
    fields["step_ms"] = fields["answer_e2e_ms"]
    fields["client_latency_ms"] = ms(events.completed_ns, start)
    if events.created_at is not None and events.completed_at is not None and events.completed_at >= events.created_at:
        fields["app_latency_ms"] = (events.completed_at - events.created_at) * 1000.0
        fields["app_latency_resolution_ms"] = COZE_RESOLUTION_MS
    fields.update(input_tokens=events.input_tokens, output_tokens=events.output_tokens,
                  total_tokens=events.total_tokens)
    if events.requires_action is not None:
        wanted = ", ".join(name_of(n) for n in events.requires_action) or "a tool"
        return AgentStep(**{**fields, "step_ms": None}, error_kind="requires_action",
                         error_message=f"the bot waits for its client to run {wanted} (a client-side plugin): "
                                       "lpxtop runs none; probe a bot whose tools run in Coze")
    if events.answer_first_ns is None:
        return AgentStep(**fields, error_kind="empty", error_message="the chat completed without an answer")
    if events.tool_decision_ns is None:
        return AgentStep(**fields, error_kind="no_tool_call", error_message="the bot answered without calling a tool")
    if fields.get("args_valid_json") is False:
        return AgentStep(**fields, error_kind="bad_tool_args",
                         error_message=f"{fields['tool_name']}: arguments are not valid JSON: "
                                       f"{(scrub(events.tool_arguments) or '')[:80]!r}")
    return AgentStep(**fields)
