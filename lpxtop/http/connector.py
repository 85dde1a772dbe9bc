"""Where connections come from and where they wait: `Connector` opens them, `Pool` keeps them alive.

`Connector.open` connects directly (TCP, then TLS for https with `ssl.create_default_context()`,
verification on), to an http proxy, or through a proxy's `CONNECT` tunnel with TLS to the target inside
it; all of it within one connect deadline. `Pool` keeps HTTP/1.1 keep-alive connections per
(scheme, host, port) with a bound on open connections and an idle expiry; a request that finds every
connection busy waits for one within the pool timeout, and an idle connection the server has hung up
on is never handed out.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

from lpxtop.http.connection import Connection, StreamProtocol, time_out
from lpxtop.http.errors import (
    ConnectError,
    ConnectTimeout,
    HttpTimeout,
    PoolTimeout,
    ProxyError,
    RemoteProtocolError,
)
from lpxtop.http.framing import MAX_HEAD_BYTES, find_head_end, parse_head
from lpxtop.http.proxies import Proxy
from lpxtop.http.timeouts import Budget, Deadline, bound

# Like anyio's connect_tcp: try the next address if one has not connected within this many seconds.
_HAPPY_EYEBALLS_DELAY_S = 0.25


class Pool:
    """Keep-alive connections per (scheme, host, port); at most `max_connections` open in all."""

    def __init__(self, max_connections: int, max_idle: int, idle_expiry_s: float) -> None:
        self.max_connections = max(1, max_connections)
        self.max_idle = max(0, max_idle)
        self.idle_expiry_s = idle_expiry_s
        self.idle: dict[tuple[Any, ...], list[Connection]] = {}
        self.open = 0  # busy and idle together
        self.closed = False
        self._waiters: collections.deque[asyncio.Future[bool]] = collections.deque()
        self._sweeper: asyncio.TimerHandle | None = None
        self.waits = 0  # times a request found the pool full and waited (see HttpClient.pool_waits)

    @property
    def idle_count(self) -> int:
        return sum(len(conns) for conns in self.idle.values())

    def take_idle(self, key: tuple[Any, ...]) -> Connection | None:
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

    async def acquire(self, key: tuple[Any, ...], timeout: float | None, fresh: bool = False) -> Connection | None:
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
            handle = None if left is None else loop.call_later(max(0.0, left), time_out, waiter)
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

    def release(self, conn: Connection, reusable: bool) -> None:
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

    def _expire(self, conn: Connection) -> None:
        conns = self.idle.get(conn.key)
        if conns and conn in conns:
            conns.remove(conn)
            if not conns:
                del self.idle[conn.key]
            self._unidle(conn)
            self._drop(conn)

    def _unidle(self, conn: Connection) -> None:
        conn.protocol.on_idle_event = None

    def _drop(self, conn: Connection) -> None:
        if not conn.closed:
            conn.close()
            self.open -= 1
            self._wake_one()

    def _close_oldest_idle(self) -> bool:
        oldest: Connection | None = None
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


class Connector:
    """Opens the client's connections. `ssl_context`: for https (default: `ssl.create_default_context()`,
    made on the first https request)."""

    def __init__(self, ssl_context: Any = None) -> None:
        self._ssl_context = ssl_context

    async def open(
        self, key: tuple[Any, ...], scheme: str, host: str, port: int, proxy: Proxy | None, timeout: float | None,
        budget: Budget | None,
    ) -> Connection:
        """A new connection for `key`: direct, to an http proxy, or through a proxy's CONNECT tunnel."""
        limit = bound(timeout, budget)
        error: type[HttpTimeout] = ConnectTimeout
        try:
            with Deadline(limit, error):
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
    ) -> Connection:
        loop = asyncio.get_running_loop()
        protocol = StreamProtocol()
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
        return Connection(key, transport, protocol)  # type: ignore[arg-type]

    async def _tunnel(self, conn: Connection, host: str, port: int, proxy: Proxy, timeout: float | None) -> None:
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
            end, blank = find_head_end(protocol.buffer, scanned)
            if end >= 0:
                break
            scanned = max(0, len(protocol.buffer) - 2)
            if len(protocol.buffer) > MAX_HEAD_BYTES:
                raise ProxyError(f"the proxy {proxy.shown} sent an oversized answer to CONNECT", proxy=proxy.shown)
            if protocol.eof or protocol.lost:
                raise ProxyError(f"the proxy {proxy.shown} closed the connection instead of opening a tunnel to "
                                 f"{authority}", proxy=proxy.shown)
            await conn.wait(None)  # bounded by the Deadline around the whole connect
        head = bytes(protocol.buffer[:end])
        del protocol.buffer[: end + blank]
        try:
            status, reason, _, _ = parse_head(head)
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
