"""A small HTTP/1.1 client written directly on asyncio: the engine's probes, scrapes and discovery.

**Why lpxtop keeps its own client** (decided in issue 18, measured side by side on a 2-core VM: one
process per client, the same SSE server, 200 sequential 16-token probes, keep-alive, three runs each):

| client | CPU per 16-token probe | CPU per read | stamp error p50 / p99 | import / RSS added |
|---|---|---|---|---|
| this one | 1.55–1.73 ms | 91–101 µs | 54–64 / 253–290 µs | 10 ms / 0 MB |
| aiohttp 3.14 `ClientSession` | 2.13–2.25 ms | 125–132 µs | 86–98 / 336–380 µs | 98 ms / +9.3 MB |
| httpx 0.28 `aiter_raw()` | 4.72–4.78 ms | 275–279 µs | 144–146 / 410–425 µs | 24 ms / +5.1 MB |
| bare `asyncio.Protocol` (floor) | 0.84–0.96 ms | 49–56 µs | 34–35 / 168–198 µs | — |

aiohttp would add ~9.3 MB of RSS and ~98 ms of start-up against targets of <= 60 MB (the dashboard is
at 57.6 MB after 10 minutes) and `once` <= 0.4 s, and its reads cost a third more, which the load
generator (concurrency 200 on 2 cores) feels too. The price of keeping this client: it must do what
users expect of an HTTP client, tested, and its framing is held to h11, a reference parser, by a
differential test (`tests/functional/test_http_differential.py`).

How it reads: an `asyncio.Protocol` collects what the socket gives; the task that reads a response
waits on one future (with one timer for its read timeout: no task per read, no cancel scope), and when
woken it takes the buffer and undoes the chunked framing with a few bytearray operations per chunk.
Every `data_received` is stamped with `time.perf_counter_ns()`: `Response.arrived_ns` is when the bytes
just handed over came off the socket, before any parsing or decoding.

What it does:

- GET/POST/HEAD (JSON bodies), an HTTP/1.1 keep-alive pool per origin with a bound on connections
  and an idle expiry; Content-Length / chunked / close-delimited bodies; 1xx interim answers skipped;
  https with `ssl.create_default_context()` (verification on);
- bounds on everything: each phase (pool wait, connect, write, each read) and, with `Timeout.total`,
  the whole request: connect, head and body, redirects included. `request()`/`get()`/`post()` always
  have a total (by default the longest of the phase timeouts): a server that answers 200 and then
  trickles a byte a second cannot hold them. The head of any response must come within the read
  timeout, however it is trickled. Heads, header counts, chunk-size lines and trailers are bounded,
  and so are bodies read whole;
- redirects (301/302/303 for GET and HEAD, 307/308 for any method, at most 5 hops, loops refused,
  credentials dropped when the origin changes): `http_redirects.py`. `Response.url` is the final URL;
- proxies from HTTP_PROXY / HTTPS_PROXY / ALL_PROXY / NO_PROXY (loopback never proxied): `http_proxy.py`;
- `Content-Encoding: gzip` / `deflate` decoded incrementally within a size bound, although lpxtop asks
  for `identity`: `http_decoding.py`;
- a request on a reused keep-alive connection that the server had closed (no byte of an answer came)
  is sent once more on a new connection, POST included: nothing was processed;
- lpxtop's own delays stay out of the caller's timings: `Response.start_ns` is when the request that
  succeeded got its connection slot (after any wait for this client's own pool, before connecting),
  and `Response.pool_wait_ns` the time spent waiting for the pool;
- decoding is linear in the bytes received however they are chunked, and one event-loop step decodes
  at most `_LINES_PER_STEP` chunk lines (and `http_decoding.DECODE_STEP_BYTES` of inflated output):
  the rest waits until the reads that came meanwhile have been taken and stamped, and keeps the stamp
  of the read that brought it. One response's parsing then delays another endpoint's timestamps by
  part of a step at most (~0.15 ms of CPU): with a neighbour sending 2 MiB in one-byte chunks, the
  probe's TTFT error median went from 0.03 to 0.10 ms (before this: to 100 ms; benchmarks/http_cost.py).

Not done: HTTP/2, cookies, https proxies (TLS to the proxy itself), authentication schemes.
Errors are `HttpError` subclasses (`http_errors.py`) raised `from` the OSError or ssl error underneath,
so `lpxtop.engine.errors` finds refused/dns/tls in the exception chain.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json as _json
import re
import select
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from lpxtop.http.decoding import ContentDecoder, UnknownEncoding, decoder_for
from lpxtop.http.errors import (
    BodyTooLarge,
    ConnectError,
    ConnectTimeout,
    DecodingError,
    HttpError,
    HttpTimeout,
    InvalidURL,
    NetworkError,
    PoolTimeout,
    ProxyError,
    ReadError,
    ReadTimeout,
    RedirectError,
    RemoteProtocolError,
    UnsupportedProtocol,
    WriteError,
    WriteTimeout,
)
from lpxtop.http.proxies import Proxy, ProxySettings
from lpxtop.http.redirects import (
    MAX_REDIRECTS,
    REDIRECT_STATUSES,
    next_url,
    shown_url,
    strips_credentials,
    without_credentials,
)

MAX_HEAD_BYTES = 64 * 1024  # status line + headers (and, separately, the trailers of a chunked body)
MAX_HEADERS = 256
MAX_CHUNK_LINE = 1024  # a chunk-size line with its extensions
MAX_BODY_BYTES = 16 * 1024 * 1024  # what request()/get() read whole unless told otherwise
MAX_INTERIM = 32  # 1xx answers skipped before the final one
# The body of a redirect is read (to reuse the connection) up to this much, for at most this long.
_REDIRECT_DRAIN_BYTES = 64 * 1024
_REDIRECT_DRAIN_S = 1.0
# Reading from the socket pauses while more than this is buffered and unread (only a stalled reader gets there).
_HIGH_WATER = 256 * 1024
_LOW_WATER = 64 * 1024
# Lines (chunk sizes, trailers) decoded in one event-loop step; the rest waits a turn of the loop.
# ~1 µs a line on a 2-core VM: a step stays near 0.1 ms whatever the chunking (benchmarks/http_cost.py).
_LINES_PER_STEP = 128
# Like anyio's connect_tcp: try the next address if one has not connected within this many seconds.
_HAPPY_EYEBALLS_DELAY_S = 0.25
# Python >= 3.11 tasks count cancellation requests, which tells our own from an outside one.
_TASKS_COUNT_CANCELS = sys.version_info >= (3, 11)
_HEX = b"0123456789abcdefABCDEF"
_DEFAULT_HEADERS = (("Accept", "*/*"), ("Accept-Encoding", "identity"), ("User-Agent", "lpxtop"))
# Control characters no status line or header may hold (h11 refuses them too); tab is allowed.
_BAD_HEAD_BYTES = bytes(range(0, 9)) + bytes(range(10, 32)) + b"\x7f"

# Body framing of a response; _DRAIN: the framing is done, the content decoder still has output
_DONE, _LENGTH, _CHUNKED, _CLOSE, _DRAIN = 0, 1, 2, 3, 4
# Where a chunked body is: a size line next, chunk data, the CRLF after the data, the trailers
_SIZE, _DATA, _DATA_END, _TRAILERS = 0, 1, 2, 3


@dataclass(frozen=True)
class Timeout:
    """Seconds for each phase of a request, and for all of it; None waits forever.

    `read` bounds each wait for bytes (and the whole response head). `total` bounds the request from
    the pool wait to the body's last byte, redirects and a retry included; for `stream()` it covers
    the body as it is read through the Response. `request()`/`get()`/`post()` without a total use the
    longest of the phases as one.
    """

    connect: float | None = 30.0
    read: float | None = 30.0
    write: float | None = 30.0
    pool: float | None = 30.0
    total: float | None = None

    @classmethod
    def of(cls, value: float | Timeout | None) -> Timeout:
        """A Timeout from a Timeout, or the same seconds for every phase and for the whole request."""
        if isinstance(value, Timeout):
            return value
        return cls(value, value, value, value, value)

    def with_total(self) -> Timeout:
        """This Timeout, with the longest phase as its total when it has none."""
        if self.total is not None:
            return self
        phases = [t for t in (self.connect, self.read, self.write, self.pool) if t is not None]
        return dataclasses.replace(self, total=max(phases)) if phases else self


class _Budget:
    """A request's total deadline on the loop's clock; phases take the smaller of their own limit and what is left."""

    __slots__ = ("loop", "deadline", "total")

    def __init__(self, loop: asyncio.AbstractEventLoop, total: float) -> None:
        self.loop = loop
        self.total = total
        self.deadline = loop.time() + total

    def bound(self, seconds: float | None) -> float | None:
        left = max(0.0, self.deadline - self.loop.time())
        return left if seconds is None or left < seconds else seconds

    def expired(self) -> bool:
        return self.loop.time() >= self.deadline - 0.002  # timers may run up to the clock's resolution early

    def message(self, what: str) -> str:
        return f"{what}: the request did not complete within its limit of {self.total:g} s"


def _bound(seconds: float | None, budget: _Budget | None) -> float | None:
    return seconds if budget is None else budget.bound(seconds)


def _timeout(error: type[HttpTimeout], what: str, seconds: float | None, budget: _Budget | None) -> HttpTimeout:
    """The error for a phase that ran out: its own limit, or the request's total."""
    if budget is not None and budget.expired():
        return error(budget.message(what))
    return error(f"{what} within {seconds:g} s" if seconds is not None else what)


