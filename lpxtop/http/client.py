"""`HttpClient`: sends a request, follows its redirects, and reads the response's head.

The parts it puts together: a connection slot from the pool (`connector.Pool`) or a new connection
(`connector.Connector`, through a proxy from `proxies.py` when one applies), the request head
(`request.py`), the response head and its framing (`framing.py`), the `Response` that reads the body
(`response.py`), redirects (`redirects.py`), all within the request's `Timeout` (`timeouts.py`).
A request sent on a reused keep-alive connection that the server had closed (no byte of an answer
came) is sent once more on a new connection, POST included: nothing of it was processed.
"""

from __future__ import annotations

import asyncio
import json as _json
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from lpxtop.http.connection import Connection
from lpxtop.http.connector import Connector, Pool
from lpxtop.http.errors import (
    DecodingError,
    HttpError,
    NetworkError,
    PoolTimeout,
    ReadError,
    ReadTimeout,
    RedirectError,
    RemoteProtocolError,
    UnsupportedProtocol,
)
from lpxtop.http.framing import MAX_HEAD_BYTES, body_framing, find_head_end, parse_head
from lpxtop.http.proxies import ProxySettings
from lpxtop.http.redirects import (
    MAX_REDIRECTS,
    REDIRECT_STATUSES,
    next_url,
    strips_credentials,
    without_credentials,
)
from lpxtop.http.request import absolute_target, request_head, split_url
from lpxtop.http.response import Response
from lpxtop.http.timeouts import Budget, Timeout, bound, timeout_error

MAX_BODY_BYTES = 16 * 1024 * 1024  # what request()/get() read whole unless told otherwise
MAX_INTERIM = 32  # 1xx answers skipped before the final one
# The body of a redirect is read (to reuse the connection) up to this much, for at most this long.
_REDIRECT_DRAIN_BYTES = 64 * 1024
_REDIRECT_DRAIN_S = 1.0


class HttpClient:
    """Sends HTTP/1.1 requests over a bounded keep-alive pool. One per engine; close it with `aclose()`.

    `timeout`: default seconds (or a Timeout) for requests that give none. `ssl_context`: for https
    (default: `ssl.create_default_context()`, made on the first https request). Connections idle
    longer than `idle_expiry_s` are closed; at most `max_idle` are kept, `max_connections` open.
    `proxies`: {"http"/"https"/"all": proxy URL, "no": NO_PROXY list}; by default (`trust_env`) read
    from the environment once, here (see `proxies.py`).
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
        self._pool = Pool(max_connections, max_idle, idle_expiry_s)
        self._connector = Connector(ssl_context)
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
        (see `redirects.py`) unless `follow_redirects` is False. The caller must close the Response
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
        budget = None if limits.total is None else Budget(asyncio.get_running_loop(), limits.total)
        response = await self._exchange(method, url, headers, content, is_json, limits, budget, on_connect)
        if not follow_redirects or response.status_code not in REDIRECT_STATUSES:
            response.url = url
            return response
        return await self._follow(response, method, url, headers, content, is_json, limits, budget, on_connect,
                                  max_redirects)

    async def _follow(
        self, response: Response, method: str, url: str, headers: Mapping[str, str] | None, content: bytes | None,
        is_json: bool, limits: Timeout, budget: Budget | None, on_connect: Callable[[int], None] | None,
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
        limits: Timeout, budget: Budget | None, on_connect: Callable[[int], None] | None,
    ) -> Response:
        """One request and its response's head, on a pooled or new connection; sent once more on a new
        connection when a reused one fails before any byte of an answer came."""
        scheme, host, port, target, host_header = split_url(url)
        proxy = None if self._proxies is None else self._proxies.for_target(scheme, host, port)
        proxy_authorization = None
        if proxy is None:
            key: tuple[Any, ...] = (scheme, host, port)
        else:
            if proxy.error is not None:
                raise UnsupportedProtocol(proxy.error)
            if scheme == "http":  # absolute-form to the proxy, which any http target can share
                key = ("http", proxy.host, proxy.port, "proxy")
                target = absolute_target(url)
                proxy_authorization = proxy.authorization
            else:  # a CONNECT tunnel to the target
                key = (scheme, host, port, proxy.shown)
        request = request_head(method, target, host_header, headers, content, is_json, proxy_authorization)
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
                pool_limit = bound(limits.pool, budget)
                try:
                    conn = await pool.acquire(key, pool_limit, fresh=retried)
                except PoolTimeout:
                    raise timeout_error(PoolTimeout, f"no free connection ({pool.open} open)", pool_limit, budget) from None
                slot_ns = time.perf_counter_ns()
                waited_ns += slot_ns - began
                if conn is None:
                    try:
                        conn = await self._connector.open(key, scheme, host, port, proxy, limits.connect, budget)
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
                await conn.write(request, bound(limits.write, budget), budget)
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

    async def _read_head(self, conn: Connection, method: str, timeout: float | None, budget: Budget | None) -> Response:
        """Read the response's head: all of it within `timeout` (and the request's total), however trickled."""
        protocol = conn.protocol
        head_budget = None if timeout is None else Budget(conn.loop, timeout)
        if head_budget is None or (budget is not None and budget.deadline < head_budget.deadline):
            head_budget = budget
        interim = 0
        scanned = 0
        while True:
            buffer = protocol.buffer
            end, blank = find_head_end(buffer, scanned)
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
                wait = bound(timeout, head_budget)
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
            status, reason, version, headers = parse_head(head)
            if status < 100:
                raise RemoteProtocolError(f"malformed status line: status {status:03d}")
            framing, length, keep_alive = body_framing(method, status, version, headers)
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
