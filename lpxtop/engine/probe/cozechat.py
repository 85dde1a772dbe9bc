"""The sink of a Coze bot's chat stream (`POST /v3/chat` with `"stream": true`: api.coze.com, api.coze.cn,
or an open-source Coze Studio host).

The stream is SSE with `event:` and `data:` lines (Coze's API documentation and SDKs, Coze Studio's
source: tests/fixtures/platforms/SOURCES.md). Chat events carry a Chat object (`id`, `conversation_id`,
`status`, `created_at`/`completed_at` in whole seconds, `usage`, `last_error`), message events a Message
object (`id`, `type`, `content`, `chat_id`):

- `conversation.chat.created`, `conversation.chat.in_progress`: the chat began (no timing);
- `conversation.message.delta` / `conversation.message.completed`, by the message's `type`:
  `function_call` (the bot's model decided on a tool: the first one is the **tool decision**; its
  `content` is `{"name", "arguments", ...}`), `tool_response` / `tool_output` (the tool's result: the
  first after the decision ends the **tool's time**), `answer` (each non-empty delta, `content` or
  `reasoning_content`, is a token of the answer: the first after the tool's result, or the first
  without a tool, is the answer's TTFT, the last its end; an answer sent whole, as a card, counts once),
  `verbose`, `follow_up`, `knowledge` (no timing);
- `conversation.chat.completed`: the chat ended: `usage` (`input_count`/`output_count`/`token_count`, or
  `input_tokens`/`output_tokens` as the documentation's examples and Coze Studio write them) and the
  platform's own times; reading stops here (the `done` that follows is drained);
- `conversation.chat.failed` (`last_error.msg`, or `{"code", "msg"}`), `conversation.chat.cancelled`,
  `error` and Coze Studio's `conversation.error` (`{"code", "msg"}`), and an `error` object: `error_event`;
- `conversation.chat.requires_action` (Coze Studio: `conversation.chat.required_action`): the bot waits
  for a tool its client must run (`required_action.submit_tool_outputs.tool_calls`); reading stops and
  the step is classified `requires_action` (engine/agent/coze.py): lpxtop runs no client-side tools;
- `done` (`data: [DONE]`, `"[DONE]"` or empty) and Coze Studio's `conversation.stream.done`: the end.

A body that is one JSON object is Coze's non-streamed answer (`{"code": 0, "data": {chat}}`:
`not_streamed`) or its error (`{"code": 4000, "msg": ...}`, sent with HTTP 200 too: `error_event`).
"""

from __future__ import annotations

import json

from lpxtop.engine.probe.chunks import count
from lpxtop.engine.probe.difyevents import text_of
from lpxtop.engine.probe.errors import StreamError, error_text, short
from lpxtop.engine.probe.sink import StreamSink

END_EVENTS = ("done", "conversation.stream.done")
ERROR_EVENTS = ("error", "conversation.error")
REQUIRES_ACTION = ("conversation.chat.requires_action", "conversation.chat.required_action")
TOOL_RESULT_TYPES = ("tool_response", "tool_output")
MAX_CONTENT_CHARS = 4096  # of a function_call's content, kept to name the tool and judge its arguments