class _Deadline:
    """`with _Deadline(timeout, Error):` cancels the current task after `timeout` s and raises Error instead.

    For connecting (TCP and TLS), which awaits asyncio coroutines that only a cancellation interrupts.
    One TimerHandle, no extra task (unlike `asyncio.wait_for`); works on Python 3.10, which has no
    `asyncio.timeout()`. A cancellation that is not this timer's propagates as CancelledError.
    """

    __slots__ = ("_timeout", "_error", "_task", "_handle", "_fired", "_cancelling")

    def __init__(self, timeout: float | None, error: type[Exception]) -> None:
        self._timeout = timeout
        self._error = error
        self._task: asyncio.Task[Any] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._fired = False
        self._cancelling = 0

    def __enter__(self) -> _Deadline:
        if self._timeout is None:
            return self
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("_Deadline needs to run inside an asyncio task")
        self._task = task
        if _TASKS_COUNT_CANCELS:
            self._cancelling = task.cancelling()
        self._handle = asyncio.get_running_loop().call_later(max(0.0, self._timeout), self._fire)
        return self

    def _fire(self) -> None:
        self._fired = True
        if self._task is not None:
            self._task.cancel()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if not self._fired or self._task is None:
            return
        outside = False
        if _TASKS_COUNT_CANCELS:
            # Undo our request; any still pending came from elsewhere and must win.
            outside = self._task.uncancel() > self._cancelling
        # Python 3.10 keeps no count: a cancellation that coincides with our timer is taken as ours.
        if exc_type is asyncio.CancelledError and not outside:
            raise self._error(f"timed out after {self._timeout:g} s") from exc


