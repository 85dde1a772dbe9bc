"""The sink of a Dify app's stream (`POST /v1/chat-messages`, `response_mode: streaming`).

Dify's stream is `data: {"event": ...}` objects, plus `event: ping` keep-alives:

- `agent_thought` (one per reasoning round, sent when the round starts and again as it fills in): the
  first one naming a `tool` is the tool decision (`tool_input` holds the call's arguments as JSON, keyed
  by tool name in Dify's function-calling agent); the first with an `observation` is the tool's result;
- `agent_message` (agent apps) or `message` (chat apps): answer text; each non-empty `answer` is a token
  of the answer, so the answer's TTFT is the first one after the observation (or the first, without a
  tool), its end the last;
- `message_end`: the end; `metadata.usage.latency` is the app's own time for the message in seconds
  (Dify: from its task pipeline's start to saving the message);
- `error`: a classified `error_event` with its status and code, as are an SSE `event: error` (a gateway
  in front of the app) and an `error` object in any event; `message_replace` (moderation) and workflow
  events carry no timing here and are passed over.

A blocking-mode answer (one JSON object with an `answer`) is `not_streamed`. The step built from it is
engine/agent/dify.py's.
"""

from __future__ import annotations

import json

from lpxtop.engine.probe.errors import StreamError, error_text, short
from lpxtop.engine.probe.sink import StreamSink

ANSWER_EVENTS = ("agent_message", "message")


class DifyAppSink(StreamSink):
    """A Dify app stream's events, with the arrival time of each one that matters.

    `first_token_ns` is the first agent_thought or answer text: the app's first sign of work, which ends
    the first-token limit (a tool round can take longer than that before any answer text comes).
    """

    markers = (b"message_end", b"error")

    def __init__(self) -> None:
        super().__init__()
        self.tool_decision_ns: int | None = None
        self.tool_name: str | None = None
        self.tool_input: str | None = None
        self.observation_ns: int | None = None
        self.answer_first_ns: int | None = None  # first answer text after the observation (or at all, without a tool)
        self.answer_last_ns: int | None = None
        self.message_end_ns: int | None = None
        self.app_latency_s: float | None = None
        self.message_id: str | None = None
        self.thoughts = 0
        self.answers = 0

    @property
    def token_events(self) -> int:
        return self.thoughts + self.answers

    def whole_body(self, obj: dict) -> bool:
        if obj.get("event") == "error":
            raise StreamError("error_event", _dify_error(obj))
        return isinstance(obj.get("answer"), str)

    def event(self, data: str, name: str | None, t_ns: int) -> None:
        stripped = data.strip()
        if not stripped or name == "ping":
            return
        if self.first_event_ns is None:
            self.first_event_ns = t_ns
        try:
            obj = json.loads(stripped)
        except (ValueError, RecursionError) as exc:
            if name == "error":
                raise StreamError("error_event", short(stripped)) from None
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
            raise StreamError("bad_json", f"unparseable event: {short(stripped)[:80]} ({reason})") from None
        if not isinstance(obj, dict):
            if name == "error":
                raise StreamError("error_event", short(stripped))
            raise StreamError("bad_json", f"event is not a JSON object: {short(stripped)[:80]}")
        kind = obj.get("event")
        if kind == "error":
            raise StreamError("error_event", _dify_error(obj))
        error = obj.get("error")
        if error or name == "error":
            raise StreamError("error_event", error_text(error or obj))
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
            self.answers += 1
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


def _dify_error(obj: dict) -> str:
    return short(f"{obj.get('status', '')} {obj.get('code', '')}: {obj.get('message', '')}".strip())


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
