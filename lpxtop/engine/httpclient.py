"""A small HTTP/1.1 client written directly on asyncio: the engine's probes, scrapes and discovery.

Why not httpx: a streamed probe reads ~30 small chunks, and each read crossed httpx, httpcore and h11
(four times the CPU of the bytes' own trip through the event loop), and importing them cost ~12 MB.
Here an `asyncio.Protocol` collects what the socket gives; the task that reads a response waits on one
future (with one timer for its read timeout: no task per read, no cancel scope), and when woken it
takes the buffer and undoes the chunked framing with a few bytearray operations per chunk. Every
`data_received` is stamped with `time.perf_counter_ns()`: `Response.arrived_ns` is when the bytes
just handed over came off the socket, before any parsing.

Scope, and no more: GET/POST (JSON bodies), HTTP/1.1 keep-alive pool per (scheme, host, port) with a
bound on connections and an idle expiry, Content-Length / chunked / close-delimited bodies, https
with `ssl.create_default_context()` (verification on). No proxies, redirects, HTTP/2, compression
(`Accept-Encoding: identity`), cookies. Everything is bounded (head size, header count, chunk-size
line, trailers, bodies read whole). Errors are `HttpError` subclasses raised `from` the OSError or
ssl error underneath, so `lpxtop.engine.errors` finds refused/dns/tls in the exception chain.
"""

from __future__ import annotations

import asyncio
import collections
import json as _json
import select
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 64 * 1024  # status line + headers (and, separately, the trailers of a chunked body)
MAX_HEADERS = 256
MAX_CHUNK_LINE = 1024  # a chunk-size line with its extensions
MAX_BODY_BYTES = 16 * 1024 * 1024  # what request()/get() read whole unless told otherwise
# Reading from the socket pauses while more than this is buffered and unread (only a stalled reader gets there).
_HIGH_WATER = 256 * 1024
_LOW_WATER = 64 * 1024
# Like anyio's connect_tcp: try the next address if one has not connected within this many seconds.
_HAPPY_EYEBALLS_DELAY_S = 0.25
# Python >= 3.11 tasks count cancellation requests, which tells our own from an outside one.
_TASKS_COUNT_CANCELS = sys.version_info >= (3, 11)
_HEX = b"0123456789abcdefABCDEF"
_DEFAULT_HEADERS = (("Accept", "*/*"), ("Accept-Encoding", "identity"), ("User-Agent", "lpxtop"))

# Body framing of a response
_DONE, _LENGTH, _CHUNKED, _CLOSE = 0, 1, 2, 3
# Where a chunked body is: a size line next, chunk data, the CRLF after the data, the trailers
_SIZE, _DATA, _DATA_END, _TRAILERS = 0, 1, 2, 3


class HttpError(Exception):
    """Base of every error this client raises."""


class HttpTimeout(HttpError):
    """A connect, pool, read or write timeout."""


class ConnectTimeout(HttpTimeout):
    """No connection (TCP and TLS) within the connect timeout."""


class PoolTimeout(HttpTimeout):
    """Every connection of the pool stayed busy for the pool timeout."""


class ReadTimeout(HttpTimeout):
    """No bytes of the response within the read timeout."""


class WriteTimeout(HttpTimeout):
    """The request could not be sent within the write timeout."""


class NetworkError(HttpError):
    """The socket failed (the OSError is the `__cause__`)."""


class ConnectError(NetworkError):
    """Connecting failed: refused, name lookup, TLS handshake..."""


class ReadError(NetworkError):
    """Reading failed (reset by the peer...)."""


class WriteError(NetworkError):
    """Sending failed (the connection is closed...)."""


class RemoteProtocolError(HttpError):
    """The server broke HTTP/1.1: a garbage status line, a body cut short, an oversized head..."""


class InvalidURL(HttpError):
    """A URL without a host, with a bad port, or a header that would break the request."""


class UnsupportedProtocol(HttpError):
    """A URL whose scheme is not http or https."""


class BodyTooLarge(HttpError):
    """A body longer than the caller's limit (the connection is closed)."""