class CozeChatSink(StreamSink):
    """A Coze chat stream's events, with the arrival time of each one that matters.

    `first_token_ns` is the first message of the bot (a tool decision, a tool's result, answer text) or
    its call for a client-side tool: the bot's first sign of work.
    """

    markers = (b"chat.completed", b"chat.failed", b"chat.cancelled", b"_action", b"done", b"error")

    def __init__(self) -> None:
        super().__init__()
        self.chat_id: str | None = None
        self.tool_decision_ns: int | None = None
        self.tool_name: str | None = None
        self.tool_arguments: str | None = None
        self.tool_response_ns: int | None = None
        self.answer_first_ns: int | None = None
        self.answer_last_ns: int | None = None
        self.completed_ns: int | None = None
        self.created_at: int | None = None  # Unix seconds, the platform's clock
        self.completed_at: int | None = None
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.total_tokens: int | None = None
        self.requires_action: tuple[str, ...] | None = None  # the client-side tools the bot waits for
        self.messages = 0
        self._answers: set[str] = set()  # answer messages that came as deltas

    @property
    def token_events(self) -> int:
        return self.messages

    def whole_body(self, obj: dict) -> bool:
        code = obj.get("code")
        if (isinstance(code, int) and not isinstance(code, bool) and code != 0) or obj.get("error_message"):
            raise StreamError("error_event", coze_error(obj))
        return "code" in obj and isinstance(obj.get("data"), dict)

    def event(self, data: str, name: str | None, t_ns: int) -> None:
        if name in END_EVENTS:
            self.done = True
            return
        stripped = data.strip()
        if not stripped:
            return
        if self.first_event_ns is None:
            self.first_event_ns = t_ns
        try:
            obj = json.loads(stripped)
        except (ValueError, RecursionError) as exc:
            if name in ERROR_EVENTS:
                raise StreamError("error_event", short(stripped)) from None
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
            raise StreamError("bad_json", f"unparseable event: {short(stripped)[:80]} ({reason})") from None
        if name in ERROR_EVENTS:
            raise StreamError("error_event", coze_error(obj) if isinstance(obj, dict) else short(stripped))
        if not isinstance(obj, dict):
            if stripped in ('"[DONE]"', "[DONE]"):
                return
            raise StreamError("bad_json", f"event is not a JSON object: {short(stripped)[:80]}")
        if obj.get("error"):
            raise StreamError("error_event", error_text(obj["error"]))
        if name is None or not name.startswith("conversation."):
            return  # an event this sink does not know (conversation.audio.delta is known and passed over)
        if name.startswith("conversation.chat."):
            self._chat(name, obj, t_ns)
        elif name in ("conversation.message.delta", "conversation.message.completed"):
            self._message(name, obj, t_ns)

    def _chat(self, name: str, chat: dict, t_ns: int) -> None:
        self.chat_id = self.chat_id or _ident(chat.get("id"))
        self.created_at = self.created_at or _unix_s(chat.get("created_at"))
        if name == "conversation.chat.completed":
            self.completed_ns = t_ns
            self.completed_at = _unix_s(chat.get("completed_at"))
            self._usage(chat.get("usage"))
            self.done = True
            if self.first_token_ns is None:
                self.first_token_ns = t_ns
        elif name == "conversation.chat.failed":
            raise StreamError("error_event", f"the chat failed: {coze_error(chat)}")
        elif name == "conversation.chat.cancelled":
            raise StreamError("error_event", "the chat was cancelled")
        elif name in REQUIRES_ACTION:
            self.requires_action = _required_tools(chat.get("required_action"))
            self.completed_ns = t_ns
            self.done = True
            if self.first_token_ns is None:
                self.first_token_ns = t_ns

    def _message(self, name: str, message: dict, t_ns: int) -> None:
        kind = message.get("type")
        content = message.get("content")
        content = content if isinstance(content, str) else ""
        if kind == "function_call":
            self._work(t_ns)
            if self.tool_decision_ns is None:
                self.tool_decision_ns = t_ns
                self.tool_name, self.tool_arguments = _function_call(content[:MAX_CONTENT_CHARS])
        elif kind in TOOL_RESULT_TYPES:
            self._work(t_ns)
            if self.tool_response_ns is None and self.tool_decision_ns is not None:
                self.tool_response_ns = t_ns
        elif kind == "answer":
            reasoning = message.get("reasoning_content")
            said = bool(content) or (isinstance(reasoning, str) and bool(reasoning))
            message_id = _ident(message.get("id")) or ""
            if name == "conversation.message.delta":
                if not said:
                    return
                if len(self._answers) < 64:
                    self._answers.add(message_id)
            elif message_id in self._answers or not said:
                return  # the whole of an answer already streamed as deltas: no new token
            self._work(t_ns)
            if self.answer_first_ns is None and (self.tool_decision_ns is None or self.tool_response_ns is not None):
                self.answer_first_ns = t_ns
            if self.answer_first_ns is not None:
                self.answer_last_ns = t_ns

    def _work(self, t_ns: int) -> None:
        self.messages += 1
        if self.first_token_ns is None:
            self.first_token_ns = t_ns

    def _usage(self, usage: object) -> None:
        if not isinstance(usage, dict):
            return
        self.input_tokens = _first_count(usage, "input_count", "input_tokens")
        self.output_tokens = _first_count(usage, "output_count", "output_tokens")
        self.total_tokens = _first_count(usage, "token_count", "total_tokens")


def coze_error(obj: dict) -> str:
    """The message of a Coze error: `{"code", "msg"}`, a chat's `last_error`, or an OAuth `error_message`."""
    last = obj.get("last_error")
    source = last if isinstance(last, dict) and (last.get("code") or last.get("msg")) else obj
    code, msg = source.get("code"), source.get("msg") or source.get("message") or source.get("error_message")
    if code in (None, "", 0) and not msg:
        return short(json.dumps(obj)[:200]) if obj else "an error event without a message"
    return short(f"{code}: {msg}" if code not in (None, "") else str(msg))


def _function_call(content: str) -> tuple[str | None, str | None]:
    """(tool name, arguments as JSON text) from a function_call message's content."""
    try:
        call = json.loads(content)
    except (ValueError, RecursionError):
        return None, content or None
    if not isinstance(call, dict):
        return None, content or None
    name = text_of(call.get("name"), 100) or text_of(call.get("plugin_name"), 100)
    arguments = call.get("arguments", call.get("parameters"))
    if arguments is None:
        return name, None
    if isinstance(arguments, str):
        return name, arguments
    try:
        return name, json.dumps(arguments)
    except (TypeError, ValueError, RecursionError):
        return name, None


def _required_tools(action: object) -> tuple[str, ...]:
    calls = []
    if isinstance(action, dict) and isinstance(action.get("submit_tool_outputs"), dict):
        calls = action["submit_tool_outputs"].get("tool_calls") or []
    names = []
    for call in calls[:8] if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        name = text_of(function.get("name"), 100) if isinstance(function, dict) else None
        names.append(name or "?")
    return tuple(names)


def _ident(value: object) -> str | None:
    """An id as Coze sends it: a string (the cloud API) or a number (Coze Studio's int64 ids)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return text_of(value, 100)


def _first_count(usage: dict, *keys: str) -> int | None:
    for key in keys:
        value = count(usage.get(key))
        if value is not None:
            return value
    return None


def _unix_s(value: object) -> int | None:
    """A Unix time in whole seconds (Coze's `created_at`/`completed_at`), as an int; None if not one."""
    if type(value) is float and value.is_integer():
        value = int(value)
    return value if type(value) is int and 0 < value < 10**11 else None
