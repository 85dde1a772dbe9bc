"""An httpcore network backend written directly on asyncio, for the engine's HTTP client.

httpcore's default backend goes through anyio: every read enters `anyio.fail_after` (a cancel scope),
asks sniffio which library runs, and crosses anyio's stream wrappers. The probe reads a streamed
response chunk by chunk, so that machinery was about a third of its CPU. Here a read is a look at a
buffer that an `asyncio.Protocol` fills; only when it is empty does the reader wait, on one future,
with one timer that ends the wait on timeout (no task, no cancel scope, no task cancellation). The
bytes are handed over in the task that awaits them, so the probe's timestamp follows their arrival
without an extra event-loop hop.

Failures are mapped as httpcore's anyio backend maps them (OSError -> ConnectError/ReadError/WriteError,
timeouts -> ConnectTimeout/ReadTimeout/WriteTimeout, `raise ... from` the original), so that
`lpxtop.engine.errors` finds the same causes (refused, dns, tls) in the chain.

`use_asyncio_backend(transport)` puts the backend under an `httpx.AsyncHTTPTransport`; when httpx or
httpcore internals are not as expected it changes nothing and the stock backend stays.
"""

from __future__ import annotations

import asyncio
import logging
import select
import ssl
import sys
from collections.abc import Iterable
from types import TracebackType
from typing import Any, cast

import httpcore
import httpx

log = logging.getLogger(__name__)

# Reading is paused while more than this is buffered and unread (only a stalled reader gets there).
_HIGH_WATER = 256 * 1024
_LOW_WATER = 64 * 1024
# Like anyio's connect_tcp: try the next address if one has not connected within this many seconds.
_HAPPY_EYEBALLS_DELAY_S = 0.25
# Python >= 3.11 tasks count cancellation requests, which tells our own from an outside one.
_TASKS_COUNT_CANCELS = sys.version_info >= (3, 11)

SocketOption = tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]


class _Deadline:
    """`with _Deadline(timeout, Error):` cancels the current task after `timeout` s and raises Error instead.

    For connecting and the TLS handshake, which await asyncio coroutines that only a cancellation can
    interrupt. One TimerHandle, no extra task (unlike `asyncio.wait_for`); works on Python 3.10, which
    has no `asyncio.timeout()`. A cancellation that is not this timer's propagates as CancelledError.
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
    """Collects what the transport receives until the stream's reader takes it; wakes a waiting reader."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.lost = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[bool] | None = None
        self.drain_waiter: asyncio.Future[bool] | None = None
        self.reading_paused = False
        self.writing_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > _HIGH_WATER and not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()
        self.wake()

    def eof_received(self) -> bool:
        self.eof = True
        self.wake()
        return False  # let the transport close its side too: HTTP/1.1 never half-closes

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.error = exc
        self.wake()
        self.writing_paused = False
        self._wake_drain()

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._wake_drain()

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def _wake_drain(self) -> None:
        waiter = self.drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def take(self, max_bytes: int) -> bytes:
        """Up to max_bytes of what is buffered (the buffer is not empty)."""
        buffer = self.buffer
        if len(buffer) <= max_bytes:
            data = bytes(buffer)
            buffer.clear()
        else:
            data = bytes(buffer[:max_bytes])
            del buffer[:max_bytes]
        if self.reading_paused and len(buffer) <= _LOW_WATER and self.transport is not None:
            self.reading_paused = False
            self.transport.resume_reading()
        return data


