"""The chunk rule: what one event of an OpenAI-style stream means, for every such stream lpxtop reads
(the chat and completions probes, an agent step's tool-call and answer calls, the load generator's
requests). Definitions follow `vllm bench serve` (docs/measurement.md).

- **token**: a chunk whose choice carries a `content`, `reasoning_content`, `reasoning` or `tool_calls`
  key in its delta (`text` for completions) with a value, even an empty string: vLLM streams one chunk
  per token, and a token that completes no UTF-8 character arrives as `"content": ""`. Not tokens: the
  role-only opening chunk (`role` with empty content, before the first token), a finish-only chunk
  (`delta: {}`, or `"content": null`), the usage chunk, and a closing chunk that carries `usage` with
  its finish reason and an empty text (llama-server's completions end that way). One event is at most
  one token event, whatever the number of choices; it counts the tokens the server says it holds
  (`token_ids`, `logprobs`), else 1.
- **finish**: the first truthy `finish_reason`; `"error"` and `"abort"` (vLLM's failed requests) fail
  the stream as `error_event`.
- **usage**: `usage.completion_tokens` / `prompt_tokens` when each is a real count (a positive integer,
  an integral float too); anything else is no count, and the tokens are then counted from the events.
- **error**: an SSE `event: error`, or a truthy `error` member of a chunk (beside `choices` too) is
  `error_event`; an event that is not a JSON object is `bad_json`; `data: [DONE]` ends the stream.
"""

from __future__ import annotations

import json

from lpxtop.engine.probe.errors import StreamError, error_text, short
from lpxtop.engine.probe.sink import StreamSink

# finish_reason values that end a stream as a failure (vLLM's FinishReason ERROR and ABORT)
FAILED_FINISH = ("error", "abort")
TEXT_KEYS = ("content", "reasoning_content", "reasoning")
# A token count above this is not a count (a 400-digit integer would break every figure made from it)
MAX_TOKEN_COUNT = 100_000_000


class ChunkSink(StreamSink):
    """An OpenAI-style stream read by the chunk rule: token arrival times, finish, usage, id and model.

    Values the server sent (`finish_reason`, `response_id`, `model`) are kept as sent; whoever shows or
    stores them makes them bounded, safe strings (chat.py `name`). The chat and completions probes use
    this sink as it is; a subclass that sets `takes_deltas` sees each choice before its token is counted.
    """

    markers = (b"[DONE]", b"error")
    takes_deltas = False

    def __init__(self) -> None:
        super().__init__()
        self.token_ns: list[int] = []  # arrival of each token event
        self.tokens_per_event: list[int] = []
        self.usage_completion: int | None = None
        self.usage_prompt: int | None = None
        self.finish_reason: object = None
        self.response_id: object = None
        self.model: object = None

    @property
    def finished(self) -> bool:
        return self.done or self.finish_reason is not None

    @property
    def token_events(self) -> int:
        return len(self.token_ns)

    def take_delta(self, choice: dict, t_ns: int) -> None:
        """A subclass's look at each choice (with `takes_deltas`), before its token is counted."""

    def whole_body(self, obj: dict) -> bool:
        if not isinstance(obj.get("choices"), list):
            return False
        take_usage(obj.get("usage"), self)
        self.response_id = obj.get("id")
        self.model = obj.get("model")
        return True

    def event(self, data: str, name: str | None, t_ns: int) -> None:
        text = data.strip()
        if not text:
            return  # an empty `data:` line: a heartbeat that keeps a proxy from closing the connection
        if self.first_event_ns is None:
            self.first_event_ns = t_ns
        if text == "[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as exc:
            if name == "error":
                raise StreamError("error_event", short(text)) from None
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
            raise StreamError("bad_json", f"unparseable event: {short(text)[:80]} ({reason})") from None
        if not isinstance(obj, dict):
            if name == "error":
                raise StreamError("error_event", short(text))
            raise StreamError("bad_json", f"event is not a JSON object: {short(text)[:80]}")
        error = obj.get("error")
        if error or name == "error":  # `"error": null` (or false, or "") is not an error
            raise StreamError("error_event", error_text(error or obj))
        if self.response_id is None:
            self.response_id = obj.get("id")
        if self.model is None:
            self.model = obj.get("model")
        usage = obj.get("usage")
        if usage is not None:
            take_usage(usage, self)
        choices = obj.get("choices")
        if not isinstance(choices, list):
            return
        token_ns = self.token_ns
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            reason = choice.get("finish_reason")
            if reason:
                self.finish_reason = reason
                if reason in FAILED_FINISH:
                    detail = choice.get("error")
                    message = error_text(detail) if detail else f"the server ended the stream with finish_reason {reason!r}"
                    raise StreamError("error_event", message)
            if self.takes_deltas:
                self.take_delta(choice, t_ns)
            if carries_token(choice, not token_ns, usage is not None):
                if not token_ns:
                    self.first_token_ns = t_ns
                token_ns.append(t_ns)
                self.tokens_per_event.append(tokens_in(choice))
                break  # one event is one token-bearing event, whatever the number of choices


def carries_token(choice: dict, before_first: bool, with_usage: bool) -> bool:
    """Whether one choice of a chunk is a token event (the rule is in the module docstring)."""
    delta = choice.get("delta")
    if isinstance(delta, dict):
        if delta.get("tool_calls"):
            return True
        found = False
        for key in TEXT_KEYS:
            value = delta.get(key)
            if value is not None:
                if value:
                    return True
                found = True
        if not found:
            return False  # a finish-only chunk (`delta: {}`), or content null
        if before_first and delta.get("role"):
            return False  # the role-only opening chunk
    else:
        value = choice.get("text")
        if value is None:
            return False
        if value:
            return True
    # An empty text: a token that completed no character, unless this is the closing chunk (its finish
    # reason and `usage` together, and no text: llama-server's completions stream ends that way).
    return not (with_usage and choice.get("finish_reason"))


def tokens_in(choice: dict) -> int:
    """Tokens in one event when the server says (token_ids, logprobs); else 1."""
    ids = choice.get("token_ids")
    if isinstance(ids, list) and ids:
        return len(ids)
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list) and logprobs["content"]:
        return len(logprobs["content"])
    return 1


def count(value: object) -> int | None:
    """A token count as a server may send it: a positive integer (an integral float too), else None.

    Booleans, zero, negatives, fractions, NaN and absurd sizes are not counts: the probe then counts
    token events instead and marks the figure approximate.
    """
    if type(value) is int:
        return value if 0 < value <= MAX_TOKEN_COUNT else None
    if type(value) is float and value.is_integer() and 0 < value <= MAX_TOKEN_COUNT:
        return int(value)
    return None


def take_usage(usage: object, sink: ChunkSink) -> None:
    if isinstance(usage, dict):
        completion = count(usage.get("completion_tokens"))
        if completion is not None:
            sink.usage_completion = completion
        prompt = count(usage.get("prompt_tokens"))
        if prompt is not None:
            sink.usage_prompt = prompt
