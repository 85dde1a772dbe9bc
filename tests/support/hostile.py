"""A small hostile HTTP/1.1 server for tests: it answers each request with the bytes a test scripts.

Real loopback sockets, its own thread and event loop (so a test in another process, `lpxtop once`, can
probe it too). A `Reply` says the status, the headers, the body's pieces (each its own write, `gap_s`
apart), how the body is framed (chunked, Content-Length, or ended by closing) and whether the server
then holds the connection open without ending the body. The framing is written by hand, so a reply can
be anything a broken server or proxy sends.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    header_lines: tuple[str, ...] = ()  # as sent, every line (a repeated header is seen twice here)


@dataclass
class Reply:
    pieces: list[bytes] = field(default_factory=list)
    status: str = "200 OK"
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "text/event-stream"})
    framing: str = "chunked"  # "chunked" | "length" (Content-Length of all pieces) | "close"
    gap_s: float = 0.0  # pause after each piece
    hold_s: float = 0.0  # after the pieces: keep the connection open this long, the body unfinished
    length: int | None = None  # with framing "length": announce this instead of the pieces' size


class HostileServer:
    """`with HostileServer(reply) as server:` serves `server.url` (…/v1) until the block ends.

    `reply` is a Reply for every request, or a function of the Request that returns one. Every request
    is kept in `requests`.
    """

    def __init__(self, reply: Reply | Callable[[Request], Reply]) -> None:
        self._reply = reply
        self.requests: list[Request] = []
        self.writes_ns: list[int] = []  # perf_counter_ns just before each piece was written, all replies
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="hostile-server", daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> HostileServer:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0), self._loop
        ).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            assert self._server is not None
            self._server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, _, value = line.partition(":")
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                request = Request(method, path, headers, body, tuple(line for line in lines[1:] if line))
                self.requests.append(request)
                reply = self._reply(request) if callable(self._reply) else self._reply
                if not await self._answer(writer, reply):
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            self._writers.discard(writer)
            writer.transport.abort()

    async def _answer(self, writer: asyncio.StreamWriter, reply: Reply) -> bool:
        """Write one reply; True when the connection can serve another request."""
        head = [f"HTTP/1.1 {reply.status}"] + [f"{k}: {v}" for k, v in reply.headers.items()]
        if reply.framing == "chunked":
            head.append("Transfer-Encoding: chunked")
        elif reply.framing == "length":
            size = reply.length if reply.length is not None else sum(len(p) for p in reply.pieces)
            head.append(f"Content-Length: {size}")
        else:
            head.append("Connection: close")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        for piece in reply.pieces:
            self.writes_ns.append(time.perf_counter_ns())
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if reply.framing == "chunked" else piece)
            await writer.drain()
            if reply.gap_s:
                await asyncio.sleep(reply.gap_s)
        if reply.hold_s:
            await writer.drain()
            await asyncio.sleep(reply.hold_s)
            return False
        if reply.framing == "chunked":
            writer.write(b"0\r\n\r\n")
        await writer.drain()
        return reply.framing != "close" and (reply.framing != "length" or reply.length is None)
