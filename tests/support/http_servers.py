"""Small hostile servers for the HTTP client's tests: real loopback sockets that send exactly the bytes
under test, a forward proxy, and TLS helpers. Everything listens on 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def raw_server(handle: Handler, accepted: list[int] | None = None,
                     ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    """A plain asyncio socket server on loopback running `handle(reader, writer)`; yields its port.

    `accepted` counts connections. On exit every accepted connection is closed.
    """
    writers: list[asyncio.StreamWriter] = []

    async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        if accepted is not None:
            accepted.append(1)
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, ssl.SSLError):
            await handle(reader, writer)

    server = await asyncio.start_server(tracked, "127.0.0.1", 0, ssl=ssl_context)
    try:
        async with server:
            yield server.sockets[0].getsockname()[1]
    finally:
        for writer in writers:
            writer.close()
        await asyncio.sleep(0.01)  # let the transports finish closing


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, dict[str, str], bytes]:
    """(request line, headers with lower-case names, body) of one request."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head[:-4].split(b"\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return lines[0], headers, body


def answer_each(response: bytes, seen: list | None = None) -> Handler:
    """A keep-alive handler that answers every request with `response` (and notes the requests in `seen`)."""

    async def handle(reader, writer):
        while True:
            request = await read_request(reader)
            if seen is not None:
                seen.append(request)
            writer.write(response)
            await writer.drain()

    return handle


def answer_once(response: bytes, seen: list | None = None) -> Handler:
    """Answers one request with `response`, then closes (what a server does after `Connection: close`)."""

    async def handle(reader, writer):
        request = await read_request(reader)
        if seen is not None:
            seen.append(request)
        writer.write(response)
        await writer.drain()
        writer.close()

    return handle


def trickle(head: bytes, body: bytes, every_s: float) -> Handler:
    """Answers one request with `head` at once, then `body` one byte every `every_s` seconds."""

    async def handle(reader, writer):
        await read_request(reader)
        writer.write(head)
        await writer.drain()
        for i in range(len(body)):
            await asyncio.sleep(every_s)
            writer.write(body[i : i + 1])
            await writer.drain()
        await reader.read()

    return handle


def sse_response(tokens: int = 4, gap_s: float = 0.0) -> list[bytes]:
    """The pieces of a minimal OpenAI-style streamed chat answer (chunked), `tokens` content chunks."""
    pieces = [b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"]
    events = [b'data: {"id":"r1","choices":[{"delta":{"role":"assistant","content":""}}]}\n\n']
    events += [b'data: {"id":"r1","choices":[{"delta":{"content":"t%d"}}]}\n\n' % i for i in range(tokens)]
    events.append(b'data: {"id":"r1","choices":[{"delta":{},"finish_reason":"length"}],'
                  b'"usage":{"prompt_tokens":3,"completion_tokens":%d,"total_tokens":%d}}\n\n' % (tokens, tokens + 3))
    events.append(b"data: [DONE]\n\n")
    pieces += [b"%x\r\n%s\r\n" % (len(e), e) for e in events]
    pieces.append(b"0\r\n\r\n")
    return pieces


@dataclass
class ForwardProxy:
    """An HTTP forward proxy on 127.0.0.1: absolute-form requests and CONNECT tunnels.

    `names` are the host names it resolves, all to 127.0.0.1 (e.g. "inference.internal"), so a target
    that only the proxy can reach stays on loopback. `seen` holds (request line, headers) of what it
    got; `refuse_connect` answers every CONNECT with that status instead.
    """

    names: tuple[str, ...] = ("inference.internal",)
    seen: list[tuple[bytes, dict[str, str]]] = field(default_factory=list)
    refuse_connect: int | None = None
    port: int = 0

    def _target(self, authority: str) -> tuple[str, int] | None:
        host, _, port = authority.rpartition(":")
        return ("127.0.0.1", int(port)) if host in self.names and port.isdigit() else None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                line, headers, body = await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            self.seen.append((line, headers))
            method, target, _ = line.decode("latin-1").split(" ", 2)
            if method == "CONNECT":
                await self._tunnel(target, reader, writer)
                return
            if not target.startswith("http://"):
                writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                continue
            authority, _, path = target[len("http://"):].partition("/")
            where = self._target(authority if ":" in authority else f"{authority}:80")
            if where is None:
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                continue
            host, port = where
            up_reader, up_writer = await asyncio.open_connection(host, port)
            request = f"{method} /{path} HTTP/1.1\r\n".encode()
            for name, value in headers.items():
                if name not in ("proxy-authorization", "connection"):
                    request += f"{name}: {value}\r\n".encode("latin-1")
            up_writer.write(request + b"Connection: close\r\n\r\n" + body)
            await up_writer.drain()
            answer = await up_reader.read()  # the upstream closes after one answer (Connection: close)
            up_writer.close()
            writer.write(answer)
            await writer.drain()
            writer.close()  # one request per client connection: the answer may be close-delimited
            return

    async def _tunnel(self, authority: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refuse_connect is not None:
            writer.write(b"HTTP/1.1 %d Refused\r\nProxy-Authenticate: Basic\r\nContent-Length: 0\r\n\r\n"
                         % self.refuse_connect)
            await writer.drain()
            return
        where = self._target(authority)
        if where is None:
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            return
        up_reader, up_writer = await asyncio.open_connection(*where)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ForwardProxy]:
        async with raw_server(self.handle) as port:
            self.port = port
            yield self


def make_certificate(where: Path, *names: str) -> tuple[Path, Path]:
    """A throwaway self-signed certificate for `names` (DNS names or IP addresses), by the openssl command."""
    import pytest

    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a test certificate")
    cert, key = where / "cert.pem", where / "key.pem"
    alt = ",".join(f"IP:{n}" if n.replace(".", "").isdigit() else f"DNS:{n}" for n in names)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", f"/CN={names[0]}",
         "-addext", f"subjectAltName={alt}"],
        check=True, capture_output=True, timeout=30,
    )
    return cert, key


def server_tls(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context
