"""One agent step against a Dify app: `POST /v1/chat-messages`, `response_mode: streaming`.

The app runs its own agent loop (its model decides on a tool, the app runs it, the model answers), so a
step is one request. Its stream is Dify's: `data: {"event": ...}` objects, plus `event: ping` keep-alives.

- `agent_thought` (one per reasoning round, sent when the round starts and again as it fills in): the
  first one naming a `tool` is the tool decision (`tool_input` holds the call's arguments as JSON, keyed
  by tool name in Dify's function-calling agent); the first with an `observation` is the tool's result;
- `agent_message` (agent apps) or `message` (chat apps): answer text; each non-empty `answer` is a token
  of the answer, so the answer's TTFT is the first one after the observation (or the first, without a
  tool), its end the last;
- `message_end`: the end; `metadata.usage.latency` is the app's own time for the message in seconds
  (Dify: from its task pipeline's start to saving the message), shown beside the client's time to this
  event: the difference is network and gateway;
- `error`: a classified `error_event` with its status and code; `message_replace` (moderation) and
  workflow events carry no timing here and are passed over.

The API key comes from the environment variable the endpoint names (`api_key_env`), as for every probe.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass

from lpxtop.engine.agent.stream import CallOutcome, measured_post
from lpxtop.engine.agent.tools import ToolSet
from lpxtop.engine.probe import _ProbeError, _short
from lpxtop.http import HttpClient
from lpxtop.model.agent import AgentStep
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.textsafe import scrub

ANSWER_EVENTS = ("agent_message", "message")
USER = "lpxtop-probe"


def dify_url(endpoint: EndpointConfig) -> str:
    return endpoint.url.rstrip("/") + "/chat-messages"


def dify_body(endpoint: EndpointConfig, tools: ToolSet) -> dict:
    query = tools.prompt
    if endpoint.random_prefix:
        query = f"[{secrets.token_hex(6)}] {query}"
    # A new conversation each time: an old one's history would grow every prompt and hide prefill time.
    return {"inputs": {}, "query": query, "response_mode": "streaming", "conversation_id": "", "user": USER}


@dataclass
class DifyEvents:
    """A Dify app stream's events, with the arrival time of each one that matters."""

    # The first agent_thought or answer text: the app's first sign of work, which ends the first-token
    # limit (a tool round can take longer than that before any answer text comes).
    first_token_ns: int | None = None
    done: bool = False
    tool_decision_ns: int | None = None
    tool_name: str | None = None
    tool_input: str | None = None
    observation_ns: int | None = None
    answer_first_ns: int | None = None  # first answer text after the observation (or at all, without a tool)
    answer_last_ns: int | None = None
    message_end_ns: int | None = None
    app_latency_s: float | None = None
    message_id: str | None = None
    thoughts: int = 0

    @property
    def finished(self) -> bool:
        return self.done

    def handle(self, data: str, event: str | None, t_ns: int) -> None:
        stripped = data.strip()
        if not stripped or event == "ping":
            return
        try:
            obj = json.loads(stripped)
        except ValueError as exc:
            raise _ProbeError("bad_json", f"unparseable event: {_short(stripped)[:80]} ({exc})") from None
        if not isinstance(obj, dict):
            raise _ProbeError("bad_json", f"event is not a JSON object: {_short(stripped)[:80]}")
        kind = obj.get("event")
        if kind == "error":
            raise _ProbeError("error_event", _short(f"{obj.get('status', '')} {obj.get('code', '')}: "
                                                    f"{obj.get('message', '')}".strip()))
        self.message_id = self.message_id or _text(obj.get("message_id"))
        if kind == "agent_thought":
            self.thoughts += 1
            if self.first_token_ns is None:
                self.first_token_ns = t_ns
            tool = _text(obj.get("tool"))
            if tool and self.tool_decision_ns is None:
                self.tool_decision_ns = t_ns
                self.tool_name = tool
                self.tool_input = _text(obj.get("tool_input"))
            if _text(obj.get("observation")) and self.observation_ns is None and self.tool_decision_ns is not None:
                self.observation_ns = t_ns
        elif kind in ANSWER_EVENTS:
            if not _text(obj.get("answer")):
                return
            if self.first_token_ns is None:
                self.first_token_ns = t_ns
            # The answer proper starts after the tool's observation; text before it is the model's
            # thinking aloud in the tool round (Dify streams it as agent_message too).
            if self.answer_first_ns is None and (self.tool_decision_ns is None or self.observation_ns is not None):
                self.answer_first_ns = t_ns
            if self.answer_first_ns is not None:
                self.answer_last_ns = t_ns
        elif kind == "message_end":
            self.message_end_ns = t_ns
            self.done = True
            usage = (obj.get("metadata") or {}).get("usage") if isinstance(obj.get("metadata"), dict) else None
            latency = usage.get("latency") if isinstance(usage, dict) else None
            if isinstance(latency, (int, float)) and not isinstance(latency, bool) and 0 <= latency < 86400:
                self.app_latency_s = float(latency)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _ms(t_ns: int | None, origin_ns: int) -> float | None:
    return None if t_ns is None else (t_ns - origin_ns) / 1e6


async def run_dify_step(client: HttpClient, endpoint: EndpointConfig, tools: ToolSet) -> AgentStep:
    """One Dify app step; never raises (except CancelledError)."""
    wall_time = time.time()
    events = DifyEvents()
    outcome = await measured_post(client, endpoint, dify_url(endpoint), dify_body(endpoint, tools), events)
    start = outcome.start_ns
    fields: dict = {
        "endpoint": endpoint.name, "api": "dify", "wall_time": wall_time, "start_ns": start,
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


def _failed(fields: dict, outcome: CallOutcome) -> AgentStep:
    return AgentStep(**fields, error_kind=outcome.error_kind, error_message=scrub(outcome.error_message),
                     http_status=outcome.status, failed_call=1)


def _is_json(text: str | None) -> bool | None:
    if text is None:
        return None
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