class _Protocol(asyncio.Protocol):
    """Collects what the transport receives until a reader takes it; wakes a waiting reader."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.arrived_ns = 0
        self.eof = False
        self.lost = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[bool] | None = None
        self.drain_waiter: asyncio.Future[bool] | None = None
        self.reading_paused = False
        self.writing_paused = False
        self.on_idle_event: Callable[[], None] | None = None  # set while the connection sits in the pool
        self.on_data: Callable[[], None] | None = None  # set while Response.feed() hands bytes over in here

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.arrived_ns = time.perf_counter_ns()  # the measurement: bytes off the socket, nothing parsed yet
        buffer = self.buffer
        buffer += data
        on_data = self.on_data
        if on_data is not None:
            # A feeding response takes the bytes now, and wakes its reader itself when done (it may also
            # put the connection back in the pool: these bytes were its own, not news on an idle one).
            on_data()
            return
        if len(buffer) > _HIGH_WATER:
            self.pause_if_full()
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)
        if self.on_idle_event is not None:  # bytes on an idle connection: it can no longer be reused
            self.on_idle_event()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # let the transport close its side too: HTTP/1.1 never half-closes

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.error = exc
        self.writing_paused = False
        self._wake()
        waiter = self.drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        waiter = self.drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)
        if self.on_idle_event is not None:
            self.on_idle_event()

    def pause_if_full(self) -> None:
        """Stop reading from the socket while more than the high-water mark waits unread."""
        if len(self.buffer) > _HIGH_WATER and not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()

    def consumed(self) -> None:
        """The reader took bytes from the buffer: resume reading once it is below the low-water mark."""
        if self.reading_paused and len(self.buffer) <= _LOW_WATER and self.transport is not None:
            self.reading_paused = False
            self.transport.resume_reading()


def _time_out(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


class _Connection:
    """One TCP (or TLS) connection, the pool key it belongs to, and its read timer.

    The read timeout is one lazily moved timer per connection rather than one per wait: a wait only
    moves the deadline, and the timer, when it fires early, re-arms itself at the deadline. A timer per
    wait (call_later, cancel) cost about as much as the wait itself.
    """

    __slots__ = ("key", "transport", "protocol", "loop", "deadline", "timer", "idle_since", "closed", "used")

    def __init__(self, key: tuple[Any, ...], transport: asyncio.Transport, protocol: _Protocol) -> None:
        self.key = key
        self.transport = transport
        self.protocol = protocol
        self.loop = asyncio.get_running_loop()
        self.deadline: float | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.idle_since = 0.0
        self.closed = False
        self.used = False  # a request has been sent on it: a failure before any answer may be a stale reuse

    async def wait(self, timeout: float | None) -> bool:
        """Wait until bytes arrive or the stream ends (True), or `timeout` s pass without either (False)."""
        protocol = self.protocol
        if protocol.eof or protocol.lost:
            return True
        waiter = self.arm(timeout)
        try:
            return await waiter
        finally:
            protocol.waiter = None

    def arm(self, timeout: float | None) -> asyncio.Future[bool]:
        """The future a reader awaits: True when bytes or the end of the stream came, False on timeout.
        The reader sets `protocol.waiter` back to None once woken."""
        loop = self.loop
        waiter = self.protocol.waiter = loop.create_future()
        if timeout is None:
            self.deadline = None
        else:
            deadline = self.deadline = loop.time() + timeout
            timer = self.timer
            if timer is None or timer.when() > deadline:
                if timer is not None:
                    timer.cancel()
                self.timer = loop.call_at(deadline, self._timer_fired)
        return waiter

    def _timer_fired(self) -> None:
        self.timer = None
        waiter = self.protocol.waiter
        deadline = self.deadline
        if waiter is None or waiter.done() or deadline is None:
            return  # not waiting now: the next wait arms a new timer
        if self.loop.time() >= deadline - 0.001:  # call_at may run up to the clock's resolution early
            waiter.set_result(False)
        else:
            self.timer = self.loop.call_at(deadline, self._timer_fired)

    def stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def read_failure(self) -> HttpError:
        """The error for a stream that ended (or failed) where the response needed more bytes."""
        error = self.protocol.error
        if error is not None:
            return _from(ReadError(str(error) or type(error).__name__), error)
        return RemoteProtocolError("peer closed connection without sending complete message body")

    async def write(self, data: bytes, timeout: float | None, budget: _Budget | None = None) -> None:
        protocol = self.protocol
        if protocol.lost or self.transport.is_closing():
            error = protocol.error
            raise _from(WriteError(str(error) if error else "the connection is closed"), error)
        try:
            self.transport.write(data)
        except (OSError, RuntimeError) as exc:
            raise WriteError(str(exc)) from exc
        if protocol.writing_paused:  # the kernel's send buffer is full: wait until it drains
            loop = self.loop
            waiter = protocol.drain_waiter = loop.create_future()
            handle = None if timeout is None else loop.call_later(max(0.0, timeout), _time_out, waiter)
            try:
                drained = await waiter
            finally:
                protocol.drain_waiter = None
                if handle is not None:
                    handle.cancel()
            if not drained:
                raise _timeout(WriteTimeout, "could not send", timeout, budget)
            if protocol.lost:
                error = protocol.error
                raise _from(WriteError(str(error) if error else "the connection was closed"), error)

    def clean(self) -> bool:
        """Nothing unread, no end of stream, no error: the connection can wait for another request."""
        protocol = self.protocol
        return not (self.closed or protocol.buffer or protocol.eof or protocol.lost or self.transport.is_closing())

    def reusable_when_idle(self) -> bool:
        """False when an idle connection has bytes, an end of stream or an error waiting (the server hung up)."""
        # A hang-up the event loop has not polled yet is only in the kernel: ask the socket too.
        return self.clean() and not _socket_readable(self.transport.get_extra_info("socket"))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.stop_timer()
        self.protocol.on_idle_event = None
        # close() sends what is queued (and TLS's close_notify) if the socket takes it at once; abort()
        # drops the rest: waiting on a stalled peer (TLS shutdown waits up to 30 s) only holds a socket.
        self.transport.close()
        self.transport.abort()


def _from(error: HttpError, cause: BaseException | None) -> HttpError:
    error.__cause__ = cause
    return error


def _socket_readable(sock: Any) -> bool:
    """Whether a recv() on `sock` would return at once (data or end of stream); True without a socket."""
    fileno = sock.fileno() if sock is not None else -1
    if fileno < 0:
        return True
    try:
        poller = select.poll()
    except AttributeError:  # no poll() (Windows)
        return bool(select.select([fileno], [], [], 0)[0])
    poller.register(fileno, select.POLLIN)
    return bool(poller.poll(0))


class _Pool:
    """Keep-alive connections per (scheme, host, port); at most `max_connections` open in all."""

    def __init__(self, max_connections: int, max_idle: int, idle_expiry_s: float) -> None:
        self.max_connections = max(1, max_connections)
        self.max_idle = max(0, max_idle)
        self.idle_expiry_s = idle_expiry_s
        self.idle: dict[tuple[Any, ...], list[_Connection]] = {}
        self.open = 0  # busy and idle together
        self.closed = False
        self._waiters: collections.deque[asyncio.Future[bool]] = collections.deque()
        self._sweeper: asyncio.TimerHandle | None = None
        self.waits = 0  # times a request found the pool full and waited (see HttpClient.pool_waits)

    @property
    def idle_count(self) -> int:
        return sum(len(conns) for conns in self.idle.values())

    def take_idle(self, key: tuple[Any, ...]) -> _Connection | None:
        conns = self.idle.get(key)
        while conns:
            conn = conns.pop()  # the most recently used: the least likely to have been closed by the server
            if not conns:
                del self.idle[key]
            self._unidle(conn)
            if conn.reusable_when_idle():
                return conn
            self._drop(conn)
            conns = self.idle.get(key)
        return None

    async def acquire(self, key: tuple[Any, ...], timeout: float | None, fresh: bool = False) -> _Connection | None:
        """An idle connection to `key` (unless `fresh`), or None with one more connection counted as open
        (the caller connects, and calls `unreserve()` if that fails). Waits up to `timeout` while the pool
        is full (PoolTimeout after that)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        counted = False
        while True:
            conn = None if fresh else self.take_idle(key)
            if conn is not None:
                return conn
            if self.open < self.max_connections or self._close_oldest_idle():
                self.open += 1
                return None
            loop = asyncio.get_running_loop()
            waiter: asyncio.Future[bool] = loop.create_future()
            self._waiters.append(waiter)
            if not counted:
                counted = True
                self.waits += 1
            left = None if deadline is None else deadline - time.monotonic()
            handle = None if left is None else loop.call_later(max(0.0, left), _time_out, waiter)
            try:
                woken = await waiter
            finally:
                if handle is not None:
                    handle.cancel()
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            if not woken:
                raise PoolTimeout(f"no free connection within {timeout:g} s ({self.open} open)")

    def unreserve(self) -> None:
        self.open -= 1
        self._wake_one()

    def release(self, conn: _Connection, reusable: bool) -> None:
        """A response is done with `conn`: keep it for the next request to its server, or close it."""
        conn.stop_timer()
        if not reusable or self.closed or self.max_idle == 0 or not conn.clean():
            self._drop(conn)
            return
        if self.idle_count >= self.max_idle:
            self._close_oldest_idle()
        loop = conn.loop
        conn.idle_since = loop.time()
        conn.protocol.on_idle_event = lambda: self._expire(conn)
        self.idle.setdefault(conn.key, []).append(conn)
        if self._sweeper is None:
            self._sweeper = loop.call_at(conn.idle_since + self.idle_expiry_s, self._sweep)
        self._wake_one()

    def _sweep(self) -> None:
        """Close the connections idle for `idle_expiry_s`; come back when the next one will be."""
        self._sweeper = None
        now = asyncio.get_running_loop().time()
        oldest: float | None = None
        for conns in list(self.idle.values()):
            for conn in list(conns):
                if now - conn.idle_since >= self.idle_expiry_s - 0.001:
                    self._expire(conn)
                elif oldest is None or conn.idle_since < oldest:
                    oldest = conn.idle_since
        if oldest is not None:
            self._sweeper = asyncio.get_running_loop().call_at(oldest + self.idle_expiry_s, self._sweep)

    def _expire(self, conn: _Connection) -> None:
        conns = self.idle.get(conn.key)
        if conns and conn in conns:
            conns.remove(conn)
            if not conns:
                del self.idle[conn.key]
            self._unidle(conn)
            self._drop(conn)

    def _unidle(self, conn: _Connection) -> None:
        conn.protocol.on_idle_event = None

    def _drop(self, conn: _Connection) -> None:
        if not conn.closed:
            conn.close()
            self.open -= 1
            self._wake_one()

    def _close_oldest_idle(self) -> bool:
        oldest: _Connection | None = None
        for conns in self.idle.values():
            if conns and (oldest is None or conns[0].idle_since < oldest.idle_since):
                oldest = conns[0]  # each key's list is oldest first
        if oldest is None:
            return False
        self._expire(oldest)
        return True

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(True)
                return

    def close(self) -> None:
        self.closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for conns in list(self.idle.values()):
            for conn in list(conns):
                self._expire(conn)


async def _after_other_reads() -> None:
    """Yield for two turns of the event loop. A callback made ready in one turn runs at the head of the
    next, before the reads that turn's poll found; after a step of decoding, one cheap turn first lets
    the reads that came during the step be taken (and stamped) before the next step, instead of after it."""
    await asyncio.sleep(0)
    await asyncio.sleep(0)


class _Default:
    """The type of `_DEFAULT`: "the request's own setting"."""


_DEFAULT = _Default()


