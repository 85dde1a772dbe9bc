"""lpxtop's HTTP/1.1 client (lpxtop/http/) against real loopback servers.

Every case is a real server (the sim, or a raw asyncio/socket server that sends exactly the bytes
under test) and a real connection. Expected bodies and statuses are written out by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from lpxtop.engine.probe import run_probe
from lpxtop.engine.probe.errors import classify_exception
from lpxtop.engine.runner import Engine, EngineSettings
from lpxtop.http import (
    BodyTooLarge,
    ConnectError,
    ConnectTimeout,
    HttpClient,
    InvalidURL,
    PoolTimeout,
    ReadError,
    ReadTimeout,
    RemoteProtocolError,
    Timeout,
    UnsupportedProtocol,
    WriteError,
    timeouts,
)
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.http_servers import Handler, answer_each, raw_server, read_request
from tests.support.ports import free_port
from tests.support.sim import endpoint

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(scope="module")
def sim():
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=2, api_key=None)) as handle:
        yield handle


async def silent(reader, writer):
    """Answers nothing until the client hangs up."""
    await reader.read()
    writer.close()


@contextlib.contextmanager
def full_backlog():
    """A port whose listener never accepts and whose backlog is full: connecting to it hangs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = []
    try:
        for _ in range(8):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(listener.getsockname())
            fillers.append(s)
        time.sleep(0.1)
        yield listener.getsockname()[1]
    finally:
        for s in fillers:
            s.close()
        listener.close()


def chain(exc: BaseException | None) -> list[BaseException]:
    links = []
    while exc is not None:
        links.append(exc)
        exc = exc.__cause__ or exc.__context__
    return links


CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"6\r\ndata: \r\n"
    b"C;name=value\r\n{\"a\": \"b\"}\n\n\r\n"
    b"1a\r\ndata: [DONE]\n\ndata: more\n\n\r\n"
    b"0\r\nX-Trailer: yes\r\n\r\n"
)
CHUNKED_BODY = b'data: {"a": "b"}\n\ndata: [DONE]\n\ndata: more\n\n'


def in_two_writes(first: bytes, second: bytes, *, pause: float = 0.05, close: bool = False) -> Handler:
    """Answers one request with `first`, then `second` after `pause` s (then hangs up if `close`)."""

    async def handle(reader, writer):
        await read_request(reader)
        writer.write(first)
        await writer.drain()
        await asyncio.sleep(pause)
        writer.write(second)
        await writer.drain()
        if close:
            writer.close()

    return handle


# A chunked stream whose second read comes 0.2 s after its first.
TWO_PARTS = in_two_writes(
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\none\r\n", b"3\r\ntwo\r\n0\r\n\r\n", pause=0.2
)


async def split_at_growing_cut(reader, writer):
    """Keep-alive: the n-th response comes as CHUNKED[:n] then, once the client has read it, the rest."""
    cut = 1
    while True:
        await read_request(reader)
        writer.write(CHUNKED[:cut])
        await writer.drain()
        await asyncio.sleep(0.002)  # the client reads the first part before the second is sent
        writer.write(CHUNKED[cut:])
        await writer.drain()
        cut += 1


# --- framing ------------------------------------------------------------------------------------------


async def test_chunked_framing_split_at_every_byte_boundary():
    """Each response arrives in two writes split at one position, on one keep-alive connection."""
    accepted: list[int] = []

    async with raw_server(split_at_growing_cut, accepted) as port, HttpClient(timeout=5.0) as client:
        for cut in range(1, len(CHUNKED)):
            response = await client.stream("GET", f"http://127.0.0.1:{port}/")
            assert response.status_code == 200, cut
            assert response.headers["content-type"] == "text/event-stream"
            pieces = [piece async for piece in response.aiter_raw()]
            assert b"".join(pieces) == CHUNKED_BODY, cut
            assert response.is_complete
    assert len(accepted) == 1, "every fully read body gave its connection back"


