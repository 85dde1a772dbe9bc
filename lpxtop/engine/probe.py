"""One streaming request to an OpenAI-compatible endpoint, measured at byte arrival.

Definitions follow `vllm bench serve` (see DESIGN.md "Measuring a request" and README "What the numbers
mean"). A **token event** is a chunk whose delta carries a `content`, `reasoning_content`, `reasoning`
or `tool_calls` key (`text` for completions) with a value, even an empty string: vLLM streams one
chunk per token, and a token that completes no UTF-8 character arrives as `"content": ""`. Not token
events: the role-only opening chunk (`role` with empty content, before the first token), a finish-only
chunk (`delta: {}`, or `"content": null`), the usage chunk, and a closing chunk that carries `usage`
with its finish reason and an empty text (llama-server's completions end that way). TTFT is the first
token event, ITL the gaps between token events, E2E the last one; output tokens come from `usage` when
it holds a real count (a positive integer), else from the events (marked approximate).

Every failure becomes a classified Sample; no exception escapes except cancellation. Text that came
from the server (error messages, ids, the model name) goes through `textsafe.scrub` as it enters the
Sample, so a key a server echoes back, or a terminal escape in its message, reaches no screen or file.
"""

from __future__ import annotations

import asyncio
import json
import math
import secrets
import time
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

from lpxtop import textsafe
from lpxtop.engine.errors import classify_exception, http_error_kind
from lpxtop.engine.server_kinds import auth_headers
from lpxtop.http import (
    BOM,
    BodyTooLarge,
    ConnectTimeout,
    HttpClient,
    HttpError,
    HttpTimeout,
    PoolTimeout,
    Response,
    SseParser,
    Timeout,
)
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.probe import Sample

MAX_ERROR_BODY = 8192
# An error status's body is read for at most this long (and never past the request's own limit): a
# server that trickles it must not turn a 503 or a 429 with Retry-After into a timeout.
ERROR_BODY_TIMEOUT_S = 1.0
# After [DONE]: how much more of the body, and for how long, to read so the connection can be reused
DRAIN_MAX_BYTES = 65536
DRAIN_TIMEOUT_S = 0.5
MAX_MESSAGE = 200
MAX_NAME_CHARS = 256  # a model id, response id or finish reason longer than this is cut
MAX_URL_CHARS = 300  # a redirect target shown and stored
# After the first token, reads wait to be parsed together until this many bytes are waiting (see _LazyEvents)
LAZY_MAX_BYTES = 65536
# A body that is one JSON document (or an HTML page) instead of an event stream is kept up to this size
MAX_JSON_BODY = 1024 * 1024
# A token count above this is not a count (a 400-digit integer would break every figure made from it)
MAX_TOKEN_COUNT = 100_000_000
# Retry-After beyond a day is not a plan; the runner caps its wait lower still
MAX_RETRY_AFTER_S = 86400.0
MODELS_TIMEOUT_S = 5.0
MAX_MODEL_IDS = 1000
MODELS_MAX_BYTES = 4 * 1024 * 1024
# finish_reason values that end a stream as a failure (vLLM's FinishReason ERROR and ABORT)
FAILED_FINISH = ("error", "abort")
_TEXT_KEYS = ("content", "reasoning_content", "reasoning")
# Reads that may hold the end of the stream or an error: parse what waits at once (see _LazyEvents)
_MARKERS = (b"[DONE]", b"error")
_MARKER_TAIL = 8  # bytes kept from the previous reads, so a marker split across reads is still found
_WHITESPACE = b" \t\r\n"
NOT_STREAMED_MESSAGE = (
    'the server answered one JSON body instead of an event stream (it ignores "stream": true, or a proxy '
    "buffers the stream): TTFT and ITL cannot be measured"
)


def request_headers(endpoint: EndpointConfig, *, stream: bool = True) -> dict[str, str]:
    headers = {"Accept-Encoding": "identity", "User-Agent": "lpxtop"}
    if stream:
        headers["Accept"] = "text/event-stream"
    headers.update(auth_headers(endpoint))
    return headers


