"""A kept-alive connection the server closed just as a request went out: the race every
connection pool has. Sent once more on a new connection, POST included, and kept out of the timings."""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest

from lpxtop.engine.probe import run_probe
from lpxtop.http import HttpClient, ReadTimeout, RemoteProtocolError, Timeout
from tests.support.http_servers import raw_server, read_request, sse_response
from tests.support.sim import endpoint

pytestmark = pytest.mark.timeout(30)

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset (SO_LINGER 0) instead of a FIN."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def drops_second_request(answer: bytes | list[bytes], seen: list, *, how: str = "close", delay_s: float = 0.0,
                         partial: bytes = b""):
    """A server that answers the first request of each connection and, on a kept-alive connection,
    takes the second request and hangs up without answering it (after `delay_s`, having sent `partial`)."""
    pieces = answer if isinstance(answer, list) else [answer]

    async def handle(reader, writer):
        count = 0
        while True:
            line, _, body = await read_request(reader)
            count += 1
            seen.append((line, body, count))
            if count == 2:
                await asyncio.sleep(delay_s)
                if partial:
                    writer.write(partial)
                    await writer.drain()
                reset(writer) if how == "reset" else writer.close()
                return
            for piece in pieces:
                writer.write(piece)
                await writer.drain()

    return handle


@pytest.mark.parametrize("how", ["close", "reset"])
@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_a_request_on_a_stale_connection_is_sent_once_more(method, how):
    seen: list = []
    accepted: list[int] = []
    async with raw_server(drops_second_request(OK, seen, how=how), accepted) as port, HttpClient(timeout=5.0) as client:
        url = f"http://127.0.0.1:{port}/x"
        first = await client.request(method, url, json={"n": 1} if method == "POST" else None)
        second = await client.request(method, url, json={"n": 2} if method == "POST" else None)
        assert (first.content, second.content) == (b"ok", b"ok")
        assert not first.retried and second.retried and client.retries == 1
    assert len(accepted) == 2
    assert [count for _, _, count in seen] == [1, 2, 1], "dropped on the old connection, answered on a new one"
    if method == "POST":
        assert [body for _, body, _ in seen] == [b'{"n":1}', b'{"n":2}', b'{"n":2}']


async def test_no_second_attempt_once_the_answer_had_begun():
    seen: list = []
    server = drops_second_request(OK, seen, partial=b"HTTP/1.1 200 OK\r\nContent-Le")
    async with raw_server(server) as port, HttpClient(timeout=5.0) as client:
        await client.get(f"http://127.0.0.1:{port}/")
        with pytest.raises(RemoteProtocolError):
            await client.get(f"http://127.0.0.1:{port}/")
    assert len(seen) == 2, "an answer had begun: the server may have acted on the request"


async def test_no_second_attempt_on_a_new_connection():
    seen: list = []

    async def hang_up(reader, writer):
        seen.append(await read_request(reader))
        writer.close()

    async with raw_server(hang_up) as port, HttpClient(timeout=5.0) as client:
        with pytest.raises(RemoteProtocolError, match="without sending a response"):
            await client.post(f"http://127.0.0.1:{port}/", json={})
    assert len(seen) == 1


async def test_no_second_attempt_after_a_timeout():
    seen: list = []

    async def first_then_silence(reader, writer):
        count = 0
        while True:
            seen.append(await read_request(reader))
            count += 1
            if count == 1:
                writer.write(OK)
                await writer.drain()

    async with raw_server(first_then_silence) as port, HttpClient() as client:
        await client.get(f"http://127.0.0.1:{port}/")
        with pytest.raises(ReadTimeout):
            await client.get(f"http://127.0.0.1:{port}/", timeout=Timeout(1.0, 0.3, 1.0, 1.0))
    assert len(seen) == 2, "a server that is slow to answer may be working on it: not sent twice"


async def test_a_probe_on_a_stale_connection_succeeds_and_its_timing_leaves_out_the_failed_attempt():
    # The stale connection takes 300 ms to fail; the answer on the new connection comes at once.
    seen: list = []
    server = drops_second_request(sse_response(tokens=3), seen, delay_s=0.3)
    async with raw_server(server) as port, HttpClient(timeout=5.0) as client:
        ep = endpoint(f"http://127.0.0.1:{port}/v1", model="m", max_tokens=3)
        first = await run_probe(client, ep)
        began = time.perf_counter_ns()
        second = await run_probe(client, ep)
        took_ms = (time.perf_counter_ns() - began) / 1e6
    assert first.ok and second.ok, (first.error_text, second.error_text)
    assert took_ms >= 280, "the failed attempt did happen"
    assert second.ttft_ms < 150, f"TTFT {second.ttft_ms:.0f} ms counts the failed attempt"
    assert second.start_ns - began > 250e6, "the probe's clock starts with the attempt that succeeded"