async def test_chunked_framing_one_byte_per_write():
    async def trickle(reader, writer):
        await read_request(reader)
        for i in range(len(CHUNKED)):
            writer.write(CHUNKED[i : i + 1])
            await writer.drain()
            await asyncio.sleep(0)

    async with raw_server(trickle) as port, HttpClient(timeout=5.0) as client:
        response = await client.get(f"http://127.0.0.1:{port}/")
        assert response.content == CHUNKED_BODY
        assert client.idle_connections == 1


async def test_arrival_time_is_the_read_that_brought_the_bytes():
    async with raw_server(TWO_PARTS) as port, HttpClient(timeout=5.0) as client:
        response = await client.stream("GET", f"http://127.0.0.1:{port}/")
        assert await response.receive() == b"one"
        first = response.arrived_ns
        await asyncio.sleep(0.3)  # the second part is in the buffer well before it is asked for
        taken = time.perf_counter_ns()
        assert await response.receive() == b"two"
        assert 0.15e9 < response.arrived_ns - first < taken - first
        assert await response.receive() == b""


@pytest.mark.parametrize(
    ("response", "body", "reused"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", b"hello", True),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", b"", True),
        (b"HTTP/1.1 204 No Content\r\n\r\n", b"", True),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", b"ok", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", b"ok", False),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok", b"ok", True),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", b"ok", True),
        (b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok", b"ok", True),
    ],
)
async def test_bodies_and_keepalive(response, body, reused):
    accepted: list[int] = []
    async with raw_server(answer_each(response), accepted) as port, HttpClient(timeout=5.0) as client:
        for _ in range(2):
            got = await client.get(f"http://127.0.0.1:{port}/")
            assert got.content == body
            assert got.status_code in (200, 204)
            await asyncio.sleep(0.05)
    assert len(accepted) == (1 if reused else 2)


async def test_a_close_delimited_body_ends_when_the_server_closes():
    close_delimited = in_two_writes(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of ", b"it", close=True)
    async with raw_server(close_delimited) as port, HttpClient(timeout=5.0) as client:
        response = await client.get(f"http://127.0.0.1:{port}/")
        assert response.text == "all of it"
        assert client.open_connections == 0


async def test_a_response_with_bytes_beyond_its_length_is_not_reused():
    accepted: list[int] = []
    extra = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokJUNK"
    async with raw_server(answer_each(extra), accepted) as port, HttpClient(timeout=5.0) as client:
        for _ in range(2):
            assert (await client.get(f"http://127.0.0.1:{port}/")).content == b"ok"
    assert len(accepted) == 2


# --- broken servers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (b"garbage\r\n\r\n", RemoteProtocolError),
        (b"HTTP/1.1 2000 OK\r\n\r\n", RemoteProtocolError),
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", RemoteProtocolError),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", RemoteProtocolError),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", RemoteProtocolError),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n", RemoteProtocolError),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", RemoteProtocolError),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nok\r\n0\r\n\r\n", RemoteProtocolError),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokay\r\n0\r\n\r\n", RemoteProtocolError),
        # CRLF is required in the chunked framing, as by h11 (test_http_differential.py holds us to it)
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\nok\n0\n\n", RemoteProtocolError),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1" * 2000, RemoteProtocolError),
        (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n", RemoteProtocolError),
        (b"HTTP/1.1 200 OK\r\nX: y\r\n" * 1 + b"X: y\r\n" * 300 + b"\r\n", RemoteProtocolError),
    ],
)
async def test_a_broken_response_is_a_protocol_error(response, error):
    async def broken(reader, writer):
        await read_request(reader)
        writer.write(response)
        await writer.drain()
        await reader.read()

    async with raw_server(broken) as port, HttpClient(timeout=2.0) as client:
        with pytest.raises(error):
            await client.get(f"http://127.0.0.1:{port}/")
        assert client.open_connections == 0, "a broken connection is closed, not kept"


