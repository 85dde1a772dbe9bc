"""The one measured stream: every streaming request lpxtop sends goes through `measured_stream`.

It sends the request (with a fresh `traceparent`, tracecontext.py), stamps every read with
`time.perf_counter_ns()` as its bytes come off the socket, and hands the stream's events to a sink
(sink.py) that says what they mean for the API. What is the same for every API is here: the timeouts
(a first-token limit, then the whole request's), the HTTP error statuses and their bodies, a body that
is not an event stream, a stream cut before its end, the drain that lets the connection be reused, and
turning every failure into one classified `StreamOutcome`. No exception escapes except cancellation.

Times: `start_ns` is when the request counted as sent (after any wait for lpxtop's own connection pool,
`lpxtop.http.HttpClient.stream`), `sent_wall_ns` the wall clock at that same moment. With
`ttft_from="call"` (the load generator's reference mode, docs/load-vs-vllm-bench.md) `start_ns` stays
where `measured_stream` was called, before lpxtop's own event loop and pool have sent the request, as
`vllm bench serve` starts its clock.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from lpxtop import textsafe
from lpxtop.engine.diagnosis import explain
from lpxtop.engine.probe.errors import StreamError, classify_exception, raise_http_error
from lpxtop.engine.probe.reads import BatchedReads
from lpxtop.engine.probe.sink import StreamSink
from lpxtop.engine.probe.tracecontext import TRACEPARENT_HEADER, TraceContext, new_trace_context
from lpxtop.http import ConnectTimeout, HttpClient, HttpTimeout, PoolTimeout, Timeout, shown_url
from lpxtop.model.endpoint import EndpointConfig

# An error status's body is read for at most this long (and never past the request's own limit): a
# server that trickles it must not turn a 503 or a 429 with Retry-After into a timeout.
ERROR_BODY_TIMEOUT_S = 1.0
# After the end marker: how much more of the body, and for how long, to read so the connection can be reused
DRAIN_MAX_BYTES = 65536
DRAIN_TIMEOUT_S = 0.5
MAX_URL_CHARS = 300  # a redirect target shown and stored


def with_traceparent(headers: dict[str, str], trace: TraceContext) -> dict[str, str]:
    """`headers` with the request's own `traceparent`: one configured under any spelling of the name is
    replaced, never sent beside it (two would leave the server to pick one, and the span unjoined)."""
    for name in [name for name in headers if name.lower() == TRACEPARENT_HEADER]:
        del headers[name]
    headers[TRACEPARENT_HEADER] = trace.traceparent()
    return headers


def request_headers(endpoint: EndpointConfig, *, stream: bool = True) -> dict[str, str]:
    headers = {"Accept-Encoding": "identity", "User-Agent": "lpxtop"}
    if stream:
        headers["Accept"] = "text/event-stream"
    headers.update(endpoint.sent_headers)  # the credentials, resolved when the configuration was built
    return headers


@dataclass
class StreamOutcome:
    """How one measured request went. Times are perf_counter_ns; `error_kind` None for a success."""

    start_ns: int  # when the request counted as sent
    wall_time: float  # time.time() as the request began (before any pool wait), for display and charts
    sent_wall_ns: int  # time.time_ns() at start_ns
    trace: TraceContext  # the traceparent it was sent with
    status: int | None = None
    connect_ns: int | None = None  # a new connection was ready (None: a kept-alive one was reused)
    pool_wait_ns: int | None = None  # lpxtop's own wait for a free connection of its pool
    redirected_to: str | None = None  # the final URL when the server redirected the request
    error_kind: str | None = None
    error_message: str | None = None
    retry_after_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    def ms(self, t_ns: int | None) -> float | None:
        """A perf_counter_ns time in ms from this request's start."""
        return None if t_ns is None else (t_ns - self.start_ns) / 1e6

    def fail(self, kind: str, message: str, status: int | None = None, retry_after: float | None = None) -> None:
        self.error_kind = kind
        self.error_message = message
        if status is not None:
            self.status = status
        self.retry_after_s = retry_after


TTFT_FROM = ("sent", "call")  # where a request's clock starts: when it goes out (default), or when it is made


