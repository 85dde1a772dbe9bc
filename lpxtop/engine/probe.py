"""One streaming request to an OpenAI-compatible endpoint, measured at byte arrival.

Definitions follow `vllm bench serve` (see DESIGN.md "Measuring a request"): TTFT at the first event that
carries a token (a role-only first chunk is not a token), ITL between token-bearing events, E2E at the
last token-bearing event, output tokens from `usage`. Every failure becomes a classified Sample; no
exception escapes except cancellation.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime

from lpxtop.engine.errors import classify_exception, http_error_kind
from lpxtop.engine.httpclient import (
    ConnectTimeout,
    HttpClient,
    HttpError,
    HttpTimeout,
    PoolTimeout,
    Response,
    Timeout,
)
from lpxtop.engine.server_kinds import auth_headers
from lpxtop.engine.sse import SseParser
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.probe import Sample

MAX_ERROR_BODY = 8192
# After [DONE]: how much more of the body, and for how long, to read so the connection can be reused
DRAIN_MAX_BYTES = 65536
DRAIN_TIMEOUT_S = 0.5
MAX_MESSAGE = 200
# After the first token, reads wait to be parsed together until this many bytes are waiting (see _LazyEvents)
LAZY_MAX_BYTES = 65536


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
    return endpoint.url.rstrip("/") + ("/completions" if endpoint.api == "completions" else "/chat/completions")


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
    finish_reason: str | None = None
    response_id: str | None = None
    model: str | None = None
    done: bool = False

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
        return _sample(endpoint, m, status, kind, msg)
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
    try:
        if response.status_code != 200:
            await _raise_http_error(response)
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
    together: when one holds `[DONE]` or an `"error"` (the probe ends there), when the list passes
    LAZY_MAX_BYTES, and when the stream ends or fails. A read then costs little more than its wake-up,
    and the parsing runs in one warm loop instead of one cold pass per token: on a 2-core VM with 4
    endpoints, the probes' CPU went down by about a fifth (perf stat, 273 -> 222 ms per 20 s).
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

    def take(self, chunk: bytes, t_ns: int) -> bool:
        """Response.feed's sink, run in the client's read callback; True stops the reading."""
        if not self._m.token_ns:
            return self._parse(chunk, t_ns)
        self._pending.append((chunk, t_ns))
        self._pending_bytes += len(chunk)
        seen = self._tail + chunk  # a marker may straddle two reads
        self._tail = chunk[-8:]
        if self._pending_bytes < LAZY_MAX_BYTES and b"[DONE]" not in seen and b'"error"' not in seen:
            return False
        return self.catch_up()

    def catch_up(self) -> bool:
        """Parse the reads that wait; True once the stream's [DONE] is in. Raises _ProbeError on a bad event."""
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        return any(self._parse(chunk, t_ns) for chunk, t_ns in pending)

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
        """The body ended: a last event without its blank line still counts."""
        m = self._m
        for event in self._parser.close(time.perf_counter_ns()):
            _handle_event(event.data, event.t_ns, m, self._status)

    def _parse(self, chunk: bytes, t_ns: int) -> bool:
        m = self._m
        had_token = bool(m.token_ns)
        for event in self._parser.feed(chunk, t_ns):
            _handle_event(event.data, event.t_ns, m, self._status)
            if m.done:
                return True
        if self._parser.overflowed:
            raise _ProbeError("bad_json", "an SSE line longer than 4 MiB", self._status)
        if m.token_ns and not had_token:
            self._watchdog.arm(self._total_deadline_ns)  # the first token came: from now on only the whole limit
        return False


async def _raise_http_error(response: Response) -> None:
    body = b""
    try:
        body = await response.read(MAX_ERROR_BODY, truncate=True)
    except (HttpError, OSError):
        pass
    message = _error_message(body) or response.reason_phrase or "error"
    raise _ProbeError(
        http_error_kind(response.status_code),
        f"HTTP {response.status_code}: {message}",
        response.status_code,
        _retry_after(response.headers.get("retry-after")),
    )


