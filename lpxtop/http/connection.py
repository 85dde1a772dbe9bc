"""One connection of the client: the `asyncio.Protocol` that stamps and buffers each read, and `Connection`.

`StreamProtocol.data_received` is the measurement: it stamps every read with `time.perf_counter_ns()`
before any parsing, then either hands the bytes to a feeding response (`Response.feed`: the sink runs
inside the read callback) or wakes the one task waiting for them. Reading pauses while more than
256 KiB wait unread. `Connection` holds the transport, the pool key and the read timer: one lazily
moved timer per connection rather than one per wait.
"""

from __future__ import annotations

import asyncio
import select
import time
from collections.abc import Callable
from typing import Any

from lpxtop.http.errors import HttpError, ReadError, RemoteProtocolError, WriteError, WriteTimeout
from lpxtop.http.timeouts import Budget, timeout_error

# Reading from the socket pauses while more than this is buffered and unread (only a stalled reader gets there).
_HIGH_WATER = 256 * 1024
_LOW_WATER = 64 * 1024


class StreamProtocol(asyncio.Protocol):
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


def time_out(waiter: asyncio.Future[bool]) -> None:
    """A timer's callback: wake `waiter` with False (timed out) unless something woke it first."""
    if not waiter.done():
        waiter.set_result(False)


class Connection:
    """One TCP (or TLS) connection, the pool key it belongs to, and its read timer.

    The read timeout is one lazily moved timer per connection rather than one per wait: a wait only
    moves the deadline, and the timer, when it fires early, re-arms itself at the deadline. A timer per
    wait (call_later, cancel) cost about as much as the wait itself.
    """

    __slots__ = ("key", "transport", "protocol", "loop", "deadline", "timer", "idle_since", "closed", "used")

    def __init__(self, key: tuple[Any, ...], transport: asyncio.Transport, protocol: StreamProtocol) -> None:
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
            return with_cause(ReadError(str(error) or type(error).__name__), error)
        return RemoteProtocolError("peer closed connection without sending complete message body")

    async def write(self, data: bytes, timeout: float | None, budget: Budget | None = None) -> None:
        protocol = self.protocol
        if protocol.lost or self.transport.is_closing():
            error = protocol.error
            raise with_cause(WriteError(str(error) if error else "the connection is closed"), error)
        try:
            self.transport.write(data)
        except (OSError, RuntimeError) as exc:
            raise WriteError(str(exc)) from exc
        if protocol.writing_paused:  # the kernel's send buffer is full: wait until it drains
            loop = self.loop
            waiter = protocol.drain_waiter = loop.create_future()
            handle = None if timeout is None else loop.call_later(max(0.0, timeout), time_out, waiter)
            try:
                drained = await waiter
            finally:
                protocol.drain_waiter = None
                if handle is not None:
                    handle.cancel()
            if not drained:
                raise timeout_error(WriteTimeout, "could not send", timeout, budget)
            if protocol.lost:
                error = protocol.error
                raise with_cause(WriteError(str(error) if error else "the connection was closed"), error)

    def clean(self) -> bool:
        """Nothing unread, no end of stream, no error: the connection can wait for another request."""
        protocol = self.protocol
        return not (self.closed or protocol.buffer or protocol.eof or protocol.lost or self.transport.is_closing())

    def reusable_when_idle(self) -> bool:
        """False when an idle connection has bytes, an end of stream or an error waiting (the server hung up)."""
        # A hang-up the event loop has not polled yet is only in the kernel: ask the socket too.
        return self.clean() and not socket_readable(self.transport.get_extra_info("socket"))

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


def with_cause(error: HttpError, cause: BaseException | None) -> HttpError:
    """`error`, raised `from` `cause` (the OSError or ssl error underneath: lpxtop/engine/probe/errors.py reads the chain)."""
    error.__cause__ = cause
    return error


def socket_readable(sock: Any) -> bool:
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
