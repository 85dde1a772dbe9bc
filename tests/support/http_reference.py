"""Feeding the same response bytes, read by read, to lpxtop's HTTP client and to h11 (the reference).

`ours(pieces, method)` runs lpxtop's client on a real connection (a socket pair: a real transport on
the test's event loop) and hands it each piece as one socket read (the protocol's `data_received`),
letting the loop run between pieces as it would between reads, then ends the stream with a real EOF.
`reference(pieces, method)` gives h11 the same pieces. Both return an `Outcome`: status, headers, body
bytes per read (the index of the piece whose arrival handed them over), and whether the body was
complete, or the error. Used by `test_http_differential.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from dataclasses import dataclass, field

import h11

from lpxtop.http import HttpClient, HttpError, Response
from lpxtop.http.connection import Connection, StreamProtocol

CASE_TIMEOUT_S = 5.0  # a case that takes longer is a hang


@dataclass
class Outcome:
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    per_read: dict[int, bytes] = field(default_factory=dict)  # piece index -> body bytes handed over on it
    complete: bool = False
    error: str | None = None

    @property
    def body(self) -> bytes:
        return b"".join(self.per_read[i] for i in sorted(self.per_read))


def reference(pieces: list[bytes], method: str = "GET") -> Outcome:
    """What h11 makes of `pieces` (each one `receive_data` call), then the end of the stream."""
    out = Outcome()
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method=method, target="/", headers=[("Host", "example")]))
    conn.send(h11.EndOfMessage())
    try:
        for index, piece in enumerate([*pieces, b""]):  # b"": the end of the stream
            conn.receive_data(piece)
            while True:
                event = conn.next_event()
                if event in (h11.NEED_DATA, h11.PAUSED):
                    break
                if isinstance(event, h11.InformationalResponse):
                    continue
                if isinstance(event, h11.Response):
                    out.status = event.status_code
                    for name, value in event.headers:
                        key = name.decode("ascii")
                        text = value.decode("latin-1")
                        out.headers[key] = f"{out.headers[key]}, {text}" if key in out.headers else text
                elif isinstance(event, h11.Data):
                    out.per_read[index] = out.per_read.get(index, b"") + bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    out.complete = True
                    return out
                elif isinstance(event, h11.ConnectionClosed):
                    if out.status is None:
                        out.error = "closed before a response"
                    return out
    except h11.ProtocolError as exc:
        out.error = f"{type(exc).__name__}: {exc}"
    return out


async def _settle(task: asyncio.Task, protocol: StreamProtocol, response: Response | None) -> None:
    """Let the loop run until `task` is done or waits for the next read (with nothing left to decode)."""
    for _ in range(10_000):
        await asyncio.sleep(0)
        if task.done():
            return
        waiting = protocol.waiter is not None and not protocol.waiter.done()
        if waiting and (response is None or (response._continuation is None and response._marks is None)):
            return
    raise AssertionError("the client neither finished nor waited for more bytes")


async def ours(pieces: list[bytes], method: str = "GET") -> Outcome:
    """What lpxtop's client makes of `pieces`, each delivered as one socket read, then the end of the stream.
    A case that neither ends nor fails within CASE_TIMEOUT_S raises TimeoutError (a hang)."""
    return await asyncio.wait_for(_ours(pieces, method), CASE_TIMEOUT_S)


async def _ours(pieces: list[bytes], method: str) -> Outcome:
    out = Outcome()
    loop = asyncio.get_running_loop()
    near, far = socket.socketpair()
    near.setblocking(False)
    transport, protocol = await loop.create_connection(StreamProtocol, sock=near)
    conn = Connection(("http", "example", 80), transport, protocol)  # type: ignore[arg-type]
    client = HttpClient(trust_env=False, timeout=CASE_TIMEOUT_S)
    client._pool.open = 1  # this connection counts as one of the pool's
    stamps: dict[int, int] = {}
    response: Response | None = None
    head = asyncio.ensure_future(client._read_head(conn, method, CASE_TIMEOUT_S, None))
    body: asyncio.Future | None = None

    current = 0  # the piece being delivered: a sink called inside data_received() sees its stamp first

    def sink(data: bytes, stamp: int) -> bool:
        index = stamps.setdefault(stamp, current)
        out.per_read[index] = out.per_read.get(index, b"") + data
        return False

    try:
        for index, piece in enumerate(pieces):
            if head.done() and response is None:
                break
            if body is not None and body.done():
                break
            current = index
            protocol.data_received(piece)
            assert stamps.setdefault(protocol.arrived_ns, index) == index, "two reads with one stamp"
            if response is None:
                await _settle(head, protocol, None)
                if head.done() and head.exception() is None:
                    response = head.result()
                    out.status = response.status_code
                    out.headers = dict(response.headers)
                    body = asyncio.ensure_future(response.feed(sink))
                    await _settle(body, protocol, response)  # type: ignore[arg-type]
            else:
                await _settle(body, protocol, response)  # type: ignore[arg-type]
        far.close()  # the end of the stream, as a real EOF on the socket
        if response is None:
            response = await head
            out.status = response.status_code
            out.headers = dict(response.headers)
            body = asyncio.ensure_future(response.feed(sink))
        assert body is not None
        stopped = await body
        out.complete = not stopped and response.is_complete
    except HttpError as exc:
        out.error = f"{type(exc).__name__}: {exc}"
        out.complete = False
    finally:
        for task in (head, body):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if response is not None:
            await response.aclose()
        await client.aclose()
        transport.close()
        far.close()
    return out


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    """`data` cut at the given positions (sorted, deduplicated, empty pieces dropped)."""
    points = sorted({c for c in cuts if 0 < c < len(data)})
    pieces = []
    last = 0
    for point in points:
        pieces.append(data[last:point])
        last = point
    pieces.append(data[last:])
    return [p for p in pieces if p]