class Response:
    """The status and headers of a response, and its body as it arrives.

    `receive()` / `aiter_raw()` / `feed()` hand over the body's bytes (chunked framing removed, content
    decoded) as the socket delivers them; `arrived_ns` is the `perf_counter_ns()` of the read that
    brought the bytes last handed over. When the body has been read to its end the connection goes back
    to the pool; closing a response before that closes its connection.

    About the request that got it: `url` (the final URL, after redirects), `redirects` ((status, URL)
    of each redirect followed), `start_ns` (when the request counts as sent: see `HttpClient.stream`),
    `pool_wait_ns` (time spent waiting for a free connection of this client's pool), `retried`
    (sent again on a new connection after a kept-alive one turned out closed).
    """

    def __init__(
        self, status_code: int, reason_phrase: str, http_version: str, headers: dict[str, str],
        conn: _Connection, pool: _Pool, framing: int, length: int, keep_alive: bool, read_timeout: float | None,
        budget: _Budget | None = None,
    ) -> None:
        self.status_code = status_code
        self.reason_phrase = reason_phrase
        self.http_version = http_version
        self.headers = headers  # lower-case names; repeated headers joined with ", "
        self.arrived_ns = conn.protocol.arrived_ns
        self.url = ""
        self.redirects: tuple[tuple[int, str], ...] = ()
        self.start_ns = 0
        self.pool_wait_ns = 0
        self.retried = False
        self._excluded_ns = 0  # this hop's pool wait and failed attempt: kept out of start_ns
        self._conn: _Connection | None = conn
        self._pool = pool
        self._framing = framing
        self._remaining = length  # Content-Length left, or what is left of the current chunk
        self._chunk_state = _SIZE
        self._scanned = 0  # bytes of an incomplete line already searched for its end
        self._trailer_bytes = 0
        self._trailers: list[bytes] = []
        self._keep_alive = keep_alive
        self._read_timeout = read_timeout
        self._budget = budget
        self._content: bytes | None = None
        self._sink: Callable[[bytes, int], bool] | None = None  # feed()'s state
        self._sink_stopped = False
        self._sink_error: BaseException | None = None
        self._feed_timeout: float | None = None
        self._continuation: asyncio.Handle | None = None
        # A step that ran out of budget (_more) leaves bytes to decode: `_marks` then holds [length, stamp]
        # of each buffered read not decoded yet, oldest first, so that every byte keeps its read's stamp.
        self._more = False
        self._marks: collections.deque[list[int]] | None = None
        self._marked = 0
        encoding = headers.get("content-encoding")
        self._decoder: ContentDecoder | UnknownEncoding | None = (
            decoder_for(encoding) if encoding is not None and framing != _DONE else None
        )
        if framing == _DONE:
            self._finish()

    @property
    def is_complete(self) -> bool:
        """True once the whole body has been read."""
        return self._framing == _DONE

    @property
    def content(self) -> bytes:
        """The body read by `read()` (or by `request()`/`get()`)."""
        if self._content is None:
            raise HttpError("the body has not been read: await read() first")
        return self._content

    @property
    def text(self) -> str:
        """The body as UTF-8 (undecodable bytes replaced)."""
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON (ValueError when it is not JSON)."""
        return _json.loads(self.content)

    async def receive(self, timeout: float | None | _Default = _DEFAULT) -> bytes:
        """The next bytes of the body, b"" at its end. `timeout`: this call's read timeout (default: the
        request's); the request's total limit, if it has one, applies too."""
        if timeout is _DEFAULT:
            timeout = self._read_timeout
        return await self._receive(timeout, self._budget)  # type: ignore[arg-type]

    async def _receive(self, timeout: float | None, budget: _Budget | None) -> bytes:
        while True:
            conn = self._conn
            if conn is None:
                if self._framing == _DONE:
                    return b""
                raise ReadError("the response was closed")
            protocol = conn.protocol
            if self._marks is not None:
                await _after_other_reads()  # the last step ran out of budget: let the loop serve others first
                if self._conn is None:
                    continue
            if protocol.buffer or self._marks is not None or self._framing == _DRAIN:
                data, stamp = self._step(protocol)
                if self._framing == _DONE:
                    self._finish()
                if data:
                    self.arrived_ns = stamp
                    return data
                if self._framing == _DONE:
                    return b""
                if self._marks is not None or self._framing == _DRAIN:
                    continue
            if protocol.eof or protocol.lost:
                if self._stream_ended(conn):
                    continue  # a close-delimited body ended: its decoder may still hold output
                return b""
            # Wait for bytes (inline rather than through conn.wait: this is once per chunk of a stream).
            wait = timeout if budget is None else budget.bound(timeout)
            waiter = conn.arm(wait)
            try:
                arrived = await waiter
            finally:
                protocol.waiter = None
            if not arrived:
                raise _timeout(ReadTimeout, "no data", wait, budget)

    async def feed(self, sink: Callable[[bytes, int], bool], timeout: float | None | _Default = _DEFAULT) -> bool:
        """Hand the body to `sink(data, arrived_ns)` as each read brings it, until the body ends (False)
        or the sink returns True (True; the rest of the body stays unread).

        The sink runs inside the transport's read callback, so a stream of small reads costs one
        event-loop pass per read instead of two (the read, then the waiting task's wake-up). It must not
        block. What it raises is raised here. `timeout`: the longest wait for bytes, restarted by every
        read (default: the request's read timeout); the request's total limit applies too.
        """
        if timeout is _DEFAULT:
            timeout = self._read_timeout
        conn = self._conn
        if conn is None:
            if self._framing == _DONE:
                return False
            raise ReadError("the response was closed")
        protocol = conn.protocol
        budget = self._budget
        self._sink = sink
        self._sink_stopped = False
        self._sink_error = None
        self._feed_timeout = timeout  # type: ignore[assignment]
        protocol.on_data = self._take_fed
        try:
            if self._marks is not None:
                self._continue_later()
            elif protocol.buffer or self._framing == _DRAIN:
                self._feed_step()  # bytes that came in with the head
            while True:
                if self._sink_error is not None:
                    raise self._sink_error
                if self._sink_stopped:
                    return True
                conn = self._conn
                if conn is None:  # the body ended: _feed_step finished it
                    return False
                if protocol.eof or protocol.lost:
                    if self._marks is not None:
                        await asyncio.sleep(0)  # the continuation decodes what came before the end
                        continue
                    if self._stream_ended(conn):
                        self._feed_step()
                    continue
                wait = timeout if budget is None else budget.bound(timeout)  # type: ignore[arg-type]
                waiter = conn.arm(wait)
                if self._feed_timeout is None and budget is not None:
                    self._feed_timeout = wait  # reads then move the timer no further than the deadline
                try:
                    arrived = await waiter
                finally:
                    if protocol.waiter is waiter:  # a finished body's connection may serve another request now
                        protocol.waiter = None
                if not arrived:
                    raise _timeout(ReadTimeout, "no data", wait, budget)
        finally:
            if self._continuation is not None:
                self._continuation.cancel()
                self._continuation = None
            if protocol.on_data == self._take_fed:
                protocol.on_data = self._note_arrival if self._marks is not None else None
            self._sink = None
            self._sink_error = None

    def _take_fed(self) -> None:
        """`feed()`'s work, called by the protocol on each read: decode, hand over, wake the reader when done."""
        if self._conn is None or self._sink is None:
            return
        if self._marks is not None:
            self._note_arrival()  # decoding is behind: these bytes wait their turn, with their own stamp
            return
        self._feed_step()

    def _feed_step(self) -> None:
        conn = self._conn
        if conn is None or self._sink is None:
            return
        protocol = conn.protocol
        ended = False
        try:
            data, stamp = self._step(protocol)
            ended = self._framing == _DONE
            if data:
                self.arrived_ns = stamp
                self._sink_stopped = bool(self._sink(data, stamp))
        except Exception as exc:  # noqa: BLE001 - raised again by feed(), in the reading task
            self._sink_error = exc
        if ended or self._sink_stopped or self._sink_error is not None:
            protocol.on_data = None  # later bytes wait in the buffer, as with receive()
            waiter = protocol.waiter
            protocol.waiter = None
            if waiter is not None and not waiter.done():
                waiter.set_result(True)
            if ended:
                self._finish()  # after the wake-up: the pool may hand the connection to another request
            return
        if self._marks is not None:
            self._continue_later()
        if self._feed_timeout is not None:
            deadline = conn.loop.time() + self._feed_timeout  # the lazy read timer follows the reads
            budget = self._budget
            conn.deadline = deadline if budget is None or deadline < budget.deadline else budget.deadline

    def _continue_later(self) -> None:
        """The next step in two loop turns (see `_after_other_reads`)."""
        if self._continuation is None:
            self._continuation = self._conn.loop.call_soon(self._hop)  # type: ignore[union-attr]

    def _hop(self) -> None:
        if self._conn is not None:
            self._continuation = self._conn.loop.call_soon(self._continue_fed)

    def _continue_fed(self) -> None:
        self._continuation = None
        self._feed_step()

    def _note_arrival(self) -> None:
        """A read came while decoding is behind: remember its length and stamp; wake a waiting reader."""
        conn = self._conn
        if conn is None:
            return
        protocol = conn.protocol
        marks = self._marks
        if marks is not None:
            new = len(protocol.buffer) - self._marked
            if new > 0:
                marks.append([new, protocol.arrived_ns])
                self._marked += new
        protocol.pause_if_full()
        waiter = protocol.waiter
        if waiter is not None and not waiter.done() and self._sink is None:
            waiter.set_result(True)

    def _step(self, protocol: _Protocol) -> tuple[bytes, int]:
        """Decode what is buffered, at most a step's work: (body bytes, the stamp of the read they came in)."""
        marks = self._marks
        if marks is None:  # the usual case: decoding keeps up with the reads
            data = self._take_buffer(protocol, len(protocol.buffer))
            stamp = protocol.arrived_ns
            if self._more:  # out of budget: the rest of the buffer came with this read
                self._marks = collections.deque([[len(protocol.buffer), stamp]])
                self._marked = len(protocol.buffer)
                if protocol.on_data is None:
                    protocol.on_data = self._note_arrival
            return data, stamp
        region = marks[0]
        before = len(protocol.buffer)
        data = self._take_buffer(protocol, region[0])
        used = before - len(protocol.buffer)
        region[0] -= used
        self._marked -= used
        stamp = region[1]
        if not self._more:
            # This read is decoded, or what is left of it is a piece that the next read completes.
            marks.popleft()
            if marks:
                marks[0][0] += region[0]
            else:
                self._marks = None
                self._marked = 0
                if protocol.on_data == self._note_arrival:
                    protocol.on_data = None
        return data, stamp

    def _take_buffer(self, protocol: _Protocol, end: int) -> bytes:
        """Body bytes from the first `end` buffered bytes, framing removed and content decoded, at most a
        step's work (`_more` then says that more is ready). An incomplete chunk line stays buffered."""
        buffer = protocol.buffer
        framing = self._framing
        self._more = False
        if framing == _CHUNKED:
            data = self._decode_chunked(buffer, end)
        elif framing == _LENGTH:
            data = self._decode_length(buffer, end)
        elif framing == _CLOSE:  # close-delimited: everything until the server closes
            if end >= len(buffer):
                data = bytes(buffer)
                buffer.clear()
            else:
                data = bytes(buffer[:end])
                del buffer[:end]
        else:  # _DRAIN
            data = b""
        if protocol.reading_paused:
            protocol.consumed()
        decoder = self._decoder
        if decoder is not None:
            data = self._decode_content(decoder, data)
        return data

    def _decode_content(self, decoder: ContentDecoder | UnknownEncoding, data: bytes) -> bytes:
        try:
            if data or decoder.pending:
                data = decoder.decode(data)
            if self._framing in (_DONE, _DRAIN):  # the framing is complete: the decoder's end too
                if not decoder.pending:
                    data += decoder.finish()
                self._framing = _DRAIN if decoder.pending else _DONE
            if decoder.pending:
                self._more = True
        except DecodingError:
            self._close()
            raise
        return data

    def _stream_ended(self, conn: _Connection) -> bool:
        """The server closed (or the connection failed) with the buffer read: the end of a close-delimited
        body (True when its decoder still has output to give); for any other body, the error that it was
        cut short."""
        if self._framing == _CLOSE and conn.protocol.error is None:
            if self._decoder is not None:
                self._framing = _DRAIN
                return True
            self._framing = _DONE
            self._finish()
            return False
        error = conn.read_failure()
        self._close()
        raise error

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive (see `receive`)."""
        while data := await self.receive():
            yield data

    async def read(self, max_bytes: int | None = None, *, truncate: bool = False, within: float | None = None) -> bytes:
        """The whole body (also kept as `content`). Over `max_bytes`: BodyTooLarge, or with `truncate`
        its first `max_bytes` bytes (either way the connection is closed unless the body was all in).

        `within`: seconds for the whole read (the request's total limit applies too): when they run out,
        ReadTimeout, or with `truncate` what came so far. For an error's body, whose status matters more
        than a server that trickles its text.
        """
        budget = self._budget
        if within is not None:
            own = _Budget(asyncio.get_running_loop(), within)
            if budget is None or own.deadline < budget.deadline:
                budget = own
        parts: list[bytes] = []
        size = 0
        try:
            while True:
                try:
                    data = await self._receive(self._read_timeout, budget)
                except ReadTimeout:
                    if truncate and within is not None and budget is not None and budget.expired():
                        break
                    raise
                if not data:
                    break
                size += len(data)
                if max_bytes is not None and size > max_bytes:
                    if not truncate:
                        raise BodyTooLarge(f"the body is larger than {max_bytes} bytes")
                    parts.append(data[: len(data) - (size - max_bytes)])
                    break
                parts.append(data)
        finally:
            if not self.is_complete:
                self._close()
        self._content = b"".join(parts)
        return self._content

    async def discard(self, max_bytes: int, timeout_s: float) -> bool:
        """Read and drop the rest of the body, at most `max_bytes` for at most `timeout_s` in all, so the
        connection can be reused; True when the body was complete. Gives up quietly (closing it)."""
        budget = _Budget(asyncio.get_running_loop(), timeout_s)
        if self._budget is not None and self._budget.deadline < budget.deadline:
            budget = self._budget
        left = max_bytes
        try:
            while not self.is_complete and left > 0:
                left -= len(await self._receive(None, budget))
        except HttpError:
            pass
        if not self.is_complete:
            self._close()
        return self.is_complete

    async def aclose(self) -> None:
        """Done with the response: an unread rest of the body means its connection is closed."""
        self._close()

    async def __aenter__(self) -> Response:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._close()

    def _close(self) -> None:
        conn = self._conn
        if conn is not None:
            self._conn = None
            if conn.protocol.on_data in (self._take_fed, self._note_arrival):
                conn.protocol.on_data = None
            self._pool.release(conn, reusable=False)

    def _finish(self) -> None:
        conn = self._conn
        if conn is not None:
            self._conn = None
            if conn.protocol.on_data == self._note_arrival:
                conn.protocol.on_data = None
            # Bytes beyond the body (a server that sent more than it framed) make the connection unusable.
            self._pool.release(conn, reusable=self._keep_alive and not conn.protocol.buffer)

    def _decode_length(self, buffer: bytearray, end: int) -> bytes:
        take = min(self._remaining, end)
        if take >= len(buffer):
            data = bytes(buffer)
            buffer.clear()
        else:
            data = bytes(buffer[:take])
            del buffer[:take]
        self._remaining -= len(data)
        if self._remaining == 0:
            self._framing = _DONE
        return data

    def _decode_chunked(self, buffer: bytearray, end: int) -> bytes:
        """Take the body bytes out of the first `end` bytes of the buffered chunked framing, at most
        `_LINES_PER_STEP` lines of it; leave an incomplete line in place. Linear in the bytes whatever
        the chunking: pieces are joined once, and an incomplete line is never searched twice."""
        if self._chunk_state == _SIZE and end == len(buffer):
            # The usual case of a stream: the buffer holds exactly one whole chunk, without extensions.
            eol = buffer.find(b"\r\n", 0, 17)
            if eol > 0:
                size_hex = buffer[:eol]
                if not size_hex.translate(None, _HEX):
                    size = int(size_hex, 16)
                    stop = eol + 2 + size
                    if size and len(buffer) == stop + 2 and buffer.endswith(b"\r\n"):
                        data = bytes(buffer[eol + 2 : stop])
                        buffer.clear()
                        return data
        pieces: list[bytes] = []
        pos = 0
        state = self._chunk_state
        lines = _LINES_PER_STEP
        try:
            while pos < end:
                if state == _DATA:
                    take = min(self._remaining, end - pos)
                    pieces.append(buffer[pos : pos + take])
                    pos += take
                    self._remaining -= take
                    if self._remaining == 0:
                        state = _DATA_END
                elif state == _SIZE:
                    if not lines:
                        self._more = True
                        break
                    lines -= 1
                    eol = buffer.find(b"\n", pos + self._scanned, min(end, pos + MAX_CHUNK_LINE + 1))
                    if eol < 0:
                        if end - pos > MAX_CHUNK_LINE:
                            raise RemoteProtocolError(f"a chunk-size line longer than {MAX_CHUNK_LINE} bytes")
                        self._scanned = end - pos
                        break
                    self._scanned = 0
                    line = bytes(buffer[pos : eol - 1])
                    size_match = _CHUNK_SIZE.fullmatch(line) if eol > pos and buffer[eol - 1] == 0x0D else None
                    if size_match is None:
                        raise RemoteProtocolError(f"malformed chunk-size line {line[:40]!r}")
                    pos = eol + 1
                    size = int(size_match.group(1), 16)
                    if size:
                        self._remaining = size
                        state = _DATA
                    else:
                        state = _TRAILERS
                elif state == _DATA_END:  # CR LF after the data (h11 and RFC 9112: no bare LF here)
                    if buffer[pos] != 0x0D or (pos + 1 < end and buffer[pos + 1] != 0x0A):
                        raise RemoteProtocolError("chunk data longer than its announced size")
                    if pos + 1 >= end:
                        break
                    pos += 2
                    state = _SIZE
                else:  # _TRAILERS: header lines until an empty one, then the body is complete
                    if not lines:
                        self._more = True
                        break
                    lines -= 1
                    eol = buffer.find(b"\n", pos + self._scanned, end)
                    if eol < 0:
                        if self._trailer_bytes + end - pos > MAX_HEAD_BYTES:
                            raise RemoteProtocolError(f"chunked trailers larger than {MAX_HEAD_BYTES} bytes")
                        self._scanned = end - pos
                        break
                    self._scanned = 0
                    line_length = eol - pos
                    line = bytes(buffer[pos : eol - 1 if eol > pos and buffer[eol - 1] == 0x0D else eol])
                    pos = eol + 1
                    if not line:
                        _header_lines(self._trailers, "trailer")  # the trailers must be header lines
                        self._trailers = []
                        self._framing = _DONE
                        break
                    self._trailer_bytes += line_length + 1
                    if self._trailer_bytes > MAX_HEAD_BYTES:
                        raise RemoteProtocolError(f"chunked trailers larger than {MAX_HEAD_BYTES} bytes")
                    self._trailers.append(line)
        except RemoteProtocolError:
            self._close()
            raise
        finally:
            self._chunk_state = state
            if pos:
                del buffer[:pos]
        if not pieces:
            return b""
        return bytes(pieces[0]) if len(pieces) == 1 else b"".join(pieces)


_BLANK_LINE = re.compile(rb"\n\r?\n")
# RFC 9110/9112 grammar, as h11 (the reference the framing is held to) reads it
_STATUS_LINE = re.compile(rb"HTTP/([0-9]\.[0-9]) ([0-9]{3})(?: ((?:[ \t]|[^\x00\s])*))?")
_HEADER_LINE = re.compile(rb"([-!#$%&'*+.^_`|~0-9a-zA-Z]+):[ \t]*((?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?)[ \t]*")
_FOLD = re.compile(rb"[ \t]+")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;[^\n]*)?[ \t]*")


def _find_head_end(buffer: bytearray, start: int = 0) -> tuple[int, int]:
    """(end of the head, length of the blank line after it), or (-1, 0) while incomplete. The head ends at
    the first blank line (LF, optional CR, LF); `start`: where to look from (earlier bytes were searched)."""
    if buffer[:1] == b"\n":
        return 0, 1
    if buffer[:2] == b"\r\n":
        return 0, 2
    found = _BLANK_LINE.search(buffer, start)
    if found is None:
        return -1, 0
    return found.start(), found.end() - found.start()


def _header_lines(lines: list[bytes], what: str) -> dict[str, str]:
    """Header (or trailer) lines, CR removed, as a dict of lower-case names; repeated names joined with ", "."""
    if len(lines) > MAX_HEADERS:
        raise RemoteProtocolError(f"more than {MAX_HEADERS} {what}s")
    headers: dict[str, str] = {}
    folded: list[bytes] = []
    for line in lines:
        fold = _FOLD.match(line)
        if fold is not None:  # obsolete line folding: continues the line before
            if not folded:
                raise RemoteProtocolError(f"a continuation line at the start of the {what}s: {line[:60]!r}")
            folded[-1] = folded[-1] + b" " + line[fold.end() :]
            continue
        folded.append(line)
    for line in folded:
        match = _HEADER_LINE.fullmatch(line)
        if match is None:
            raise RemoteProtocolError(f"malformed {what} line {line[:60]!r}")
        name = match.group(1).decode("ascii").lower()
        value = match.group(2).decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


def _split_lines(head: bytes) -> list[bytes]:
    lines = head.split(b"\n")
    return [line[:-1] if line[-1:] == b"\r" else line for line in lines]


def _parse_head(head: bytes) -> tuple[int, str, str, dict[str, str]]:
    lines = _split_lines(head)
    status = _STATUS_LINE.fullmatch(lines[0])
    if status is None:
        raise RemoteProtocolError(f"malformed status line {lines[0][:60]!r}")
    headers = _header_lines(lines[1:], "header")
    reason = status.group(3)
    version = f"HTTP/{status.group(1).decode('ascii')}"
    return int(status.group(2)), reason.decode("latin-1") if reason else "", version, headers


def _framing(method: str, status: int, version: str, headers: dict[str, str]) -> tuple[int, int, bool]:
    """(framing, Content-Length, keep-alive) of a response, from RFC 9112 section 6 (as h11 reads it)."""
    tokens = {t.strip(" \t").lower() for t in headers.get("connection", "").split(",")}
    keep_alive = "close" not in tokens if version >= "HTTP/1.1" else "keep-alive" in tokens
    length = headers.get("content-length")
    size = 0
    if length is not None:
        values = {v.strip(" \t") for v in length.split(",")}
        value = values.pop() if len(values) == 1 else ""
        if not value.isascii() or not value.isdigit() or len(value) > 20:
            raise RemoteProtocolError(f"bad Content-Length {length[:40]!r}")
        size = int(value)
        headers["content-length"] = value  # "2, 2" is 2 (as h11 normalizes it)
    encoding = headers.get("transfer-encoding")
    if encoding is not None:
        if encoding.lower() != "chunked":
            raise RemoteProtocolError(f"unsupported Transfer-Encoding {encoding[:40]!r} (only chunked is understood)")
        headers["transfer-encoding"] = "chunked"
    if method == "HEAD" or status in (204, 304) or status < 200 or (method == "CONNECT" and status < 300):
        return _DONE, 0, keep_alive
    if encoding is not None:
        return _CHUNKED, 0, keep_alive
    if length is not None:
        return (_LENGTH if size else _DONE), size, keep_alive
    return _CLOSE, 0, False


def _check(text: str) -> str:
    if "\r" in text or "\n" in text or "\0" in text:
        raise InvalidURL("a header name or value with a line break")
    return text


class HttpClient:
    """Sends HTTP/1.1 requests over a bounded keep-alive pool. One per engine; close it with `aclose()`.

    `timeout`: default seconds (or a Timeout) for requests that give none. `ssl_context`: for https
    (default: `ssl.create_default_context()`, made on the first https request). Connections idle
    longer than `idle_expiry_s` are closed; at most `max_idle` are kept, `max_connections` open.
    `proxies`: {"http"/"https"/"all": proxy URL, "no": NO_PROXY list}; by default (`trust_env`) read
    from the environment once, here (see `http_proxy.py`).
    """

    def __init__(
        self,
        *,
        timeout: float | Timeout | None = 30.0,
        max_connections: int = 64,
        max_idle: int = 32,
        idle_expiry_s: float = 30.0,
        ssl_context: Any = None,
        proxies: Mapping[str, str] | None = None,
        trust_env: bool = True,
    ) -> None:
        self.timeout = Timeout.of(timeout)
        self._pool = _Pool(max_connections, max_idle, idle_expiry_s)
        self._ssl_context = ssl_context
        if proxies is not None:
            self._proxies: ProxySettings | None = ProxySettings(proxies) or None
        else:
            self._proxies = ProxySettings.from_environment() if trust_env else None
        self.retries = 0  # requests sent again after a kept-alive connection turned out closed
        self.pool_wait_ns = 0  # time requests spent waiting for a free connection, in all

    @property
    def open_connections(self) -> int:
        """Connections open now, busy or idle."""
        return self._pool.open

    @property
    def idle_connections(self) -> int:
        """Connections kept open for reuse."""
        return self._pool.idle_count

    @property
    def pool_waits(self) -> int:
        """Requests that found every connection of the pool busy and waited (`pool_wait_ns` in all)."""
        return self._pool.waits

    async def stream(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        json: Any = None,
        content: bytes | None = None,
        timeout: float | Timeout | None = None,
        on_connect: Callable[[int], None] | None = None,
        follow_redirects: bool = True,
        max_redirects: int = MAX_REDIRECTS,
    ) -> Response:
        """Send a request and read the response's head; the body is read with the Response's methods.

        `json` is sent compact (with `Content-Type: application/json`), `content` as is. `on_connect`
        gets the `perf_counter_ns()` at which a new connection was ready (TCP, a proxy's tunnel, and TLS
        for https); it is not called when a kept-alive connection is reused. Redirects are followed
        (see `http_redirects.py`) unless `follow_redirects` is False. The caller must close the Response
        (`aclose()` or `async with`) unless it reads the body to its end.

        Timing: `Response.start_ns` is the `perf_counter_ns()` at which the request that got this
        response had its connection slot (an idle connection, or the right to open one): after any wait
        for this client's pool, before connecting, so connecting counts as the server's time (as in
        `vllm bench serve`) and lpxtop's own pool does not. A request sent again after a stale
        kept-alive connection failed gets the slot time of the new attempt; after a redirect, the start
        of the first hop, later by the pool waits of the next hops.
        """
        if self._pool.closed:
            raise HttpError("the client is closed")
        limits = self.timeout if timeout is None else Timeout.of(timeout)
        method = method.upper()
        is_json = json is not None
        if is_json:
            content = _json.dumps(json, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        budget = None if limits.total is None else _Budget(asyncio.get_running_loop(), limits.total)
        response = await self._exchange(method, url, headers, content, is_json, limits, budget, on_connect)
        if not follow_redirects or response.status_code not in REDIRECT_STATUSES:
            response.url = url
            return response
        return await self._follow(response, method, url, headers, content, is_json, limits, budget, on_connect,
                                  max_redirects)

    async def _follow(
        self, response: Response, method: str, url: str, headers: Mapping[str, str] | None, content: bytes | None,
        is_json: bool, limits: Timeout, budget: _Budget | None, on_connect: Callable[[int], None] | None,
        max_redirects: int,
    ) -> Response:
        """Follow `response`'s redirects; the last response, with the whole chain's timing."""
        visited = {(method, url)}
        hops: list[tuple[int, str]] = []
        start_ns = response.start_ns
        pool_wait_ns = response.pool_wait_ns
        retried = response.retried
        while response.status_code in REDIRECT_STATUSES and (location := response.headers.get("location")):
            try:
                target = next_url(method, url, response.status_code, location, visited, len(hops), max_redirects)
            except RedirectError:
                await response.aclose()
                raise
            await response.discard(_REDIRECT_DRAIN_BYTES, _REDIRECT_DRAIN_S)
            hops.append((response.status_code, url))
            if headers and strips_credentials(url, target):
                headers = without_credentials(headers)
            url = target
            visited.add((method, url))
            response = await self._exchange(method, url, headers, content, is_json, limits, budget, on_connect)
            start_ns += response._excluded_ns
            pool_wait_ns += response.pool_wait_ns
            retried = retried or response.retried
        response.url = url
        response.redirects = tuple(hops)
        response.start_ns = start_ns
        response.pool_wait_ns = pool_wait_ns
        response.retried = retried
        return response

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        json: Any = None,
        content: bytes | None = None,
        timeout: float | Timeout | None = None,
        max_bytes: int = MAX_BODY_BYTES,
        follow_redirects: bool = True,
    ) -> Response:
        """Send a request and read its whole body (BodyTooLarge over `max_bytes`), all within the
        timeout's total (by default the longest of its phases)."""
        limits = (self.timeout if timeout is None else Timeout.of(timeout)).with_total()
        response = await self.stream(method, url, headers=headers, json=json, content=content, timeout=limits,
                                     follow_redirects=follow_redirects)
        await response.read(max_bytes)
        return response

    async def get(
        self, url: str, *, headers: Mapping[str, str] | None = None, timeout: float | Timeout | None = None,
        max_bytes: int = MAX_BODY_BYTES,
    ) -> Response:
        """GET `url` and read the whole body."""
        return await self.request("GET", url, headers=headers, timeout=timeout, max_bytes=max_bytes)

    async def post(
        self, url: str, *, headers: Mapping[str, str] | None = None, json: Any = None,
        content: bytes | None = None, timeout: float | Timeout | None = None, max_bytes: int = MAX_BODY_BYTES,
    ) -> Response:
        """POST to `url` and read the whole body."""
        return await self.request(
            "POST", url, headers=headers, json=json, content=content, timeout=timeout, max_bytes=max_bytes
        )

    async def aclose(self) -> None:
        """Close the idle connections; busy ones close as their responses finish."""
        self._pool.close()

    async def __aenter__(self) -> HttpClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _exchange(
        self, method: str, url: str, headers: Mapping[str, str] | None, content: bytes | None, is_json: bool,
        limits: Timeout, budget: _Budget | None, on_connect: Callable[[int], None] | None,
    ) -> Response:
        """One request and its response's head, on a pooled or new connection; sent once more on a new
        connection when a reused one fails before any byte of an answer came."""
        scheme, host, port, target, host_header = _split(url)
        proxy = None if self._proxies is None else self._proxies.for_target(scheme, host, port)
        proxy_authorization = None
        if proxy is None:
            key: tuple[Any, ...] = (scheme, host, port)
        else:
            if proxy.error is not None:
                raise UnsupportedProtocol(proxy.error)
            if scheme == "http":  # absolute-form to the proxy, which any http target can share
                key = ("http", proxy.host, proxy.port, "proxy")
                target = _absolute(url)
                proxy_authorization = proxy.authorization
            else:  # a CONNECT tunnel to the target
                key = (scheme, host, port, proxy.shown)
        request = self._head(method, target, host_header, headers, content, is_json, proxy_authorization)
        if content:
            request += content
        pool = self._pool
        issued_ns = time.perf_counter_ns()
        waited_ns = 0
        retried = False
        while True:
            conn = None if retried else pool.take_idle(key)  # the common case, without a coroutine call
            if conn is None:
                began = time.perf_counter_ns()
                pool_limit = _bound(limits.pool, budget)
                try:
                    conn = await pool.acquire(key, pool_limit, fresh=retried)
                except PoolTimeout:
                    raise _timeout(PoolTimeout, f"no free connection ({pool.open} open)", pool_limit, budget) from None
                slot_ns = time.perf_counter_ns()
                waited_ns += slot_ns - began
                if conn is None:
                    try:
                        conn = await self._open(key, scheme, host, port, proxy, limits.connect, budget)
                    except BaseException:
                        pool.unreserve()
                        raise
                    if on_connect is not None:
                        on_connect(time.perf_counter_ns())
            else:
                slot_ns = time.perf_counter_ns()
            reused = conn.used
            conn.used = True
            mark = conn.protocol.arrived_ns
            try:
                await conn.write(request, _bound(limits.write, budget), budget)
                response = await self._read_head(conn, method, limits.read, budget)
            except (NetworkError, RemoteProtocolError) as exc:
                pool.release(conn, reusable=False)
                if reused and not retried and conn.protocol.arrived_ns == mark and not isinstance(exc, DecodingError):
                    # The server had closed this kept-alive connection as the request went out: nothing of
                    # it was processed, so it is sent once more, on a new connection (the race every pool has).
                    retried = True
                    self.retries += 1
                    continue
                raise
            except BaseException:
                pool.release(conn, reusable=False)
                raise
            waited_ns = waited_ns if waited_ns > 0 else 0
            self.pool_wait_ns += waited_ns
            response.start_ns = slot_ns
            response.pool_wait_ns = waited_ns
            response.retried = retried
            response._excluded_ns = slot_ns - issued_ns
            return response

    @staticmethod
    def _head(
        method: str, target: str, host: str, headers: Mapping[str, str] | None, content: bytes | None, is_json: bool,
        proxy_authorization: str | None = None,
    ) -> bytes:
        merged = {name.lower(): (name, value) for name, value in _DEFAULT_HEADERS}
        if is_json:
            merged["content-type"] = ("Content-Type", "application/json")
        if headers:
            for name, value in headers.items():
                merged[name.lower()] = (_check(name), _check(value))
        for name in ("host", "content-length", "transfer-encoding", "connection", "proxy-authorization"):
            merged.pop(name, None)  # framing, connection handling and the proxy are this client's
        if proxy_authorization is not None:
            merged["proxy-authorization"] = ("Proxy-Authorization", proxy_authorization)
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
        lines.extend(f"{name}: {value}" for name, value in merged.values())
        if content is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(content or b'')}")
        lines.append("\r\n")
        return "\r\n".join(lines).encode("latin-1", errors="strict")

    async def _open(
        self, key: tuple[Any, ...], scheme: str, host: str, port: int, proxy: Proxy | None, timeout: float | None,
        budget: _Budget | None,
    ) -> _Connection:
        """A new connection for `key`: direct, to an http proxy, or through a proxy's CONNECT tunnel."""
        limit = _bound(timeout, budget)
        error: type[HttpTimeout] = ConnectTimeout
        try:
            with _Deadline(limit, error):
                if proxy is None:
                    if scheme == "https":
                        return await self._connect(key, host, port, self._tls_context(), host, limit)
                    return await self._connect(key, host, port, None, None, limit)
                conn = await self._connect(key, proxy.host, proxy.port, None, None, limit, proxy)
                if scheme == "https":
                    try:
                        await self._tunnel(conn, host, port, proxy, limit)
                    except BaseException:
                        conn.close()
                        raise
                return conn
        except ConnectTimeout as exc:
            if budget is not None and budget.expired():
                raise ConnectTimeout(budget.message("no connection")) from exc
            raise

    async def _connect(
        self, key: tuple[Any, ...], host: str, port: int, context: Any, server_hostname: str | None,
        timeout: float | None, proxy: Proxy | None = None,
    ) -> _Connection:
        loop = asyncio.get_running_loop()
        protocol = _Protocol()
        try:
            transport, _ = await loop.create_connection(
                lambda: protocol,
                host,
                port,
                ssl=context,
                server_hostname=server_hostname,
                # asyncio's own handshake limit (60 s by default) must not come first
                ssl_handshake_timeout=(None if timeout is None else timeout + 1.0) if context is not None else None,
                happy_eyeballs_delay=_HAPPY_EYEBALLS_DELAY_S,
            )
        except OSError as exc:  # socket.gaierror, ConnectionRefusedError, ssl.SSLError stay in the chain
            if isinstance(exc, TimeoutError):
                raise ConnectTimeout(str(exc) or "timed out") from exc
            if proxy is not None:
                raise ProxyError(f"cannot connect to the proxy {proxy.shown} (from {proxy.variable}): "
                                 f"{exc.strerror or exc}", proxy=proxy.shown) from exc
            raise ConnectError(str(exc) or type(exc).__name__) from exc
        return _Connection(key, transport, protocol)  # type: ignore[arg-type]

    async def _tunnel(self, conn: _Connection, host: str, port: int, proxy: Proxy, timeout: float | None) -> None:
        """CONNECT host:port through the proxy on `conn`, then TLS to the target inside the tunnel."""
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}", "User-Agent: lpxtop"]
        if proxy.authorization is not None:
            lines.append(f"Proxy-Authorization: {proxy.authorization}")
        lines.append("\r\n")
        conn.used = True
        await conn.write("\r\n".join(lines).encode("latin-1"), timeout, None)
        protocol = conn.protocol
        scanned = 0
        while True:
            end, blank = _find_head_end(protocol.buffer, scanned)
            if end >= 0:
                break
            scanned = max(0, len(protocol.buffer) - 2)
            if len(protocol.buffer) > MAX_HEAD_BYTES:
                raise ProxyError(f"the proxy {proxy.shown} sent an oversized answer to CONNECT", proxy=proxy.shown)
            if protocol.eof or protocol.lost:
                raise ProxyError(f"the proxy {proxy.shown} closed the connection instead of opening a tunnel to "
                                 f"{authority}", proxy=proxy.shown)
            await conn.wait(None)  # bounded by the _Deadline around the whole connect
        head = bytes(protocol.buffer[:end])
        del protocol.buffer[: end + blank]
        try:
            status, reason, _, _ = _parse_head(head)
        except RemoteProtocolError as exc:
            raise ProxyError(f"the proxy {proxy.shown} answered CONNECT with garbage: {exc}", proxy=proxy.shown) from exc
        if not 200 <= status < 300:
            raise ProxyError(f"the proxy {proxy.shown} (from {proxy.variable}) refused a tunnel to {authority}: "
                             f"HTTP {status} {reason}".rstrip(), proxy=proxy.shown, status_code=status)
        if protocol.buffer:
            raise ProxyError(f"the proxy {proxy.shown} sent bytes before the tunnel's TLS began", proxy=proxy.shown)
        loop = asyncio.get_running_loop()
        try:
            transport = await loop.start_tls(
                conn.transport, protocol, self._tls_context(), server_hostname=host,
                ssl_handshake_timeout=None if timeout is None else timeout + 1.0,
            )
        except OSError as exc:  # ssl.SSLError stays in the chain: classified as tls
            raise ConnectError(str(exc) or type(exc).__name__) from exc
        if transport is None:
            raise ConnectError("the connection closed during the TLS handshake")
        conn.transport = transport  # type: ignore[assignment]
        protocol.transport = transport  # type: ignore[assignment]

    def _tls_context(self) -> Any:
        if self._ssl_context is None:
            import ssl  # only for https endpoints: loading the CA store costs memory

            self._ssl_context = ssl.create_default_context()
        return self._ssl_context

    async def _read_head(self, conn: _Connection, method: str, timeout: float | None, budget: _Budget | None) -> Response:
        """Read the response's head: all of it within `timeout` (and the request's total), however trickled."""
        protocol = conn.protocol
        head_budget = None if timeout is None else _Budget(conn.loop, timeout)
        if head_budget is None or (budget is not None and budget.deadline < head_budget.deadline):
            head_budget = budget
        interim = 0
        scanned = 0
        while True:
            buffer = protocol.buffer
            end, blank = _find_head_end(buffer, scanned)
            if end < 0:
                scanned = max(0, len(buffer) - 2)
                if len(buffer) > MAX_HEAD_BYTES:
                    raise RemoteProtocolError(f"a response head larger than {MAX_HEAD_BYTES} bytes")
                if protocol.eof or protocol.lost:
                    if protocol.error is not None:
                        raise ReadError(str(protocol.error) or type(protocol.error).__name__) from protocol.error
                    if buffer:
                        raise RemoteProtocolError("the server closed the connection in the middle of the response head")
                    raise RemoteProtocolError("Server disconnected without sending a response.")
                wait = _bound(timeout, head_budget)
                if not await conn.wait(wait):
                    if head_budget is budget and budget is not None and budget.expired():
                        raise ReadTimeout(budget.message("no complete response head"))
                    if buffer:
                        raise ReadTimeout(f"no complete response head within {timeout:g} s ({len(buffer)} bytes of it came)")
                    raise ReadTimeout(f"no data within {timeout:g} s")
                continue
            if end > MAX_HEAD_BYTES:
                raise RemoteProtocolError(f"a response head larger than {MAX_HEAD_BYTES} bytes")
            head = bytes(buffer[:end])
            del buffer[: end + blank]
            scanned = 0
            protocol.consumed()
            status, reason, version, headers = _parse_head(head)
            if status < 100:
                raise RemoteProtocolError(f"malformed status line: status {status:03d}")
            framing, length, keep_alive = _framing(method, status, version, headers)
            if status == 101:
                raise RemoteProtocolError("the server switched protocols (101) although no upgrade was asked for")
            if status < 200:
                interim += 1
                if interim > MAX_INTERIM:
                    raise RemoteProtocolError(f"more than {MAX_INTERIM} interim (1xx) responses")
                continue  # an interim response (100 Continue, 103 Early Hints...): the real one follows
            return Response(
                status, reason, version, headers, conn, self._pool, framing, length, keep_alive, timeout, budget
            )


def _absolute(url: str) -> str:
    """`url` as a request target for a proxy: without user:password and fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    shown = f"[{host}]" if ":" in host else host
    netloc = shown if parts.port is None else f"{shown}:{parts.port}"
    target = f"{parts.scheme.lower()}://{netloc}{parts.path or '/'}"
    return f"{target}?{parts.query}" if parts.query else target


def _split(url: str) -> tuple[str, str, int, str, str]:
    """(scheme, host, port, request target, Host header) of an absolute http(s) URL."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidURL(f"invalid URL {url[:80]!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise UnsupportedProtocol(f"unsupported URL scheme {scheme or '(none)'!r} in {url[:80]!r}")
    host = parts.hostname
    if not host:
        raise InvalidURL(f"no host in URL {url[:80]!r}")
    _check(url)
    if " " in url:
        raise InvalidURL(f"a space in URL {url[:80]!r}")
    default = 443 if scheme == "https" else 80
    if port is None:
        port = default
    shown = f"[{host}]" if ":" in host else host
    host_header = shown if port == default else f"{shown}:{port}"
    target = parts.path or "/"
    if parts.query:
        target = f"{target}?{parts.query}"
    return scheme, host, port, target, host_header


__all__ = [
    "BodyTooLarge",
    "ConnectError",
    "ConnectTimeout",
    "DecodingError",
    "HttpClient",
    "HttpError",
    "HttpTimeout",
    "InvalidURL",
    "NetworkError",
    "PoolTimeout",
    "ProxyError",
    "ReadError",
    "ReadTimeout",
    "RedirectError",
    "RemoteProtocolError",
    "Response",
    "Timeout",
    "UnsupportedProtocol",
    "WriteError",
    "WriteTimeout",
    "shown_url",
]