@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
        b"HTTP/1.1 200 OK\r\nContent-",
        b"",
    ],
)
async def test_a_server_that_closes_mid_response(response):
    async def cut(reader, writer):
        await read_request(reader)
        writer.write(response)
        await writer.drain()
        writer.close()

    async with raw_server(cut) as port, HttpClient(timeout=2.0) as client:
        with pytest.raises(RemoteProtocolError) as caught:
            await client.get(f"http://127.0.0.1:{port}/")
        assert client.open_connections == 0
    kind, message = classify_exception(caught.value, started_stream=bool(response))
    assert kind == "stream_cut", message


async def test_a_reset_connection_is_a_read_error_with_the_reset_in_its_chain():
    async def reset(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await writer.drain()
        await asyncio.sleep(0.05)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    async with raw_server(reset) as port, HttpClient(timeout=2.0) as client:
        response = await client.stream("GET", f"http://127.0.0.1:{port}/")
        assert await response.receive() == b"partial"
        with pytest.raises(ReadError) as caught:
            await response.receive()
        assert any(isinstance(link, ConnectionResetError) for link in chain(caught.value))
        assert client.open_connections == 0


async def test_a_stalled_server_is_a_read_timeout():
    async with raw_server(silent) as port, HttpClient() as client:
        began = time.monotonic()
        with pytest.raises(ReadTimeout):
            await client.get(f"http://127.0.0.1:{port}/", timeout=Timeout(connect=2.0, read=0.3, write=2.0, pool=2.0))
        assert 0.25 < time.monotonic() - began < 1.5
        assert client.open_connections == 0

    async def stall_mid_body(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        await writer.drain()
        await reader.read()

    async with raw_server(stall_mid_body) as port, HttpClient(timeout=0.3) as client:
        response = await client.stream("GET", f"http://127.0.0.1:{port}/")
        assert await response.receive() == b"abc"
        with pytest.raises(ReadTimeout):
            await response.receive()
        await response.aclose()
        assert client.open_connections == 0


async def test_refused_port_is_a_connect_error_from_connection_refused():
    async with HttpClient() as client:
        with pytest.raises(ConnectError) as caught:
            await client.get(f"http://127.0.0.1:{free_port()}/")
        assert any(isinstance(link, ConnectionRefusedError) for link in chain(caught.value))
        assert classify_exception(caught.value, started_stream=False)[0] == "refused"
        assert client.open_connections == 0


async def test_connect_timeout():
    with full_backlog() as port:
        async with HttpClient() as client:
            began = time.monotonic()
            with pytest.raises(ConnectTimeout):
                await client.get(f"http://127.0.0.1:{port}/", timeout=Timeout(connect=0.3))
            assert time.monotonic() - began < 1.5
            assert client.open_connections == 0
    if sys.version_info >= (3, 11):
        assert asyncio.current_task().cancelling() == 0, "the timer's cancellation was undone"


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("ftp://127.0.0.1/", UnsupportedProtocol),
        ("127.0.0.1:8000/v1", UnsupportedProtocol),
        ("http:///v1", InvalidURL),
        ("http://127.0.0.1:99999/", InvalidURL),
        ("http://127.0.0.1:80/a b", InvalidURL),
    ],
)
async def test_bad_urls(url, error):
    async with HttpClient() as client:
        with pytest.raises(error):
            await client.get(url)


async def test_a_header_with_a_line_break_is_refused_before_sending():
    async with HttpClient() as client:
        with pytest.raises(InvalidURL):
            await client.get("http://127.0.0.1:9/", headers={"X-Evil": "a\r\nHost: elsewhere"})


# --- the request on the wire --------------------------------------------------------------------------