def _time_out(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


async def _wait(waiter: asyncio.Future[bool], timeout: float | None) -> bool:
    """Await a protocol's waiter; False when `timeout` passed first. A cancellation propagates."""
    if timeout is None:
        return await waiter
    handle = asyncio.get_running_loop().call_later(max(0.0, timeout), _time_out, waiter)
    try:
        return await waiter
    finally:
        handle.cancel()


class AsyncioStream(httpcore.AsyncNetworkStream):
    """One TCP (or TLS, or Unix socket) connection as httpcore sees it."""

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        protocol.transport = transport
        self._closed = False

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        protocol = self._protocol
        if protocol.buffer:  # already here: no waiting, no timer
            return protocol.take(max_bytes)
        if not (protocol.eof or protocol.lost or self._closed):
            waiter = protocol.waiter = asyncio.get_running_loop().create_future()
            try:
                arrived = await _wait(waiter, timeout)
            finally:
                protocol.waiter = None
            if not arrived:
                raise httpcore.ReadTimeout(f"no data within {timeout:g} s")
            if protocol.buffer:
                return protocol.take(max_bytes)
        if self._closed:
            raise httpcore.ReadError("the connection was closed")
        if protocol.error is not None:
            raise httpcore.ReadError(str(protocol.error) or type(protocol.error).__name__) from protocol.error
        return b""  # end of stream: httpcore decides whether that was expected

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        protocol = self._protocol
        if self._closed or protocol.lost or self._transport.is_closing():
            error = protocol.error
            raise httpcore.WriteError(str(error) if error else "the connection is closed") from error
        try:
            self._transport.write(buffer)
        except (OSError, RuntimeError) as exc:
            raise httpcore.WriteError(str(exc)) from exc
        if protocol.writing_paused:  # the kernel's send buffer is full: wait until it drains
            waiter = protocol.drain_waiter = asyncio.get_running_loop().create_future()
            try:
                drained = await _wait(waiter, timeout)
            finally:
                protocol.drain_waiter = None
            if not drained:
                raise httpcore.WriteTimeout(f"could not send within {timeout:g} s")
            if protocol.lost:
                error = protocol.error
                raise httpcore.WriteError(str(error) if error else "the connection was closed") from error

    async def aclose(self) -> None:
        self._closed = True
        self._protocol.wake()
        # close() sends what is queued (and TLS's close_notify) if the socket takes it at once; abort()
        # then drops the rest. httpcore is done with the connection: waiting on a stalled peer (TLS
        # shutdown waits up to 30 s for the peer's close_notify) would only hold a socket open.
        self._transport.close()
        self._transport.abort()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            with _Deadline(timeout, httpcore.ConnectTimeout):
                try:
                    tls = await loop.start_tls(
                        self._transport,
                        self._protocol,
                        ssl_context,
                        server_hostname=server_hostname,
                        # asyncio's own handshake limit (60 s by default) must not come first
                        ssl_handshake_timeout=None if timeout is None else timeout + 1.0,
                    )
                except TimeoutError as exc:
                    raise httpcore.ConnectTimeout(str(exc)) from exc
                except OSError as exc:  # ssl.SSLError included: errors.py looks for it in the chain
                    raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        except BaseException:
            self._transport.close()
            raise
        if tls is None:
            raise httpcore.ConnectError("the connection closed during the TLS handshake")
        return AsyncioStream(tls, self._protocol)

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return self._transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        if info == "socket":
            return self._transport.get_extra_info("socket")
        if info == "is_readable":
            # httpcore asks this of idle keep-alive connections: anything readable there means the server
            # hung up. The transport reads the socket as data comes, so ask the buffer first; then the
            # socket itself, since a hang-up the event loop has not polled yet is only in the kernel.
            protocol = self._protocol
            if protocol.buffer or protocol.eof or protocol.lost:
                return True
            return _socket_readable(self._transport.get_extra_info("socket"))
        return None


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


def _connect_error(exc: OSError) -> httpcore.ConnectError | httpcore.ConnectTimeout:
    if isinstance(exc, TimeoutError):
        return httpcore.ConnectTimeout(str(exc))
    return httpcore.ConnectError(str(exc) or type(exc).__name__)


def _apply_options(transport: asyncio.Transport, socket_options: Iterable[SocketOption] | None) -> None:
    if not socket_options:
        return
    sock = transport.get_extra_info("socket")
    try:
        for option in socket_options:
            sock.setsockopt(*option)
    except OSError as exc:
        transport.close()
        raise httpcore.ConnectError(str(exc)) from exc


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network layer on plain asyncio transports (TCP_NODELAY is asyncio's default)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        protocol = _Protocol()
        with _Deadline(timeout, httpcore.ConnectTimeout):
            try:
                transport, _ = await loop.create_connection(
                    lambda: protocol,
                    host,
                    port,
                    local_addr=(local_address, 0) if local_address else None,
                    happy_eyeballs_delay=_HAPPY_EYEBALLS_DELAY_S,
                )
            except OSError as exc:  # socket.gaierror and ConnectionRefusedError stay in the chain
                raise _connect_error(exc) from exc
        _apply_options(transport, socket_options)
        return AsyncioStream(transport, protocol)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[SocketOption] | None = None
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        protocol = _Protocol()
        with _Deadline(timeout, httpcore.ConnectTimeout):
            try:
                transport, _ = await loop.create_unix_connection(lambda: protocol, path)
            except OSError as exc:
                raise _connect_error(exc) from exc
        _apply_options(transport, socket_options)
        return AsyncioStream(transport, protocol)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def use_asyncio_backend(transport: httpx.AsyncHTTPTransport) -> bool:
    """Make `transport`'s connection pool connect through AsyncioBackend; True when it did.

    httpx offers no public way to choose httpcore's network backend, so this sets the pool's
    `_network_backend` (httpcore 1.x), which every new connection of the pool is given. That keeps
    every other setting of the pool as httpx made it (SSL context, limits, http1/http2, retries). If
    the attribute is not where expected, nothing is changed: the stock backend works, only slower.
    """
    pool = getattr(transport, "_pool", None)
    if type(pool) is not httpcore.AsyncConnectionPool:  # a proxy pool, or httpx changed
        return False
    if not isinstance(getattr(pool, "_network_backend", None), httpcore.AsyncNetworkBackend):
        log.debug("httpcore pool has no _network_backend; keeping the stock network backend")
        return False
    if getattr(pool, "connections", None):  # too late: existing connections keep the old backend's streams
        return False
    pool._network_backend = AsyncioBackend()
    return True


__all__ = ["AsyncioBackend", "AsyncioStream", "use_asyncio_backend"]