def build_body(endpoint: EndpointConfig, model: str | None, include_usage: bool = True) -> dict:
    """The streaming request body; a fresh random prefix defeats prefix caching so prefill time shows."""
    prompt = endpoint.prompt
    if endpoint.random_prefix:
        prompt = f"[{secrets.token_hex(6)}] {prompt}"
    body: dict = {"max_tokens": endpoint.max_tokens, "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    if model:
        body["model"] = model
    if endpoint.api == "completions":
        body["prompt"] = prompt
    else:
        body["messages"] = [{"role": "user", "content": prompt}]
    body.update(endpoint.extra_body)  # e.g. ignore_eos for a load test
    return body


def endpoint_path(endpoint: EndpointConfig) -> str:
    return endpoint.api_url("/completions" if endpoint.api == "completions" else "/chat/completions")


@dataclass
class _Measure:
    """Mutable state of one request while it runs; frozen into a Sample at the end."""

    start_ns: int
    wall_time: float
    connect_done_ns: int | None = None
    first_event_ns: int | None = None
    token_ns: list[int] = field(default_factory=list)
    tokens_per_event: list[int] = field(default_factory=list)
    usage_completion: int | None = None
    usage_prompt: int | None = None
    finish_reason: object = None  # as the server sent it; made a bounded, safe string in the Sample
    response_id: object = None
    model: object = None
    done: bool = False
    pool_wait_ns: int | None = None
    redirected_to: str | None = None

    def ms(self, t_ns: int | None) -> float | None:
        return None if t_ns is None else (t_ns - self.start_ns) / 1e6


class _ProbeError(Exception):
    def __init__(self, kind: str, message: str, status: int | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.retry_after = retry_after


def rejects_stream_options(sample: Sample) -> bool:
    """An older server that refuses `stream_options` (HTTP 400/422 naming it): probe again without it."""
    return sample.http_status in (400, 422) and "stream_options" in (sample.error_message or "")


async def run_probe(
    client: HttpClient, endpoint: EndpointConfig, model: str | None = None, *, include_usage: bool = True
) -> Sample:
    """Send one streaming request and measure it. Never raises (except CancelledError)."""
    model = model or endpoint.model
    body = build_body(endpoint, model, include_usage)
    m = _Measure(start_ns=0, wall_time=time.time())
    status: int | None = None
    watchdog = _Watchdog()
    m.start_ns = time.perf_counter_ns()
    watchdog.arm(m.start_ns + int(_first_token_budget(endpoint) * 1e9))
    try:
        status = await _stream(client, body, endpoint, m, watchdog)
        if not m.token_ns:
            raise _ProbeError("empty", "the stream finished without a single token", status)
        return _sample(endpoint, m, status)
    except _ProbeError as err:
        return _sample(endpoint, m, err.status or status, err.kind, err.message, err.retry_after)
    except asyncio.CancelledError:
        if not watchdog.absorb():
            raise  # cancelled from outside: the engine is stopping
        return _sample(endpoint, m, status, *_timeout_kind(endpoint, m))
    except (asyncio.TimeoutError, HttpTimeout) as exc:
        if isinstance(exc, ConnectTimeout | PoolTimeout):
            kind, msg = "connect_timeout", f"no connection within {endpoint.connect_timeout_s:g} s"
        else:
            kind, msg = _timeout_kind(endpoint, m)
        return _sample(endpoint, m, status, kind, msg)
    except Exception as exc:  # noqa: BLE001 - every failure becomes a classified sample
        kind, msg = classify_exception(exc, started_stream=m.first_event_ns is not None or status is not None)
        return _sample(endpoint, m, status or getattr(exc, "status_code", None), kind, msg)
    finally:
        watchdog.disarm()


def _timeout_kind(endpoint: EndpointConfig, m: _Measure) -> tuple[str, str]:
    if not m.token_ns:
        return "first_token_timeout", f"no token within {_first_token_budget(endpoint):g} s"
    return "read_timeout", f"stream stalled after {len(m.token_ns)} token events"


class _Watchdog:
    """Cancels the probing task when its deadline passes.

    One timer per request instead of a wait_for (a new task) per read: reads then return in the task
    that stamps them, with no extra event-loop hop between the bytes arriving and the timestamp.
    """

    def __init__(self) -> None:
        self._task = asyncio.current_task()
        self._loop = asyncio.get_running_loop()
        self._handle: asyncio.TimerHandle | None = None
        self.fired = False

    def arm(self, deadline_ns: int) -> None:
        self.disarm()
        delay = max(0.0, (deadline_ns - time.perf_counter_ns()) / 1e9)
        self._handle = self._loop.call_later(delay, self._fire)

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self.fired = True
        if self._task is not None:
            self._task.cancel()

    def absorb(self) -> bool:
        """True when the cancellation was this watchdog's (then it is undone), False when it came from outside."""
        if not self.fired:
            return False
        uncancel = getattr(self._task, "uncancel", None)  # Python >= 3.11 counts cancellations
        if uncancel is not None:
            uncancel()
        return True


def _first_token_budget(endpoint: EndpointConfig) -> float:
    return min(endpoint.first_token_timeout_s, endpoint.timeout_s)


async def _stream(client: HttpClient, body: dict, endpoint: EndpointConfig, m: _Measure, watchdog: _Watchdog) -> int:
    """Send, then read raw bytes, each stamped when it came off the socket. Returns the HTTP status."""
    total_deadline = m.start_ns + int(endpoint.timeout_s * 1e9)

    def connected(t_ns: int) -> None:
        m.connect_done_ns = t_ns

    response = await client.stream(
        "POST",
        endpoint_path(endpoint),
        json=body,
        headers=request_headers(endpoint),
        timeout=Timeout(
            connect=endpoint.connect_timeout_s,
            read=endpoint.first_token_timeout_s,
            write=endpoint.connect_timeout_s,
            pool=endpoint.connect_timeout_s,
        ),
        on_connect=connected,
    )
    m.start_ns = response.start_ns  # after any wait for lpxtop's own pool, and the attempt that succeeded
    m.pool_wait_ns = response.pool_wait_ns
    if response.redirects:
        m.redirected_to = shown_url(response.url)
    try:
        if response.status_code != 200:
            # The status is the finding: from here on only the error body's own short bound applies.
            watchdog.disarm()
            left_s = (total_deadline - time.perf_counter_ns()) / 1e9
            await _raise_http_error(response, min(ERROR_BODY_TIMEOUT_S, max(0.0, left_s)))
        status = response.status_code
        events = _LazyEvents(m, status, watchdog, total_deadline)
        try:
            ended = not await response.feed(events.take)
        except _ProbeError:
            raise
        except asyncio.CancelledError:
            events.catch_up_after_cancel()
            raise
        except Exception:
            events.catch_up()  # a bad event that came before the failure is what the probe reports
            raise
        events.catch_up()
        if ended:
            events.close()
        if m.done:
            # [DONE] is in: the measurement is complete. Read the body's end (the chunked encoding's
            # last chunk) so the connection goes back to the pool instead of being closed: otherwise
            # every probe pays a new TCP connection, on both sides.
            watchdog.disarm()
            await response.discard(DRAIN_MAX_BYTES, DRAIN_TIMEOUT_S)
        if not m.done and m.finish_reason is None:
            raise _ProbeError(
                "stream_cut",
                f"the server closed the stream after {len(m.token_ns)} token events without finish or [DONE]",
                response.status_code,
            )
        return response.status_code
    finally:
        await response.aclose()


class _LazyEvents:
    """The stream's reads, parsed at once until the first token and from then on in batches.

    Every read keeps the time it came off the socket, so when it is parsed does not change a figure.
    Up to the first token each read is parsed as it comes, because the first token re-arms the watchdog
    (from the first-token limit to the whole request's). After it, reads wait in a list and are parsed
    together: when one may hold `[DONE]` or an error (the probe ends there; a marker split across reads
    is found in the bytes kept from the reads before), when the list passes LAZY_MAX_BYTES, and when the
    stream ends or fails. A batch that ends inside an event leaves the next reads parsed as they come
    until the event is whole, so `[DONE]` whose blank line comes in a later read still ends the probe.
    A read then costs little more than its wake-up, and the parsing runs in one warm loop instead of
    one cold pass per token: on a 2-core VM with 4 endpoints, the probes' CPU went down by about a
    fifth (perf stat, 273 -> 222 ms per 20 s).

    Before the first event the body is also sniffed: one that begins with `{`, `[` or `<` is a JSON
    document or a page, not an event stream, and is kept whole to be classified when it ends.
    """

    def __init__(self, m: _Measure, status: int, watchdog: _Watchdog, total_deadline_ns: int) -> None:
        self._m = m
        self._status = status
        self._watchdog = watchdog
        self._total_deadline_ns = total_deadline_ns
        self._parser = SseParser()
        self._pending: list[tuple[bytes, int]] = []
        self._pending_bytes = 0
        self._tail = b""
        self._armed = False  # the last batch ended inside an event: parse each read until it is whole
        self._sniffing = True  # no byte other than white space (or a BOM) has come yet
        self._lead = b""  # a BOM's first bytes, while sniffing
        self._body: bytearray | None = None  # the body, when it is not an event stream

    def take(self, chunk: bytes, t_ns: int) -> bool:
        """Response.feed's sink, run in the client's read callback; True stops the reading."""
        if not self._m.token_ns:
            return self._parse(chunk, t_ns)
        self._pending.append((chunk, t_ns))
        self._pending_bytes += len(chunk)
        if self._armed:
            return self.catch_up()
        seen = self._tail + chunk  # a marker may straddle reads
        self._tail = seen[-_MARKER_TAIL:]
        if self._pending_bytes < LAZY_MAX_BYTES and _MARKERS[0] not in seen and _MARKERS[1] not in seen:
            return False
        return self.catch_up()

    def catch_up(self) -> bool:
        """Parse the reads that wait; True once the stream's [DONE] is in. Raises _ProbeError on a bad event."""
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        if not pending:
            return False
        self._tail = b""
        done = any(self._parse(chunk, t_ns) for chunk, t_ns in pending)
        self._armed = not done and self._parser.pending
        return done

    def catch_up_after_cancel(self) -> None:
        """The task is being cancelled: parse what came, so the sample counts it; a bad event among it is
        the probe's error when the cancellation is the watchdog's (the probe ends as a sample either way)."""
        try:
            self.catch_up()
        except _ProbeError:
            if self._watchdog.absorb():
                raise
            # cancelled from outside (the engine stopping): the cancellation goes on

    def close(self) -> None:
        """The body ended: a last event without its blank line still counts; a body that was not a
        stream is classified now."""
        m = self._m
        if self._body is not None:
            raise _body_error(bytes(self._body), m, self._status)
        for event in self._parser.close(time.perf_counter_ns()):
            _handle_event(event.data, event.t_ns, m, self._status, event.event)

    def _parse(self, chunk: bytes, t_ns: int) -> bool:
        m = self._m
        if self._sniffing and self._sniff(chunk, t_ns):
            return False
        if self._body is not None:
            self._body += chunk
            if len(self._body) > MAX_JSON_BODY:
                raise _ProbeError("not_streamed", f"{NOT_STREAMED_MESSAGE} (a body over {MAX_JSON_BODY} bytes)", self._status)
            return False
        had_token = bool(m.token_ns)
        for event in self._parser.feed(chunk, t_ns):
            _handle_event(event.data, event.t_ns, m, self._status, event.event)
            if m.done:
                return True
        if self._parser.overflowed:
            raise _ProbeError("bad_json", "an SSE line longer than 4 MiB", self._status)
        if m.token_ns and not had_token:
            self._watchdog.arm(self._total_deadline_ns)  # the first token came: from now on only the whole limit
        return False

    def _sniff(self, chunk: bytes, t_ns: int) -> bool:
        """Look at the body's first bytes; True when it is not an event stream (it is then kept whole)."""
        lead = (self._lead + chunk).lstrip(_WHITESPACE)
        if lead.startswith(BOM):
            lead = lead[len(BOM) :].lstrip(_WHITESPACE)
        if not lead or BOM.startswith(lead):
            self._lead = lead
            return False
        self._sniffing = False
        self._lead = b""
        if lead[:1] not in (b"{", b"[", b"<"):
            return False
        self._body = bytearray(lead)
        self._m.first_event_ns = t_ns
        return True


def _body_error(body: bytes, m: _Measure, status: int) -> _ProbeError:
    """What a 200 whose body was one document instead of an event stream means.

    A server that ignores `"stream": true` (or a proxy that buffers the stream into one body) answered,
    but nothing lpxtop reports can be measured from one body: TTFT, ITL and TPOT need the tokens' own
    arrival times, and taking the body's arrival as every token's would put E2E into TTFT and zero into
    ITL, bending the endpoint's percentiles. Counting it a success without figures would show the
    endpoint "up" with empty latency columns and no reason why. So it is a failure of its own kind,
    `not_streamed`, whose message says what happened; the token count from its `usage` is kept. A JSON
    `{"error": ...}` body is that error (`error_event`); anything else is `bad_json`.
    """
    text = body.decode("utf-8", errors="replace")
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        if text.lstrip()[:1] == "<":
            return _ProbeError("not_streamed", f"the server answered a page, not an event stream: {_short(text)[:120]}", status)
        return _ProbeError("bad_json", f"the server answered neither an event stream nor JSON: {_short(text)[:80]}", status)
    if isinstance(obj, dict):
        if obj.get("error"):
            return _ProbeError("error_event", _error_text(obj["error"]), status)
        if isinstance(obj.get("choices"), list):
            _take_usage(obj.get("usage"), m)
            m.response_id = obj.get("id")
            m.model = obj.get("model")
            return _ProbeError("not_streamed", NOT_STREAMED_MESSAGE, status)
    return _ProbeError("bad_json", f"the server answered JSON that is not a completion: {_short(text)[:80]}", status)


async def _raise_http_error(response: Response, budget_s: float) -> None:
    body = await _read_error_body(response, budget_s)
    message = _error_message(body) or response.reason_phrase or "error"
    raise _ProbeError(
        http_error_kind(response.status_code),
        f"HTTP {response.status_code}: {message}",
        response.status_code,
        _retry_after(response.headers.get("retry-after")),
    )


async def _read_error_body(response: Response, budget_s: float) -> bytes:
    """Up to MAX_ERROR_BODY bytes of an error's body, for at most `budget_s` in all: what came by then."""
    deadline = time.monotonic() + budget_s
    parts: list[bytes] = []
    size = 0
    try:
        while size < MAX_ERROR_BODY:
            data = await response.receive(max(0.0, deadline - time.monotonic()))
            if not data:
                break
            parts.append(data)
            size += len(data)
    except (HttpError, OSError):
        pass  # a timeout, or the server hung up: the status and what came are enough
    return b"".join(parts)[:MAX_ERROR_BODY]


def _error_message(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace").strip()
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return _short(text)
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            return _short(str(err.get("message") or err.get("detail") or err))
        if isinstance(err, str):
            return _short(err)
        if "detail" in obj:
            return _short(str(obj["detail"]))
    return _short(text)


def _error_text(err: object) -> str:
    """The message of an error object a server sent (`{"message": ...}`, a string, or anything)."""
    if isinstance(err, dict):
        err = err.get("message") or err.get("detail") or err
    return _short(str(err))


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (seconds or an HTTP date), within [0, a day]; None if unreadable."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError, AttributeError):
            return None
    if not math.isfinite(seconds):
        return None
    return min(max(0.0, seconds), MAX_RETRY_AFTER_S)


def _count(value: object) -> int | None:
    """A token count as a server may send it: a positive integer (an integral float too), else None.

    Booleans, zero, negatives, fractions, NaN and absurd sizes are not counts: the probe then counts
    token events instead and marks the figure approximate.
    """
    if type(value) is int:
        return value if 0 < value <= MAX_TOKEN_COUNT else None
    if type(value) is float and value.is_integer() and 0 < value <= MAX_TOKEN_COUNT:
        return int(value)
    return None


def _take_usage(usage: object, m: _Measure) -> None:
    if isinstance(usage, dict):
        completion = _count(usage.get("completion_tokens"))
        if completion is not None:
            m.usage_completion = completion
        prompt = _count(usage.get("prompt_tokens"))
        if prompt is not None:
            m.usage_prompt = prompt


def _handle_event(data: str, t_ns: int, m: _Measure, status: int, name: str | None = None) -> None:
    """One SSE event's effect on the measure. Raises _ProbeError for an error or a malformed event."""
    text = data.strip()
    if not text:
        return  # an empty `data:` line: a heartbeat that keeps a proxy from closing the connection
    if m.first_event_ns is None:
        m.first_event_ns = t_ns
    if text == "[DONE]":
        m.done = True
        return
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        if name == "error":
            raise _ProbeError("error_event", _short(text), status) from None
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        raise _ProbeError("bad_json", f"unparseable event: {_short(text)[:80]} ({reason})", status) from None
    if not isinstance(obj, dict):
        if name == "error":
            raise _ProbeError("error_event", _short(text), status)
        raise _ProbeError("bad_json", f"event is not a JSON object: {_short(text)[:80]}", status)
    error = obj.get("error")
    if error or name == "error":  # `"error": null` (or false, or "") is not an error
        raise _ProbeError("error_event", _error_text(error or obj), status)
    if m.response_id is None:
        m.response_id = obj.get("id")
    if m.model is None:
        m.model = obj.get("model")
    usage = obj.get("usage")
    if usage is not None:
        _take_usage(usage, m)
    choices = obj.get("choices")
    if not isinstance(choices, list):
        return
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        reason = choice.get("finish_reason")
        if reason:
            m.finish_reason = reason
            if reason in FAILED_FINISH:
                detail = choice.get("error")
                message = _error_text(detail) if detail else f"the server ended the stream with finish_reason {reason!r}"
                raise _ProbeError("error_event", message, status)
        if _carries_token(choice, not m.token_ns, usage is not None):
            m.token_ns.append(t_ns)
            m.tokens_per_event.append(_tokens_in(choice))
            break  # one event is one token-bearing event, whatever the number of choices


def _carries_token(choice: dict, before_first: bool, with_usage: bool) -> bool:
    """Whether one choice of a chunk is a token event (the rule is in the module docstring)."""
    delta = choice.get("delta")
    if isinstance(delta, dict):
        if delta.get("tool_calls"):
            return True
        found = False
        for key in _TEXT_KEYS:
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


def _tokens_in(choice: dict) -> int:
    """Tokens in one event when the server says (token_ids, logprobs); else 1."""
    ids = choice.get("token_ids")
    if isinstance(ids, list) and ids:
        return len(ids)
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list) and logprobs["content"]:
        return len(logprobs["content"])
    return 1


def _name(value: object) -> str | None:
    """A name the server sent (model id, response id, finish reason): a bounded, safe string, or None."""
    if isinstance(value, str) and value:
        return textsafe.scrub(value[:MAX_NAME_CHARS])
    return None


def _sample(
    endpoint: EndpointConfig,
    m: _Measure,
    status: int | None,
    error_kind: str | None = None,
    error_message: str | None = None,
    retry_after: float | None = None,
) -> Sample:
    ok = error_kind is None
    token_ms = tuple((t - m.start_ns) / 1e6 for t in m.token_ns)
    if m.usage_completion is not None:
        n, approx = m.usage_completion, False
    elif m.token_ns:
        n, approx = sum(m.tokens_per_event), True
    else:
        n, approx = None, False
    return Sample(
        endpoint=endpoint.name,
        wall_time=m.wall_time,
        start_ns=m.start_ns,
        ok=ok,
        error_kind=error_kind,
        error_message=textsafe.scrub(error_message),
        http_status=status,
        response_id=_name(m.response_id),
        model=_name(m.model),
        connect_ms=m.ms(m.connect_done_ns) if m.connect_done_ns is not None else 0.0,
        first_event_ms=m.ms(m.first_event_ns),
        ttft_ms=token_ms[0] if token_ms else None,
        e2e_ms=token_ms[-1] if token_ms else None,
        token_event_ms=token_ms,
        tokens_per_event=tuple(m.tokens_per_event),
        output_tokens=n,
        output_tokens_approx=approx,
        prompt_tokens=m.usage_prompt,
        finish_reason=_name(m.finish_reason),
        retry_after_s=retry_after,
        end_wall_time=time.time(),
        pool_wait_ms=m.pool_wait_ns / 1e6 if m.pool_wait_ns is not None else None,
        redirected_to=m.redirected_to,
    )


def shown_url(url: str) -> str | None:
    """A URL a server sent (a redirect's target) as it may be shown and stored: no user:password, no query
    string (signed URLs carry credentials there), outside text scrubbed and bounded."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{host}:{parts.port}" if parts.port else host
    except ValueError:
        return None
    text = f"{parts.scheme}://{netloc}{parts.path}" + ("?…" if parts.query else "")
    return textsafe.scrub(text[:MAX_URL_CHARS]) or None


async def fetch_models(
    client: HttpClient, endpoint: EndpointConfig, timeout_s: float = MODELS_TIMEOUT_S
) -> tuple[tuple[str, ...], str | None]:
    """Model ids from GET /v1/models, or () and a classified '<kind>: <message>' error. Never raises
    (except CancelledError).

    Bounded as a whole by `timeout_s` (the client's total: a 200 that trickles a byte a second is cut
    when the time is up, though each read alone would be on time). The ids are server text: bounded in
    number and length and scrubbed like every other.
    """
    try:
        response = await client.get(
            endpoint.api_url("/models"),
            headers=request_headers(endpoint, stream=False),
            timeout=Timeout(connect=min(timeout_s, endpoint.connect_timeout_s), read=timeout_s, write=timeout_s,
                            pool=timeout_s, total=timeout_s),
            max_bytes=MODELS_MAX_BYTES,
        )
    except asyncio.CancelledError:
        raise
    except BodyTooLarge:
        return (), f"bad_json: GET /models answered more than {MODELS_MAX_BYTES} bytes"
    except HttpTimeout as exc:
        kind = "connect_timeout" if isinstance(exc, ConnectTimeout | PoolTimeout) else "read_timeout"
        return (), f"{kind}: GET /models took longer than {timeout_s:g} s"
    except Exception as exc:  # noqa: BLE001
        kind, msg = classify_exception(exc, started_stream=False)
        return (), textsafe.scrub(f"{kind}: {msg}")
    if response.status_code != 200:
        message = _error_message(response.content[:MAX_ERROR_BODY])
        return (), textsafe.scrub(f"{http_error_kind(response.status_code)}: HTTP {response.status_code} on GET /models: {message}")
    try:
        data = response.json().get("data", [])
        ids = tuple(
            textsafe.scrub(str(d["id"])[:MAX_NAME_CHARS])
            for d in data[:MAX_MODEL_IDS]
            if isinstance(d, dict) and isinstance(d.get("id"), str | int) and not isinstance(d.get("id"), bool)
        )
    except (ValueError, AttributeError, TypeError, RecursionError):
        return (), "bad_json: GET /models did not return an OpenAI model list"
    return tuple(i for i in ids if i), None