async def test_what_is_sent():
    seen: list[tuple[bytes, dict[str, str], bytes]] = []

    async def record(reader, writer):
        while True:
            seen.append(await read_request(reader))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()

    async with raw_server(record) as port, HttpClient() as client:
        await client.post(
            f"http://127.0.0.1:{port}/v1/chat/completions?x=1",
            json={"model": "m", "text": "é"},
            headers={"Authorization": "Bearer k", "accept": "text/event-stream", "Content-Length": "999"},
        )
        await client.get(f"http://127.0.0.1:{port}")
    (line, headers, body), (get_line, get_headers, _) = seen
    assert line == b"POST /v1/chat/completions?x=1 HTTP/1.1"
    assert headers["host"] == f"127.0.0.1:{port}"
    assert headers["authorization"] == "Bearer k"
    assert headers["accept"] == "text/event-stream"
    assert headers["accept-encoding"] == "identity"
    assert headers["content-type"] == "application/json"
    assert headers["content-length"] == str(len(body))
    assert body == '{"model":"m","text":"é"}'.encode()
    assert get_line == b"GET / HTTP/1.1"
    assert "content-length" not in get_headers
    assert get_headers["accept"] == "*/*"


# --- the pool -----------------------------------------------------------------------------------------


async def test_a_fully_read_body_reuses_the_connection_and_a_half_read_one_does_not():
    accepted: list[int] = []
    long_body = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nabcdef"

    async def slow_second_half(reader, writer):
        while True:
            await read_request(reader)
            writer.write(long_body[:-3])
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(long_body[-3:])
            await writer.drain()

    async with raw_server(slow_second_half, accepted) as port, HttpClient(timeout=5.0) as client:
        url = f"http://127.0.0.1:{port}/"
        assert (await client.get(url)).content == b"abcdef"
        assert (await client.get(url)).content == b"abcdef"
        assert len(accepted) == 1 and client.idle_connections == 1
        response = await client.stream("GET", url)
        assert await response.receive() == b"abc"
        await response.aclose()  # half read: the connection cannot carry another request
        assert client.open_connections == 0
        assert (await client.get(url)).content == b"abcdef"
    assert len(accepted) == 2


