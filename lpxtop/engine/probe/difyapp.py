"""The sink of a Dify app's stream (`POST /v1/chat-messages`, `response_mode: streaming`): agent and chat
apps, and chatflows (advanced-chat apps).

Dify's stream is `data: {"event": ...}` objects, plus `event: ping` keep-alives:

- `agent_thought` (one per reasoning round, sent when the round starts and again as it fills in): the
  first one naming a `tool` is the tool decision (`tool_input` holds the call's arguments as JSON, keyed
  by tool name in Dify's function-calling agent); the first with an `observation` is the tool's result;
- `agent_message` (agent apps) or `message` (chat apps, chatflows): answer text; each non-empty `answer`
  is a token of the answer, so the answer's TTFT is the first one after the observation (or the first,
  without a tool), its end the last;
- a chatflow's `workflow_started`, `node_started`, `node_finished`, `workflow_finished`: its nodes, timed
  one by one as a workflow's are (difyevents.py);
- `message_end`: the end; `metadata.usage.latency` is the app's own time for the message in seconds
  (Dify: from its task pipeline's start to saving the message); newer Dify versions add
  `time_to_first_token` and `time_to_generate` (seconds, its last model call's: Dify's `LLMUsage`), and
  `prompt_tokens`/`completion_tokens`;
- `error`: a classified `error_event` with its status and code, as are an SSE `event: error` (a gateway
  in front of the app) and an `error` object in any event (difyevents.py); `message_replace`
  (moderation) and other events carry no timing here and are passed over.

A blocking-mode answer (one JSON object with an `answer`) is `not_streamed`. The step built from it is
engine/agent/dify.py's.
"""

from __future__ import annotations

from lpxtop.engine.probe.chunks import count
from lpxtop.engine.probe.difyevents import (
    NodeTimeline,
    dify_error,
    dify_event,
    is_dify_error_body,
    seconds,
)
from lpxtop.engine.probe.errors import StreamError
from lpxtop.engine.probe.sink import StreamSink

ANSWER_EVENTS = ("agent_message", "message")


class DifyAppSink(StreamSink):
    """A Dify app stream's events, with the arrival time of each one that matters.

    `first_token_ns` is the first agent_thought, node event or answer text: the app's first sign of work,
    which ends the first-token limit (a tool round can take longer than that before any answer text comes).
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
        self.app_ttft_s: float | None = None
        self.app_generate_s: float | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.message_id: str | None = None
        self.nodes = NodeTimeline()  # a chatflow's
        self.thoughts = 0
        self.answers = 0

    @property
    def token_events(self) -> int:
        return self.thoughts + self.answers

    def whole_body(self, obj: dict) -> bool:
        if is_dify_error_body(obj):
            raise StreamError("error_event", dify_error(obj))
        return isinstance(obj.get("answer"), str)

    def event(self, data: str, name: str | None, t_ns: int) -> None:
        if not data.strip() or name == "ping":
            return
        if self.first_event_ns is None:
            self.first_event_ns = t_ns
        obj = dify_event(data, name)
        if obj is None:
            return
        kind = obj.get("event")
        self.message_id = self.message_id or _text(obj.get("message_id"))
        if self.nodes.take(kind, obj, t_ns):
            if self.first_token_ns is None:
                self.first_token_ns = t_ns
        elif kind == "agent_thought":
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
            self._usage(obj.get("metadata"))

    def _usage(self, metadata: object) -> None:
        usage = metadata.get("usage") if isinstance(metadata, dict) else None
        if not isinstance(usage, dict):
            return
        self.app_latency_s = seconds(usage.get("latency"))
        self.app_ttft_s = seconds(usage.get("time_to_first_token"))
        self.app_generate_s = seconds(usage.get("time_to_generate"))
        self.prompt_tokens = count(usage.get("prompt_tokens"))
        self.completion_tokens = count(usage.get("completion_tokens"))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