async def measured_stream(
    client: HttpClient, endpoint: EndpointConfig, url: str, body: dict, sink: StreamSink, *, ttft_from: str = "sent",
    trace: TraceContext | None = None,
) -> StreamOutcome:
    """POST `body` to `url` streaming, feed its events to `sink`, and say how it went. Never raises
    (except CancelledError): every failure is the outcome's `error_kind`. `ttft_from`: TTFT_FROM. `trace`: the
    context to send (an agent step's call in the step's trace); a fresh one by default."""
    trace = trace or new_trace_context()
    wall_time = time.time()
    watchdog = Watchdog()
    start_ns = time.perf_counter_ns()
    out = StreamOutcome(start_ns=start_ns, wall_time=wall_time, sent_wall_ns=time.time_ns(), trace=trace)
    watchdog.arm(start_ns + int(first_token_budget(endpoint) * 1e9))
    try:
        await _exchange(client, endpoint, url, body, sink, out, watchdog, from_call=ttft_from == "call")
        if sink.first_token_ns is None:
            raise StreamError("empty", "the stream finished without a single token", out.status)
    except StreamError as err:
        out.fail(err.kind, err.message, err.status, err.retry_after)
    except asyncio.CancelledError:
        if not watchdog.absorb():
            raise  # cancelled from outside: the engine is stopping
        out.fail(*_timeout_kind(endpoint, sink))
    except (asyncio.TimeoutError, HttpTimeout) as exc:
        if isinstance(exc, ConnectTimeout | PoolTimeout):
            out.fail("connect_timeout", f"no connection within {endpoint.connect_timeout_s:g} s")
        else:
            out.fail(*_timeout_kind(endpoint, sink))
    except Exception as exc:  # noqa: BLE001 - every failure becomes a classified outcome
        started = sink.first_event_ns is not None or out.status is not None
        out.fail(*classify_exception(exc, started_stream=started), out.status or getattr(exc, "status_code", None))
    finally:
        watchdog.disarm()
    if out.error_kind is not None and out.error_message:  # the cause in words a person acts on
        out.error_message = explain(out.error_kind, out.error_message, endpoint, status=out.status)
    return out


def first_token_budget(endpoint: EndpointConfig) -> float:
    return min(endpoint.first_token_timeout_s, endpoint.timeout_s)


def _timeout_kind(endpoint: EndpointConfig, sink: StreamSink) -> tuple[str, str]:
    if sink.first_token_ns is None:
        return "first_token_timeout", f"no token within {first_token_budget(endpoint):g} s"
    return "read_timeout", f"stream stalled after {sink.token_events} token events"


async def _exchange(
    client: HttpClient, endpoint: EndpointConfig, url: str, body: dict, sink: StreamSink, out: StreamOutcome,
    watchdog: Watchdog, *, from_call: bool = False,
) -> None:
    """Send, then read raw bytes, each stamped when it came off the socket."""
    total_deadline = out.start_ns + int(endpoint.timeout_s * 1e9)
    headers = with_traceparent(request_headers(endpoint), out.trace)

    def connected(t_ns: int) -> None:
        out.connect_ns = t_ns

    began_ns = out.start_ns
    response = await client.stream(
        "POST",
        url,
        json=body,
        headers=headers,
        timeout=Timeout(
            connect=endpoint.connect_timeout_s,
            read=endpoint.first_token_timeout_s,
            write=endpoint.connect_timeout_s,
            pool=endpoint.connect_timeout_s,
        ),
        on_connect=connected,
    )
    if not from_call:
        out.start_ns = response.start_ns  # after any wait for lpxtop's own pool, and the attempt that succeeded
        out.sent_wall_ns += response.start_ns - began_ns  # the wall clock at that same moment
    out.pool_wait_ns = response.pool_wait_ns
    if response.redirects:
        out.redirected_to = redirect_target(response.url)
    try:
        if response.status_code != 200:
            # The status is the finding: from here on only the error body's own short bound applies.
            watchdog.disarm()
            left_s = (total_deadline - time.perf_counter_ns()) / 1e9
            await raise_http_error(response, min(ERROR_BODY_TIMEOUT_S, max(0.0, left_s)))
        out.status = response.status_code
        reads = BatchedReads(sink, watchdog, total_deadline)
        try:
            ended = not await response.feed(reads.take)
        except StreamError:
            raise
        except asyncio.CancelledError:
            reads.catch_up_after_cancel()
            raise
        except Exception:
            reads.catch_up()  # a bad event that came before the failure is what the request reports
            raise
        reads.catch_up()
        if ended:
            reads.close()
        if sink.done:
            # The end marker is in: the measurement is complete. Read the body's end (the chunked
            # encoding's last chunk) so the connection goes back to the pool instead of being closed:
            # otherwise every request pays a new TCP connection, on both sides.
            watchdog.disarm()
            await response.discard(DRAIN_MAX_BYTES, DRAIN_TIMEOUT_S)
        if not sink.finished:
            raise StreamError(
                "stream_cut",
                f"the server closed the stream after {sink.token_events} token events without its end",
            )
    finally:
        await response.aclose()


class Watchdog:
    """Cancels the measuring task when its deadline passes.

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


def redirect_target(url: str) -> str | None:
    """A URL a server sent (a redirect's target) as it may be shown and stored: `lpxtop.http.shown_url` (no
    user:password, no query string: signed URLs carry credentials there), outside text scrubbed; None for a
    URL that does not parse."""
    try:
        urlsplit(url).port  # noqa: B018 - a port that is not a number is a URL that does not parse
    except ValueError:
        return None
    return textsafe.scrub(shown_url(url, MAX_URL_CHARS)) or None