async def test_the_pool_bound():
    accepted: list[int] = []
    async with raw_server(answer_each(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"), accepted) as port:
        async with HttpClient(max_connections=2, timeout=Timeout(connect=2.0, read=2.0, write=2.0, pool=0.3)) as client:
            url = f"http://127.0.0.1:{port}/"
            first = await client.stream("GET", url)
            second = await client.stream("GET", url)
            began = time.monotonic()
            with pytest.raises(PoolTimeout):
                await client.stream("GET", url)
            assert 0.25 < time.monotonic() - began < 1.5
            waiting = asyncio.ensure_future(client.get(url))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            assert await first.read() == b"ok"  # its connection goes back to the pool: the waiter takes it
            assert (await asyncio.wait_for(waiting, 2.0)).content == b"ok"
            await second.aclose()
            assert client.open_connections == 1
        # An idle connection to another server is closed to make room.
        other_answer = answer_each(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n2")
        async with raw_server(other_answer) as other, HttpClient(max_connections=1, timeout=2.0) as client:
            assert (await client.get(f"http://127.0.0.1:{port}/")).content == b"ok"
            assert (await client.get(f"http://127.0.0.1:{other}/")).content == b"2"
            assert client.open_connections == 1
    assert len(accepted) == 3


async def test_idle_connections_expire():
    closed = asyncio.Event()

    async def one(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await reader.read()  # returns when the client closes
        closed.set()

    async with raw_server(one) as port, HttpClient(idle_expiry_s=0.2, timeout=2.0) as client:
        await client.get(f"http://127.0.0.1:{port}/")
        assert client.idle_connections == 1
        await asyncio.wait_for(closed.wait(), 2.0)
        assert client.idle_connections == 0 and client.open_connections == 0


async def test_a_keepalive_connection_the_server_closed_is_not_reused():
    accepted: list[int] = []

    async def one_then_close(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.close()  # idle keep-alive connection closed by the server

    async with raw_server(one_then_close, accepted) as port, HttpClient(timeout=2.0) as client:
        for _ in range(3):
            assert (await client.get(f"http://127.0.0.1:{port}/")).text == "ok"
            await asyncio.sleep(0.2)
            assert client.open_connections == 0, "the hang-up removed it from the pool at once"
    assert len(accepted) == 3


async def test_a_hangup_the_loop_has_not_read_yet_is_seen_before_reuse():
    """The server is a thread; the test blocks the loop (time.sleep) while the hang-up arrives, so the
    kernel knows of it and the protocol does not: the reuse check must ask the socket."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted: list[int] = []

    def serve() -> None:
        for _ in range(2):
            conn, _ = listener.accept()
            accepted.append(1)
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                if len(accepted) == 1:
                    time.sleep(0.1)  # the client has put the connection in its pool
                    continue  # and now it closes
                conn.recv(1)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        async with HttpClient(timeout=2.0) as client:
            assert (await client.get(f"http://127.0.0.1:{port}/")).text == "ok"
            time.sleep(0.3)  # blocks the loop: the hang-up is in the kernel, not yet in the protocol
            assert (await client.get(f"http://127.0.0.1:{port}/")).text == "ok"
        assert len(accepted) == 2
    finally:
        await asyncio.to_thread(server.join, 3.0)  # the loop runs meanwhile: the client's close reaches the socket
        listener.close()
    assert not server.is_alive()  # the server saw the second connection closed


async def test_large_bodies_both_ways_and_read_caps():
    size = 8 * 1024 * 1024

    async def echo_size(reader, writer):
        while True:
            _, _, body = await read_request(reader)
            await asyncio.sleep(0.05)  # a slow reader: the client's sends must wait for the buffer to drain
            reply = b"y" * len(body)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(reply) + reply)
            await writer.drain()

    async with raw_server(echo_size) as port, HttpClient(timeout=10.0) as client:
        url = f"http://127.0.0.1:{port}/"
        response = await client.post(url, content=b"x" * size)
        assert response.status_code == 200 and response.content == b"y" * size
        with pytest.raises(BodyTooLarge):
            await client.post(url, content=b"x" * 100_000, max_bytes=1000)
        response = await client.stream("POST", url, content=b"x" * 5000)
        assert await response.read(100, truncate=True) == b"y" * 100
        assert client.open_connections <= 1


async def test_discard_reads_the_rest_so_the_connection_is_reused():
    accepted: list[int] = []
    async with raw_server(answer_each(CHUNKED), accepted) as port, HttpClient(timeout=2.0) as client:
        for _ in range(3):
            response = await client.stream("GET", f"http://127.0.0.1:{port}/")
            assert await response.discard(65536, 0.5)
    assert len(accepted) == 1


# --- feed(): the body handed over inside the read callback --------------------------------------------


def collector(pieces: list[tuple[bytes, int]], stop_after: bytes | None = None) -> Callable[[bytes, int], bool]:
    def sink(data: bytes, t_ns: int) -> bool:
        pieces.append((data, t_ns))
        return stop_after is not None and stop_after in b"".join(p for p, _ in pieces)

    return sink


async def test_feed_hands_over_the_same_bytes_as_receive_at_every_split():
    """As the receive() test above: each response arrives in two writes split at one position."""
    accepted: list[int] = []

    async with raw_server(split_at_growing_cut, accepted) as port, HttpClient(timeout=5.0) as client:
        for cut in range(1, len(CHUNKED)):
            response = await client.stream("GET", f"http://127.0.0.1:{port}/")
            pieces: list[tuple[bytes, int]] = []
            assert await response.feed(collector(pieces)) is False, cut
            assert b"".join(p for p, _ in pieces) == CHUNKED_BODY, cut
            assert all(p for p, _ in pieces), "no empty pieces"
            stamps = [t for _, t in pieces]
            assert stamps == sorted(stamps)
            assert response.is_complete
    assert len(accepted) == 1, "every fed body gave its connection back"


async def test_feed_stamps_each_piece_with_its_own_read():
    async with raw_server(TWO_PARTS) as port, HttpClient(timeout=5.0) as client:
        before = time.perf_counter_ns()
        response = await client.stream("GET", f"http://127.0.0.1:{port}/")
        pieces: list[tuple[bytes, int]] = []
        assert await response.feed(collector(pieces)) is False
        assert [p for p, _ in pieces] == [b"one", b"two"]
        assert before <= pieces[0][1] and 0.15e9 < pieces[1][1] - pieces[0][1] < 0.5e9
        assert response.arrived_ns == pieces[1][1]


@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n",
    ],
)
async def test_feed_of_a_body_that_came_with_the_head(response):
    accepted: list[int] = []
    async with raw_server(answer_each(response), accepted) as port, HttpClient(timeout=2.0) as client:
        for _ in range(2):
            got = await client.stream("GET", f"http://127.0.0.1:{port}/")
            pieces: list[tuple[bytes, int]] = []
            assert await got.feed(collector(pieces)) is False
            assert b"".join(p for p, _ in pieces) == b"hello"
    assert len(accepted) == 1


async def test_feed_of_a_close_delimited_body():
    async with raw_server(in_two_writes(b"HTTP/1.1 200 OK\r\n\r\nabc", b"def", close=True)) as port, HttpClient(timeout=2.0) as client:
        response = await client.stream("GET", f"http://127.0.0.1:{port}/")
        pieces: list[tuple[bytes, int]] = []
        assert await response.feed(collector(pieces)) is False
        assert b"".join(p for p, _ in pieces) == b"abcdef"
        assert response.is_complete


async def test_a_sink_that_stops_early_leaves_the_rest_for_discard():
    accepted: list[int] = []
    async with raw_server(answer_each(CHUNKED), accepted) as port, HttpClient(timeout=2.0) as client:
        for _ in range(3):
            response = await client.stream("GET", f"http://127.0.0.1:{port}/")
            pieces: list[tuple[bytes, int]] = []
            assert await response.feed(collector(pieces, stop_after=b"[DONE]")) is True
            assert b"[DONE]" in b"".join(p for p, _ in pieces)
            assert await response.discard(65536, 0.5)
    assert len(accepted) == 1, "the rest was read, so the connection went back to the pool"


async def test_what_a_sink_raises_is_raised_by_feed_and_the_connection_is_closed():
    stream_head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"

    async def slow(reader, writer):
        await read_request(reader)
        writer.write(stream_head + b"3\r\nbad\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"4\r\nmore\r\n0\r\n\r\n")
        await writer.drain()
        await reader.read()

    def refuse(data: bytes, t_ns: int) -> bool:
        raise ValueError(f"cannot take {data!r}")

    async with raw_server(slow) as port, HttpClient(timeout=2.0) as client:
        async with await client.stream("GET", f"http://127.0.0.1:{port}/") as response:
            with pytest.raises(ValueError, match="cannot take b'bad'"):
                await response.feed(refuse)
        assert client.open_connections == 0


async def test_feed_of_a_broken_or_cut_stream():
    first = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n"
    broken = in_two_writes(first, b"zz\r\n")
    cut = in_two_writes(first, b"", close=True)

    for handler in (broken, cut):
        async with raw_server(handler) as port, HttpClient(timeout=2.0) as client:
            pieces: list[tuple[bytes, int]] = []
            async with await client.stream("GET", f"http://127.0.0.1:{port}/") as response:
                with pytest.raises(RemoteProtocolError):
                    await response.feed(collector(pieces))
            assert [p for p, _ in pieces] == [b"ok"], handler
            assert client.open_connections == 0


async def test_feed_times_out_only_when_no_bytes_come_for_the_read_timeout():
    async def trickle_then_stall(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(8):  # 0.8 s in all, each gap well inside the 0.3 s read timeout
            writer.write(b"1\r\nx\r\n")
            await writer.drain()
            await asyncio.sleep(0.1)
        await reader.read()

    # Per-read limits only: a plain number would also bound the whole request (Timeout.total).
    async with raw_server(trickle_then_stall) as port, HttpClient(timeout=Timeout(0.3, 0.3, 0.3, 0.3)) as client:
        response = await client.stream("GET", f"http://127.0.0.1:{port}/")
        pieces: list[tuple[bytes, int]] = []
        began = time.monotonic()
        with pytest.raises(ReadTimeout):
            await response.feed(collector(pieces))
        took = time.monotonic() - began
        assert len(pieces) == 8
        assert 0.9 < took < 2.0, took
        await response.aclose()
        assert client.open_connections == 0


async def test_feed_cancelled_from_outside_leaves_no_callback_behind():
    async def trickle(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        with contextlib.suppress(OSError):
            for _ in range(100):
                writer.write(b"1\r\nx\r\n")
                await writer.drain()
                await asyncio.sleep(0.01)

    async with raw_server(trickle) as port, HttpClient(timeout=2.0) as client:
        response = await client.stream("GET", f"http://127.0.0.1:{port}/")
        protocol = response._conn.protocol
        pieces: list[tuple[bytes, int]] = []
        task = asyncio.ensure_future(response.feed(collector(pieces)))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert protocol.on_data is None and protocol.waiter is None
        taken = len(pieces)
        await asyncio.sleep(0.05)
        assert len(pieces) == taken, "nothing is handed over once feed() is gone"
        await response.aclose()
        assert client.open_connections == 0


# --- cancellation -------------------------------------------------------------------------------------


async def cancel_a_get_after(client: HttpClient, port: int, seconds: float = 0.1) -> None:
    """Start a GET, cancel it from outside after `seconds`: the cancellation comes out, no connection stays."""
    task = asyncio.ensure_future(client.get(f"http://127.0.0.1:{port}/"))
    await asyncio.sleep(seconds)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert client.open_connections == 0


async def test_an_outside_cancellation_propagates_and_closes_the_connection():
    async with raw_server(silent) as port, HttpClient(timeout=5.0) as client:
        await cancel_a_get_after(client, port)  # waiting for the answer
    with full_backlog() as port:
        async with HttpClient(timeout=3.0) as client:
            await cancel_a_get_after(client, port)  # waiting for the connection


@pytest.mark.parametrize("counts", [True, False], ids=["counted", "python3.10"])
async def test_deadline_tells_its_own_cancellation_from_an_outside_one(monkeypatch, counts):
    if counts and sys.version_info < (3, 11):
        pytest.skip("tasks count cancellations from Python 3.11")
    monkeypatch.setattr(timeouts, "TASKS_COUNT_CANCELS", counts)

    async def wait(seconds: float) -> None:
        with timeouts.Deadline(seconds, ConnectTimeout):
            await asyncio.sleep(seconds + 5)

    with pytest.raises(ConnectTimeout):
        await asyncio.ensure_future(wait(0.05))  # own task: a 3.10-style timeout leaves its count behind
    task = asyncio.ensure_future(wait(2.0))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with timeouts.Deadline(1.0, ConnectTimeout):
        await asyncio.sleep(0)  # done in time: nothing raised, no cancellation left behind
    await asyncio.sleep(0.01)
    if counts:
        # The timer and an outside cancellation both land before the task runs again: the outside one wins.
        async def both() -> None:
            with timeouts.Deadline(0.05, ConnectTimeout):
                asyncio.get_running_loop().call_later(0.05, asyncio.current_task().cancel)
                time.sleep(0.08)  # block the loop past both
                await asyncio.sleep(5)

        with pytest.raises(asyncio.CancelledError):
            await asyncio.ensure_future(both())
        assert asyncio.current_task().cancelling() == 0


async def test_writing_to_a_connection_the_server_reset():
    async def reset(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()

    async with raw_server(reset) as port, HttpClient(timeout=2.0) as client:
        response = await client.get(f"http://127.0.0.1:{port}/")
        assert response.content == b"ok"
        conn = client._pool.idle[("http", "127.0.0.1", port)][0]
        conn.transport.abort()  # as if the socket had failed under an idle connection
        await asyncio.sleep(0.01)
        with pytest.raises(WriteError):
            await conn.write(b"GET / HTTP/1.1\r\n\r\n", 1.0)


# --- the probe and the engine over the client ---------------------------------------------------------


async def test_the_engine_uses_this_client(sim):
    engine = Engine([endpoint(sim.url)], EngineSettings())
    async with engine._client() as client:
        assert isinstance(client, HttpClient)
        response = await client.get(f"{sim.base_url}/health")
        assert response.status_code == 200


async def test_probes_measure_and_reuse_one_connection(sim):
    connected: list[int] = []
    async with HttpClient() as client:
        samples = [await run_probe(client, endpoint(sim.url, max_tokens=8)) for _ in range(3)]
        assert client.open_connections == 1 and client.idle_connections == 1
        connected.append(client.open_connections)
    first, *rest = samples
    for sample in samples:
        assert sample.ok, sample.error_text
        assert sample.ttft_ms is not None and sample.ttft_ms > 0
        assert len(sample.token_event_ms) >= 2
    assert first.connect_ms > 0, "a new connection: its connect time is measured"
    assert all(s.connect_ms == 0.0 for s in rest), "a reused connection connects in no time"


async def test_a_probe_against_garbage_is_a_stream_cut():
    async def garbage(reader, writer):
        await read_request(reader)
        writer.write(b"this is not http\r\n\r\n")
        await writer.drain()
        await reader.read()

    async with raw_server(garbage) as port, HttpClient() as client:
        sample = await run_probe(client, endpoint(f"http://127.0.0.1:{port}/v1"))
    assert sample.error_kind == "stream_cut", sample.error_text
    assert "before answering" in (sample.error_message or "")


def test_the_engine_imports_no_httpx_stack():
    """`import lpxtop.cli.entry` and the running engine's modules load none of httpx's stack (fresh interpreter)."""
    code = (
        "import sys, lpxtop.cli.entry, lpxtop.cli.assemble, lpxtop.engine.runner, lpxtop.engine.scrape.servers, lpxtop.engine.system.discovery;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('httpx', 'httpcore', 'h11', 'anyio', 'certifi')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


# --- TLS ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    """A throwaway self-signed certificate for 127.0.0.1 (made by the openssl command)."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a test certificate")
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=30,
    )
    return cert, key


@contextlib.asynccontextmanager
async def tls_in_front_of(port: int, cert: Path, key: Path) -> AsyncIterator[int]:
    """A TLS-terminating relay to a plain server on `port`; yields the relay's port."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def relay(reader, writer):
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(relay, "127.0.0.1", 0, ssl=context)
    async with server:
        yield server.sockets[0].getsockname()[1]


async def test_a_probe_over_tls(sim, certificate):
    cert, key = certificate
    async with tls_in_front_of(sim.port, cert, key) as port:
        async with HttpClient(ssl_context=ssl.create_default_context(cafile=str(cert))) as client:
            sample = await run_probe(client, endpoint(f"https://127.0.0.1:{port}/v1"))
            assert sample.ok, sample.error_text
            assert sample.ttft_ms is not None and sample.ttft_ms > 0
            assert (await client.get(f"https://127.0.0.1:{port}/health")).status_code == 200
            assert client.open_connections == 1, "the TLS connection was reused"
        # the same server, not trusted: the certificate check fails and that is a TLS error
        async with HttpClient() as client:
            sample = await run_probe(client, endpoint(f"https://127.0.0.1:{port}/v1"))
            assert sample.error_kind == "tls", sample.error_text
            with pytest.raises(ConnectError) as caught:
                await client.get(f"https://127.0.0.1:{port}/health")
            assert any(isinstance(link, ssl.SSLCertVerificationError) for link in chain(caught.value))


async def test_tls_handshake_timeout():
    async with raw_server(silent) as port, HttpClient() as client:
        began = time.monotonic()
        with pytest.raises(ConnectTimeout):
            await client.get(f"https://127.0.0.1:{port}/", timeout=Timeout(connect=0.3))
        assert time.monotonic() - began < 1.5
        assert client.open_connections == 0


async def test_json_and_text_helpers(sim):
    async with HttpClient() as client:
        response = await client.get(f"{sim.url}/models")
        assert response.status_code == 200
        assert response.json()["data"][0]["id"] == "m"
        assert json.loads(response.text) == response.json()