def _error_message(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace").strip()
    try:
        obj = json.loads(text)
    except ValueError:
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


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _handle_event(data: str, t_ns: int, m: _Measure, status: int) -> None:
    if m.first_event_ns is None:
        m.first_event_ns = t_ns
    if data.strip() == "[DONE]":
        m.done = True
        return
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise _ProbeError("bad_json", f"unparseable event: {_short(data)[:80]} ({exc.msg})", status) from None
    if not isinstance(obj, dict):
        raise _ProbeError("bad_json", f"event is not a JSON object: {_short(data)[:80]}", status)
    if "error" in obj and not obj.get("choices"):
        err = obj["error"]
        msg = err.get("message") if isinstance(err, dict) else err
        raise _ProbeError("error_event", _short(str(msg)), status)
    m.response_id = m.response_id or obj.get("id")
    m.model = m.model or obj.get("model")
    usage = obj.get("usage")
    if isinstance(usage, dict):
        if isinstance(usage.get("completion_tokens"), int):
            m.usage_completion = usage["completion_tokens"]
        if isinstance(usage.get("prompt_tokens"), int):
            m.usage_prompt = usage["prompt_tokens"]
    choices = obj.get("choices")
    if not isinstance(choices, list):
        return
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        if choice.get("finish_reason"):
            m.finish_reason = choice["finish_reason"]
        if _carries_token(choice):
            m.token_ns.append(t_ns)
            m.tokens_per_event.append(_tokens_in(choice))
            break  # one event is one token-bearing event, whatever the number of choices


def _carries_token(choice: dict) -> bool:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        for key in ("content", "reasoning_content", "reasoning"):
            if delta.get(key):
                return True
        if delta.get("tool_calls"):
            return True
    return bool(choice.get("text"))


def _tokens_in(choice: dict) -> int:
    """Tokens in one event when the server says (token_ids, logprobs); else 1."""
    ids = choice.get("token_ids")
    if isinstance(ids, list) and ids:
        return len(ids)
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list) and logprobs["content"]:
        return len(logprobs["content"])
    return 1


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
        error_message=error_message,
        http_status=status,
        response_id=m.response_id,
        model=m.model,
        connect_ms=m.ms(m.connect_done_ns) if m.connect_done_ns is not None else 0.0,
        first_event_ms=m.ms(m.first_event_ns),
        ttft_ms=token_ms[0] if token_ms else None,
        e2e_ms=token_ms[-1] if token_ms else None,
        token_event_ms=token_ms,
        tokens_per_event=tuple(m.tokens_per_event),
        output_tokens=n,
        output_tokens_approx=approx,
        prompt_tokens=m.usage_prompt,
        finish_reason=m.finish_reason,
        retry_after_s=retry_after,
    )


async def fetch_models(client: HttpClient, endpoint: EndpointConfig, timeout_s: float = 5.0) -> tuple[tuple[str, ...], str | None]:
    """Model ids from GET /v1/models, or () and a classified '<kind>: <message>' error."""
    try:
        response = await client.get(
            endpoint.url.rstrip("/") + "/models",
            headers=request_headers(endpoint, stream=False),
            timeout=Timeout(connect=min(timeout_s, endpoint.connect_timeout_s), read=timeout_s, write=timeout_s, pool=timeout_s),
        )
    except asyncio.CancelledError:
        raise
    except HttpTimeout as exc:
        kind = "connect_timeout" if isinstance(exc, ConnectTimeout | PoolTimeout) else "read_timeout"
        return (), f"{kind}: GET /models took longer than {timeout_s:g} s"
    except Exception as exc:  # noqa: BLE001
        kind, msg = classify_exception(exc, started_stream=False)
        return (), f"{kind}: {msg}"
    if response.status_code != 200:
        return (), f"{http_error_kind(response.status_code)}: HTTP {response.status_code} on GET /models: {_error_message(response.content[:MAX_ERROR_BODY])}"
    try:
        data = response.json().get("data", [])
        ids = tuple(str(d["id"]) for d in data if isinstance(d, dict) and "id" in d)
    except (ValueError, AttributeError, TypeError):
        return (), "bad_json: GET /models did not return an OpenAI model list"
    return ids, None