@dataclass(frozen=True)
class Timeout:
    """Seconds for each phase of a request; None waits forever. `read` bounds each wait for bytes."""

    connect: float | None = 30.0
    read: float | None = 30.0
    write: float | None = 30.0
    pool: float | None = 30.0

    @classmethod
    def of(cls, value: float | Timeout | None) -> Timeout:
        """A Timeout from a Timeout, or the same seconds for every phase."""
        if isinstance(value, Timeout):
            return value
        return cls(value, value, value, value)


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
        if len(buffer) > _HIGH_WATER and not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()
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

    __slots__ = ("key", "transport", "protocol", "loop", "deadline", "timer", "idle_since", "closed")

    def __init__(self, key: tuple[str, str, int], transport: asyncio.Transport, protocol: _Protocol) -> None:
        self.key = key
        self.transport = transport
        self.protocol = protocol
        self.loop = asyncio.get_running_loop()
        self.deadline: float | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.idle_since = 0.0
        self.closed = False

    async def wait(self, timeout: float | None) -> None:
        """Wait until bytes arrive or the stream ends; ReadTimeout after `timeout` s without either."""
        protocol = self.protocol
        if protocol.eof or protocol.lost:
            return
        waiter = self.arm(timeout)
        try:
            arrived = await waiter
        finally:
            protocol.waiter = None
        if not arrived:
            raise ReadTimeout(f"no data within {timeout:g} s")

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

    async def write(self, data: bytes, timeout: float | None) -> None:
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
                raise WriteTimeout(f"could not send within {timeout:g} s")
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
        self.idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self.open = 0  # busy and idle together
        self.closed = False
        self._waiters: collections.deque[asyncio.Future[bool]] = collections.deque()
        self._sweeper: asyncio.TimerHandle | None = None

    @property
    def idle_count(self) -> int:
        return sum(len(conns) for conns in self.idle.values())

    def take_idle(self, key: tuple[str, str, int]) -> _Connection | None:
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

    async def acquire(self, key: tuple[str, str, int], timeout: float | None) -> _Connection | None:
        """An idle connection to `key`, or None with one more connection counted as open (the caller
        connects, and calls `unreserve()` if that fails). Waits up to `timeout` while the pool is full."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            conn = self.take_idle(key)
            if conn is not None:
                return conn
            if self.open < self.max_connections or self._close_oldest_idle():
                self.open += 1
                return None
            loop = asyncio.get_running_loop()
            waiter: asyncio.Future[bool] = loop.create_future()
            self._waiters.append(waiter)
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


class _Default:
    """The type of `_DEFAULT`: "the request's own setting"."""


_DEFAULT = _Default()


class Response:
    """The status and headers of a response, and its body as it arrives.

    `receive()` / `aiter_raw()` hand over the body's bytes (chunked framing removed) as the socket
    delivers them; `arrived_ns` is the `perf_counter_ns()` of the read that brought the bytes last
    handed over. When the body has been read to its end the connection goes back to the pool; closing
    a response before that closes its connection.
    """

    def __init__(
        self, status_code: int, reason_phrase: str, http_version: str, headers: dict[str, str],
        conn: _Connection, pool: _Pool, framing: int, length: int, keep_alive: bool, read_timeout: float | None,
    ) -> None:
        self.status_code = status_code
        self.reason_phrase = reason_phrase
        self.http_version = http_version
        self.headers = headers  # lower-case names; repeated headers joined with ", "
        self.arrived_ns = conn.protocol.arrived_ns
        self._conn: _Connection | None = conn
        self._pool = pool
        self._framing = framing
        self._remaining = length  # Content-Length left, or what is left of the current chunk
        self._chunk_state = _SIZE
        self._trailer_bytes = 0
        self._keep_alive = keep_alive
        self._read_timeout = read_timeout
        self._content: bytes | None = None
        self._sink: Callable[[bytes, int], bool] | None = None  # feed()'s state
        self._sink_stopped = False
        self._sink_error: BaseException | None = None
        self._feed_timeout: float | None = None
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
        """The next bytes of the body, b"" at its end. `timeout`: this call's read timeout (default: the request's)."""
        if timeout is _DEFAULT:
            timeout = self._read_timeout
        while True:
            conn = self._conn
            if conn is None:
                if self._framing == _DONE:
                    return b""
                raise ReadError("the response was closed")
            protocol = conn.protocol
            if protocol.buffer:
                data = self._take_buffer(protocol)
                if self._framing == _DONE:
                    self._finish()
                if data:
                    self.arrived_ns = protocol.arrived_ns
                    return data
                if self._framing == _DONE:
                    return b""
            if protocol.eof or protocol.lost:
                self._stream_ended(conn)
                return b""
            # Wait for bytes (inline rather than through conn.wait: this is once per chunk of a stream).
            waiter = conn.arm(timeout)  # type: ignore[arg-type]
            try:
                arrived = await waiter
            finally:
                protocol.waiter = None
            if not arrived:
                raise ReadTimeout(f"no data within {timeout:g} s")

    async def feed(self, sink: Callable[[bytes, int], bool], timeout: float | None | _Default = _DEFAULT) -> bool:
        """Hand the body to `sink(data, arrived_ns)` as each read brings it, until the body ends (False)
        or the sink returns True (True; the rest of the body stays unread).

        The sink runs inside the transport's read callback, so a stream of small reads costs one
        event-loop pass per read instead of two (the read, then the waiting task's wake-up). It must not
        block. What it raises is raised here. `timeout`: the longest wait for bytes, restarted by every
        read (default: the request's read timeout).
        """
        if timeout is _DEFAULT:
            timeout = self._read_timeout
        conn = self._conn
        if conn is None:
            if self._framing == _DONE:
                return False
            raise ReadError("the response was closed")
        protocol = conn.protocol
        self._sink = sink
        self._sink_stopped = False
        self._sink_error = None
        self._feed_timeout = timeout  # type: ignore[assignment]
        protocol.on_data = self._take_fed
        try:
            if protocol.buffer:
                self._take_fed()  # bytes that came in with the head
            while True:
                if self._sink_error is not None:
                    raise self._sink_error
                if self._sink_stopped:
                    return True
                conn = self._conn
                if conn is None:  # the body ended: _take_fed finished it
                    return False
                if protocol.eof or protocol.lost:
                    self._stream_ended(conn)
                    return False
                waiter = conn.arm(timeout)  # type: ignore[arg-type]
                try:
                    arrived = await waiter
                finally:
                    if protocol.waiter is waiter:  # a finished body's connection may serve another request now
                        protocol.waiter = None
                if not arrived:
                    raise ReadTimeout(f"no data within {timeout:g} s")
        finally:
            if protocol.on_data == self._take_fed:
                protocol.on_data = None
            self._sink = None
            self._sink_error = None

    def _take_fed(self) -> None:
        """`feed()`'s work, called by the protocol on each read: decode, hand over, wake the reader when done."""
        conn = self._conn
        if conn is None or self._sink is None:
            return
        protocol = conn.protocol
        ended = False
        try:
            data = self._take_buffer(protocol)
            ended = self._framing == _DONE
            if data:
                self.arrived_ns = protocol.arrived_ns
                self._sink_stopped = bool(self._sink(data, protocol.arrived_ns))
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
        elif self._feed_timeout is not None:
            conn.deadline = conn.loop.time() + self._feed_timeout  # the lazy read timer follows the reads

    def _take_buffer(self, protocol: _Protocol) -> bytes:
        """The body bytes in the protocol's buffer, framing removed (an incomplete chunk line stays)."""
        buffer = protocol.buffer
        framing = self._framing
        if framing == _CHUNKED:
            data = self._decode_chunked(buffer)
        elif framing == _LENGTH:
            data = self._decode_length(buffer)
        else:  # close-delimited: everything until the server closes
            data = bytes(buffer)
            buffer.clear()
        if protocol.reading_paused:
            protocol.consumed()
        return data

    def _stream_ended(self, conn: _Connection) -> None:
        """The server closed (or the connection failed) with the buffer read: the end of a close-delimited
        body; for any other body, the error that it was cut short."""
        if self._framing == _CLOSE and conn.protocol.error is None:
            self._framing = _DONE
            self._finish()
            return
        error = conn.read_failure()
        self._close()
        raise error

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive (see `receive`)."""
        while data := await self.receive():
            yield data

    async def read(self, max_bytes: int | None = None, *, truncate: bool = False) -> bytes:
        """The whole body (also kept as `content`). Over `max_bytes`: BodyTooLarge, or with `truncate`
        its first `max_bytes` bytes (either way the connection is closed unless the body was all in)."""
        parts: list[bytes] = []
        size = 0
        try:
            while data := await self.receive():
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
        deadline = time.monotonic() + timeout_s
        left = max_bytes
        try:
            while not self.is_complete and left > 0:
                left -= len(await self.receive(max(0.0, deadline - time.monotonic())))
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
            self._pool.release(conn, reusable=False)

    def _finish(self) -> None:
        conn = self._conn
        if conn is not None:
            self._conn = None
            # Bytes beyond the body (a server that sent more than it framed) make the connection unusable.
            self._pool.release(conn, reusable=self._keep_alive and not conn.protocol.buffer)

    def _decode_length(self, buffer: bytearray) -> bytes:
        remaining = self._remaining
        if len(buffer) <= remaining:
            data = bytes(buffer)
            buffer.clear()
        else:
            data = bytes(buffer[:remaining])
            del buffer[:remaining]
        self._remaining = remaining - len(data)
        if self._remaining == 0:
            self._framing = _DONE
        return data

    def _decode_chunked(self, buffer: bytearray) -> bytes:
        """Take the body bytes out of the buffered chunked framing; leave an incomplete line in place."""
        if self._chunk_state == _SIZE:
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
        out = b""
        pos = 0
        end = len(buffer)
        state = self._chunk_state
        try:
            while pos < end:
                if state == _DATA:
                    take = min(self._remaining, end - pos)
                    piece = bytes(buffer[pos : pos + take])
                    out = out + piece if out else piece
                    pos += take
                    self._remaining -= take
                    if self._remaining == 0:
                        state = _DATA_END
                elif state == _SIZE:
                    eol = buffer.find(b"\n", pos, pos + MAX_CHUNK_LINE + 1)
                    if eol < 0:
                        if end - pos > MAX_CHUNK_LINE:
                            raise RemoteProtocolError(f"a chunk-size line longer than {MAX_CHUNK_LINE} bytes")
                        break
                    line = bytes(buffer[pos:eol]).split(b";", 1)[0].strip()
                    if not line or len(line) > 15 or line.translate(None, _HEX):
                        raise RemoteProtocolError(f"malformed chunk-size line {bytes(buffer[pos:eol])[:40]!r}")
                    pos = eol + 1
                    size = int(line, 16)
                    if size:
                        self._remaining = size
                        state = _DATA
                    else:
                        state = _TRAILERS
                elif state == _DATA_END:
                    if buffer[pos] == 0x0D:  # CR LF; a bare LF is tolerated
                        if pos + 1 >= end:
                            break
                        pos += 1
                    if buffer[pos] != 0x0A:
                        raise RemoteProtocolError("chunk data longer than its announced size")
                    pos += 1
                    state = _SIZE
                else:  # _TRAILERS: header lines until an empty one, then the body is complete
                    eol = buffer.find(b"\n", pos)
                    if eol < 0:
                        if self._trailer_bytes + end - pos > MAX_HEAD_BYTES:
                            raise RemoteProtocolError(f"chunked trailers larger than {MAX_HEAD_BYTES} bytes")
                        break
                    line_length = eol - pos
                    pos = eol + 1
                    if line_length == 0 or (line_length == 1 and buffer[eol - 1] == 0x0D):
                        self._framing = _DONE
                        break
                    self._trailer_bytes += line_length + 1
                    if self._trailer_bytes > MAX_HEAD_BYTES:
                        raise RemoteProtocolError(f"chunked trailers larger than {MAX_HEAD_BYTES} bytes")
        except RemoteProtocolError:
            self._close()
            raise
        finally:
            self._chunk_state = state
            if pos:
                del buffer[:pos]
        return out


def _find_head_end(buffer: bytearray) -> tuple[int, int]:
    """(end of the head, length of the blank line that ends it), or (-1, 0)."""
    crlf = buffer.find(b"\r\n\r\n")
    lf = buffer.find(b"\n\n")
    if crlf >= 0 and (lf < 0 or crlf < lf):
        return crlf, 4
    if lf >= 0:
        return lf, 2
    return -1, 0


def _parse_head(head: bytes) -> tuple[int, str, str, dict[str, str]]:
    lines = head.split(b"\n")
    status_line = lines[0].rstrip(b"\r")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or len(parts[1]) != 3 or not parts[1].isdigit():
        raise RemoteProtocolError(f"malformed status line {status_line[:60]!r}")
    if len(lines) > MAX_HEADERS + 1:
        raise RemoteProtocolError(f"more than {MAX_HEADERS} response headers")
    headers: dict[str, str] = {}
    last = ""
    for raw in lines[1:]:
        line = raw.rstrip(b"\r").decode("latin-1")
        if line[:1] in (" ", "\t") and last:  # obsolete line folding: continues the previous header
            headers[last] = f"{headers[last]} {line.strip()}"
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise RemoteProtocolError(f"malformed header line {line[:60]!r}")
        last = name.lower()
        value = value.strip()
        headers[last] = f"{headers[last]}, {value}" if last in headers else value
    return int(parts[1]), parts[2].decode("latin-1") if len(parts) > 2 else "", parts[0].decode("ascii"), headers


def _framing(method: str, status: int, version: str, headers: dict[str, str]) -> tuple[int, int, bool]:
    """(framing, Content-Length, keep-alive) of a response, from RFC 9112 section 6."""
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    keep_alive = "close" not in tokens if version != "HTTP/1.0" else "keep-alive" in tokens
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return _DONE, 0, keep_alive
    encoding = headers.get("transfer-encoding")
    if encoding is not None:
        if encoding.split(",")[-1].strip().lower() == "chunked":
            return _CHUNKED, 0, keep_alive
        return _CLOSE, 0, False
    length = headers.get("content-length")
    if length is not None:
        values = {v.strip() for v in length.split(",")}
        value = values.pop() if len(values) == 1 else ""
        if not value.isdigit() or len(value) > 18:
            raise RemoteProtocolError(f"bad Content-Length {length[:40]!r}")
        size = int(value)
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
    """

    def __init__(
        self,
        *,
        timeout: float | Timeout | None = 30.0,
        max_connections: int = 64,
        max_idle: int = 32,
        idle_expiry_s: float = 30.0,
        ssl_context: Any = None,
    ) -> None:
        self.timeout = Timeout.of(timeout)
        self._pool = _Pool(max_connections, max_idle, idle_expiry_s)
        self._ssl_context = ssl_context

    @property
    def open_connections(self) -> int:
        """Connections open now, busy or idle."""
        return self._pool.open

    @property
    def idle_connections(self) -> int:
        """Connections kept open for reuse."""
        return self._pool.idle_count

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
    ) -> Response:
        """Send a request and read the response's head; the body is read with the Response's methods.

        `json` is sent compact (with `Content-Type: application/json`), `content` as is. `on_connect`
        gets the `perf_counter_ns()` at which a new connection was ready (TCP, and TLS for https); it
        is not called when a kept-alive connection is reused. The caller must close the Response
        (`aclose()` or `async with`) unless it reads the body to its end.
        """
        if self._pool.closed:
            raise HttpError("the client is closed")
        limits = self.timeout if timeout is None else Timeout.of(timeout)
        method = method.upper()
        scheme, host, port, target, host_header = _split(url)
        if json is not None:
            content = _json.dumps(json, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        request = self._head(method, target, host_header, headers, content, json is not None)
        key = (scheme, host, port)
        pool = self._pool
        conn = pool.take_idle(key)  # the common case, without a coroutine call
        if conn is None:
            conn = await pool.acquire(key, limits.pool)
        if conn is None:
            try:
                conn = await self._connect(scheme, host, port, limits.connect)
            except BaseException:
                pool.unreserve()
                raise
            if on_connect is not None:
                on_connect(time.perf_counter_ns())
        try:
            await conn.write(request + content if content else request, limits.write)
            return await self._read_head(conn, method, limits.read)
        except BaseException:
            pool.release(conn, reusable=False)
            raise

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
    ) -> Response:
        """Send a request and read its whole body (BodyTooLarge over `max_bytes`)."""
        response = await self.stream(method, url, headers=headers, json=json, content=content, timeout=timeout)
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

    @staticmethod
    def _head(
        method: str, target: str, host: str, headers: Mapping[str, str] | None, content: bytes | None, is_json: bool
    ) -> bytes:
        merged = {name.lower(): (name, value) for name, value in _DEFAULT_HEADERS}
        if is_json:
            merged["content-type"] = ("Content-Type", "application/json")
        if headers:
            for name, value in headers.items():
                merged[name.lower()] = (_check(name), _check(value))
        for name in ("host", "content-length", "transfer-encoding", "connection"):
            merged.pop(name, None)  # framing and connection handling are this client's
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
        lines.extend(f"{name}: {value}" for name, value in merged.values())
        if content is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(content or b'')}")
        lines.append("\r\n")
        return "\r\n".join(lines).encode("latin-1", errors="strict")

    async def _connect(self, scheme: str, host: str, port: int, timeout: float | None) -> _Connection:
        loop = asyncio.get_running_loop()
        protocol = _Protocol()
        context = self._tls_context() if scheme == "https" else None
        with _Deadline(timeout, ConnectTimeout):
            try:
                transport, _ = await loop.create_connection(
                    lambda: protocol,
                    host,
                    port,
                    ssl=context,
                    server_hostname=host if context is not None else None,
                    # asyncio's own handshake limit (60 s by default) must not come first
                    ssl_handshake_timeout=(None if timeout is None else timeout + 1.0) if context is not None else None,
                    happy_eyeballs_delay=_HAPPY_EYEBALLS_DELAY_S,
                )
            except OSError as exc:  # socket.gaierror, ConnectionRefusedError, ssl.SSLError stay in the chain
                if isinstance(exc, TimeoutError):
                    raise ConnectTimeout(str(exc) or "timed out") from exc
                raise ConnectError(str(exc) or type(exc).__name__) from exc
        return _Connection((scheme, host, port), transport, protocol)  # type: ignore[arg-type]

    def _tls_context(self) -> Any:
        if self._ssl_context is None:
            import ssl  # only for https endpoints: loading the CA store costs memory

            self._ssl_context = ssl.create_default_context()
        return self._ssl_context

    async def _read_head(self, conn: _Connection, method: str, timeout: float | None) -> Response:
        protocol = conn.protocol
        while True:
            buffer = protocol.buffer
            end, blank = _find_head_end(buffer)
            if end < 0:
                if len(buffer) > MAX_HEAD_BYTES:
                    raise RemoteProtocolError(f"a response head larger than {MAX_HEAD_BYTES} bytes")
                if protocol.eof or protocol.lost:
                    if protocol.error is not None:
                        raise ReadError(str(protocol.error) or type(protocol.error).__name__) from protocol.error
                    if buffer:
                        raise RemoteProtocolError("the server closed the connection in the middle of the response head")
                    raise RemoteProtocolError("Server disconnected without sending a response.")
                await conn.wait(timeout)
                continue
            if end > MAX_HEAD_BYTES:
                raise RemoteProtocolError(f"a response head larger than {MAX_HEAD_BYTES} bytes")
            head = bytes(buffer[:end])
            del buffer[: end + blank]
            protocol.consumed()
            status, reason, version, headers = _parse_head(head)
            if 100 <= status < 200 and status != 101:
                continue  # an interim response (100 Continue...): the real one follows
            framing, length, keep_alive = _framing(method, status, version, headers)
            if status == 101:
                keep_alive = False
            return Response(
                status, reason, version, headers, conn, self._pool, framing, length, keep_alive, timeout
            )


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
    "HttpClient",
    "HttpError",
    "HttpTimeout",
    "InvalidURL",
    "NetworkError",
    "PoolTimeout",
    "ReadError",
    "ReadTimeout",
    "RemoteProtocolError",
    "Response",
    "Timeout",
    "UnsupportedProtocol",
    "WriteError",
    "WriteTimeout",
]
