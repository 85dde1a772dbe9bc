"""One streamed POST of the agent probe, read at byte arrival with the chat probe's timeouts and errors.

The chat probe's measurement, not a copy of it: the request headers, the watchdog (first-token limit,
then the whole request's), the HTTP error reading and the error classes come from
`lpxtop.engine.probe`. What differs is what an event means, so each kind of stream brings its own
sink: `ChatEvents` for OpenAI-compatible chunks (content and tool-call deltas), and the Dify client's
in `dify.py`. Each read is parsed as it arrives (an agent step is two short streams per interval, so the
chat probe's batching after the first token would save next to nothing here), and every event carries
the arrival time of the read that completed it.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Protocol

from lpxtop.engine.agent.toolcalls import ToolCallAssembler
from lpxtop.engine.errors import classify_exception
from lpxtop.engine.probe import (
    DRAIN_MAX_BYTES,
    DRAIN_TIMEOUT_S,
    ERROR_BODY_TIMEOUT_S,
    _first_token_budget,
    _ProbeError,
    _raise_http_error,
    _short,
    _Watchdog,
    request_headers,
)
from lpxtop.http import ConnectTimeout, HttpClient, HttpTimeout, PoolTimeout, SseParser, Timeout
from lpxtop.model.endpoint import EndpointConfig

# Keys of a chat delta that carry a token (DESIGN.md "Token events"), and a completion choice's `text`.
TOKEN_KEYS = ("content", "reasoning_content", "reasoning", "tool_calls")
MAX_CONTENT_CHARS = 1 << 16  # the answer's text kept (for the record; timing never needs it)


class EventSink(Protocol):
    """What a stream's events mean. `handle` may raise `_ProbeError` for a classified failure."""

    first_token_ns: int | None  # the first token-bearing event (re-arms the watchdog; none: `empty`)
    done: bool  # the stream's own end marker came ([DONE], message_end): stop reading
    finished: bool  # the answer ended properly (finish_reason, or done)

    def handle(self, data: str, event: str | None, t_ns: int) -> None: ...


@dataclass
class CallOutcome:
    """How one call went: times are perf_counter_ns; error_kind None for a success."""

    start_ns: int
    status: int | None = None
    connect_ns: int | None = None
    error_kind: str | None = None
    error_message: str | None = None
    retry_after_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.error_kind is None


async def measured_post(
    client: HttpClient, endpoint: EndpointConfig, url: str, body: dict, sink: EventSink
) -> CallOutcome:
    """POST `body` to `url`, streaming; feed its events to `sink`. Never raises (except CancelledError)."""
    outcome = CallOutcome(start_ns=0)
    watchdog = _Watchdog()
    outcome.start_ns = time.perf_counter_ns()
    watchdog.arm(outcome.start_ns + int(_first_token_budget(endpoint) * 1e9))
    try:
        await _stream(client, endpoint, url, body, sink, outcome, watchdog)
        if sink.first_token_ns is None:
            raise _ProbeError("empty", "the stream finished without a single token", outcome.status)
    except _ProbeError as err:
        _fail(outcome, err.kind, err.message, err.status, err.retry_after)
    except asyncio.CancelledError:
        if not watchdog.absorb():
            raise  # cancelled from outside: the engine is stopping
        _fail(outcome, *_timeout_kind(endpoint, sink))
    except (asyncio.TimeoutError, HttpTimeout) as exc:
        if isinstance(exc, ConnectTimeout | PoolTimeout):
            _fail(outcome, "connect_timeout", f"no connection within {endpoint.connect_timeout_s:g} s")
        else:
            _fail(outcome, *_timeout_kind(endpoint, sink))
    except Exception as exc:  # noqa: BLE001 - every failure becomes a classified outcome
        started = sink.first_token_ns is not None or outcome.status is not None
        _fail(outcome, *classify_exception(exc, started_stream=started))
    finally:
        watchdog.disarm()
    return outcome


def _fail(outcome: CallOutcome, kind: str, message: str, status: int | None = None,
          retry_after: float | None = None) -> None:
    outcome.error_kind = kind
    outcome.error_message = message
    if status is not None:
        outcome.status = status
    outcome.retry_after_s = retry_after


def _timeout_kind(endpoint: EndpointConfig, sink: EventSink) -> tuple[str, str]:
    if sink.first_token_ns is None:
        return "first_token_timeout", f"no token within {_first_token_budget(endpoint):g} s"
    return "read_timeout", f"stream stalled after its first token (whole-request limit {endpoint.timeout_s:g} s)"


async def _stream(
    client: HttpClient, endpoint: EndpointConfig, url: str, body: dict, sink: EventSink,
    outcome: CallOutcome, watchdog: _Watchdog,
) -> None:
    total_deadline = outcome.start_ns + int(endpoint.timeout_s * 1e9)

    def connected(t_ns: int) -> None:
        outcome.connect_ns = t_ns

    response = await client.stream(
        "POST", url, json=body, headers=request_headers(endpoint),
        timeout=Timeout(connect=endpoint.connect_timeout_s, read=endpoint.first_token_timeout_s,
                        write=endpoint.connect_timeout_s, pool=endpoint.connect_timeout_s),
        on_connect=connected,
    )
    try:
        if response.status_code != 200:
            # the error body gets a short bound of its own, so a trickling body keeps the status
            await _raise_http_error(response, ERROR_BODY_TIMEOUT_S)
        outcome.status = response.status_code
        parser = SseParser()

        def take(chunk: bytes, t_ns: int) -> bool:
            had_token = sink.first_token_ns is not None
            for event in parser.feed(chunk, t_ns):
                sink.handle(event.data, event.event, event.t_ns)
                if sink.done:
                    return True
            if parser.overflowed:
                raise _ProbeError("bad_json", "an SSE line longer than 4 MiB", outcome.status)
            if not had_token and sink.first_token_ns is not None:
                watchdog.arm(total_deadline)  # the first token came: from now on only the whole limit
            return False

        ended = not await response.feed(take)
        if ended and not sink.done:
            for event in parser.close(time.perf_counter_ns()):  # a last event without its blank line
                sink.handle(event.data, event.event, event.t_ns)
        if sink.done:
            watchdog.disarm()
            await response.discard(DRAIN_MAX_BYTES, DRAIN_TIMEOUT_S)  # so the connection is reused
        if not sink.done and not sink.finished:
            raise _ProbeError("stream_cut", "the server closed the stream before its end", outcome.status)
    finally:
        await response.aclose()


def is_token_event(delta: dict, after_first_token: bool) -> bool:
    """Whether a chat chunk's delta is a token event (DESIGN.md "Token events").

    After the first token, a delta carrying any token key is a token even when its value is empty (vLLM
    sends a token that completes no UTF-8 character as `"content": ""`). Before it, the role-only opening
    chunk (`role` with empty content) is not, and neither is a finish-only chunk (`delta: {}`); a first
    chunk with a token key and no `role` is the first token even when empty. `null` values and an empty
    `tool_calls` list carry nothing.
    """
    present = False
    for key in TOKEN_KEYS:
        value = delta.get(key)
        if value is None or (key == "tool_calls" and not value):
            continue
        if value:
            return True
        present = True
    if not present:
        return False
    return after_first_token or "role" not in delta


@dataclass
class ChatEvents:
    """An OpenAI-compatible chat stream's events: token times, the answer's text, tool-call deltas, usage."""

    first_event_ns: int | None = None
    first_token_ns: int | None = None
    last_token_ns: int | None = None
    token_events: int = 0
    finish_reason: str | None = None
    usage_completion: int | None = None
    usage_prompt: int | None = None
    response_id: str | None = None
    model: str | None = None
    done: bool = False
    content: list[str] = field(default_factory=list)
    content_chars: int = 0
    tool_calls: ToolCallAssembler = field(default_factory=ToolCallAssembler)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def text(self) -> str:
        return "".join(self.content)

    def handle(self, data: str, event: str | None, t_ns: int) -> None:
        if self.first_event_ns is None:
            self.first_event_ns = t_ns
        stripped = data.strip()
        if stripped == "[DONE]":
            self.done = True
            return
        if not stripped:
            return  # an empty `data:` heartbeat
        try:
            obj = json.loads(data)
        except ValueError as exc:
            raise _ProbeError("bad_json", f"unparseable event: {_short(data)[:80]} ({exc})") from None
        if not isinstance(obj, dict):
            raise _ProbeError("bad_json", f"event is not a JSON object: {_short(data)[:80]}")
        error = obj.get("error")
        if error and not obj.get("choices"):
            message = error.get("message") if isinstance(error, dict) else error
            raise _ProbeError("error_event", _short(str(message)))
        self.response_id = self.response_id or _str_or_none(obj.get("id"))
        self.model = self.model or _str_or_none(obj.get("model"))
        usage = obj.get("usage")
        if isinstance(usage, dict):
            completion, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
            if _is_count(completion):
                self.usage_completion = completion
            if _is_count(prompt):
                self.usage_prompt = prompt
        choices = obj.get("choices")
        if not isinstance(choices, list):
            return
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                self.finish_reason = reason
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                continue
            self.tool_calls.feed(delta.get("tool_calls"), t_ns)
            text = delta.get("content")
            if isinstance(text, str) and text and self.content_chars < MAX_CONTENT_CHARS:
                self.content.append(text)
                self.content_chars += len(text)
            if is_token_event(delta, self.first_token_ns is not None):
                if self.first_token_ns is None:
                    self.first_token_ns = t_ns
                self.last_token_ns = t_ns
                self.token_events += 1
            break  # one event is one token-bearing event, whatever the number of choices


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**12


def _str_or_none(value: object) -> str | None:
    return value[:200] if isinstance(value, str) else None
