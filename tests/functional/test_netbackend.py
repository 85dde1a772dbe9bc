"""The asyncio network backend (lpxtop/engine/netbackend.py) over real loopback sockets.

The probe and the error classification must behave exactly as over httpcore's stock backend: every
case here is a real server (the sim, or a raw socket server) and a real connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpcore
import httpx
import pytest

from lpxtop.engine import netbackend
from lpxtop.engine.netbackend import AsyncioBackend, AsyncioStream, use_asyncio_backend
from lpxtop.engine.probe import run_probe
from lpxtop.engine.runner import Engine, EngineSettings
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.functional.simhelpers import endpoint


@pytest.fixture(scope="module")
def sim():
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=2, api_key=None)) as handle:
        yield handle


def client(**transport_kw) -> httpx.AsyncClient:
    transport = httpx.AsyncHTTPTransport(trust_env=False, **transport_kw)
    assert use_asyncio_backend(transport), "httpx/httpcore internals changed: the engine fell back to anyio"
    return httpx.AsyncClient(transport=transport, trust_env=False)


async def probe(url: str, **kw):
    async with client() as c:
        return await run_probe(c, endpoint(url, **kw))


@contextlib.asynccontextmanager
async def raw_server(handle) -> AsyncIterator[int]:
    """A plain asyncio socket server on loopback running `handle(reader, writer)`; yields its port.

    On exit every accepted connection is closed, whether or not its handler has finished.
    """
    writers: list[asyncio.StreamWriter] = []

    async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await handle(reader, writer)

    server = await asyncio.start_server(tracked, "127.0.0.1", 0)
    try:
        async with server:
            yield server.sockets[0].getsockname()[1]
    finally:
        for writer in writers:
            writer.close()
        await asyncio.sleep(0.01)  # let the transports finish closing


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


# --- wiring -------------------------------------------------------------------------------------------


async def test_the_engine_client_uses_the_asyncio_backend(sim):
    engine = Engine([endpoint(sim.url)], EngineSettings())
    async with engine._client() as c:
        assert isinstance(c._transport._pool._network_backend, AsyncioBackend)
        response = await c.get(f"{sim.base_url}/health")
        assert response.status_code == 200
        assert isinstance(response.extensions["network_stream"], AsyncioStream)


def test_a_proxy_transport_is_left_alone():
    transport = httpx.AsyncHTTPTransport(proxy="http://127.0.0.1:9", trust_env=False)
    assert not use_asyncio_backend(transport)


def test_unexpected_internals_fall_back_quietly():
    transport = httpx.AsyncHTTPTransport(trust_env=False)
    del transport._pool._network_backend
    assert not use_asyncio_backend(transport)
    transport._pool = object()
    assert not use_asyncio_backend(transport)


# --- whole probes -------------------------------------------------------------------------------------


async def test_probes_over_the_backend_measure_and_reuse_the_connection(sim):
    async with client() as c:
        samples = [await run_probe(c, endpoint(sim.url, max_tokens=8)) for _ in range(3)]
        assert len(c._transport._pool.connections) == 1, "the connection goes back to the pool"
    for sample in samples:
        assert sample.ok, sample.error_text
        assert sample.ttft_ms is not None and sample.ttft_ms > 0
        assert len(sample.token_event_ms) >= 2


@pytest.mark.parametrize(
    ("faults", "kind", "extra"),
    [
        ({"cut_after_tokens": 3}, "stream_cut", {}),
        ({"error_event_after_tokens": 2}, "error_event", {}),
        ({"fail_rate": 1.0}, "http_5xx", {}),
        ({"first_token_delay_ms": 3000}, "first_token_timeout", {"first_token_timeout_s": 0.5}),
        ({"slow_headers_s": 3.0}, "first_token_timeout", {"first_token_timeout_s": 0.5}),
        ({"stall_after_tokens": 2, "stall_s": 3.0}, "read_timeout", {"timeout_s": 0.8}),
    ],
)
async def test_faults_are_classified_as_over_the_stock_backend(sim, faults, kind, extra):
    sim.server.set_faults(count=1, **faults)
    began = time.monotonic()
    async with client() as c:
        sample = await run_probe(c, endpoint(sim.url, **extra))
        assert sample.error_kind == kind, sample.error_text
        assert time.monotonic() - began < 5
        assert (await run_probe(c, endpoint(sim.url))).ok, "the client is healthy afterwards"


async def test_connect_timeout():
    with full_backlog() as port:
        began = time.monotonic()
        with pytest.raises(httpcore.ConnectTimeout):
            await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=0.3)
        assert time.monotonic() - began < 1.5
        sample = await probe(f"http://127.0.0.1:{port}/v1", connect_timeout_s=0.3, first_token_timeout_s=2.0)
        assert sample.error_kind == "connect_timeout", sample.error_text
    if sys.version_info >= (3, 11):
        assert asyncio.current_task().cancelling() == 0, "the timer's cancellation was undone"


async def silent(reader, writer):
    """A raw server's handler that answers nothing until the client hangs up."""
    await reader.read()
    writer.close()


async def test_read_timeout_on_a_server_that_never_answers():
    async with raw_server(silent) as port:
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=1.0)
        began = time.monotonic()
        with pytest.raises(httpcore.ReadTimeout):
            await stream.read(1024, timeout=0.2)
        assert 0.15 < time.monotonic() - began < 1.0
        await stream.aclose()
        sample = await probe(f"http://127.0.0.1:{port}/v1", first_token_timeout_s=0.4)
        assert sample.error_kind == "first_token_timeout", sample.error_text
        async with client() as c:
            with pytest.raises(httpx.ReadTimeout):
                await c.get(f"http://127.0.0.1:{port}/", timeout=httpx.Timeout(2.0, read=0.3))


async def test_a_server_that_closes_mid_stream():
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    event = b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'

    async def cut(reader, writer):
        await reader.read(65536)
        writer.write(head + b"%x\r\n%s\r\n" % (len(event), event))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.close()

    async with raw_server(cut) as port:
        sample = await probe(f"http://127.0.0.1:{port}/v1")
    assert sample.error_kind == "stream_cut", sample.error_text
    assert len(sample.token_event_ms) == 1


async def test_a_reset_connection_is_a_read_error_and_a_closed_one_reads_empty():
    async def reset(reader, writer):
        await reader.read(1)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    async def close(reader, writer):
        await reader.read(1)
        writer.close()

    backend = AsyncioBackend()
    async with raw_server(reset) as port:
        stream = await backend.connect_tcp("127.0.0.1", port)
        await stream.write(b"x")
        with pytest.raises(httpcore.ReadError) as caught:
            await stream.read(1024, timeout=2.0)
        assert any(isinstance(link, ConnectionResetError) for link in chain(caught.value))
        with pytest.raises(httpcore.WriteError):
            await stream.write(b"more")
        await stream.aclose()
    async with raw_server(close) as port:
        stream = await backend.connect_tcp("127.0.0.1", port)
        await stream.write(b"x")
        assert await stream.read(1024, timeout=2.0) == b""
        await stream.aclose()
        with pytest.raises(httpcore.ReadError):
            await stream.read(1024)


# --- cancellation -------------------------------------------------------------------------------------


async def test_an_outside_cancellation_of_a_read_propagates(sim):
    async with raw_server(silent) as port:
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port)
        task = asyncio.ensure_future(stream.read(1024, timeout=3.0))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await stream.aclose()
    # and through a whole probe, as the engine stops
    sim.server.set_faults(count=1, stall_after_tokens=1, stall_s=3.0)
    async with client() as c:
        task = asyncio.ensure_future(run_probe(c, endpoint(sim.url, timeout_s=5.0)))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_an_outside_cancellation_of_a_connect_is_not_a_timeout():
    with full_backlog() as port:
        task = asyncio.ensure_future(AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=3.0))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@pytest.mark.parametrize("counts", [True, False], ids=["counted", "python3.10"])
async def test_deadline_tells_its_own_cancellation_from_an_outside_one(monkeypatch, counts):
    if counts and sys.version_info < (3, 11):
        pytest.skip("tasks count cancellations from Python 3.11")
    monkeypatch.setattr(netbackend, "_TASKS_COUNT_CANCELS", counts)

    async def wait(seconds: float) -> None:
        with netbackend._Deadline(seconds, httpcore.ConnectTimeout):
            await asyncio.sleep(seconds + 5)

    with pytest.raises(httpcore.ConnectTimeout):
        await asyncio.ensure_future(wait(0.05))  # own task: a 3.10-style timeout leaves its count behind
    task = asyncio.ensure_future(wait(2.0))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with netbackend._Deadline(1.0, httpcore.ConnectTimeout):
        await asyncio.sleep(0)  # done in time: nothing raised, no cancellation left behind
    await asyncio.sleep(0.01)
    if counts:
        # The timer and an outside cancellation both land before the task runs again: the outside one wins.
        async def both() -> None:
            with netbackend._Deadline(0.05, httpcore.ConnectTimeout):
                asyncio.get_running_loop().call_later(0.05, asyncio.current_task().cancel)
                time.sleep(0.08)  # block the loop past both
                await asyncio.sleep(5)

        with pytest.raises(asyncio.CancelledError):
            await asyncio.ensure_future(both())
        assert asyncio.current_task().cancelling() == 0


# --- flow control, keep-alive, extra info, unix sockets ------------------------------------------------


async def test_large_bodies_both_ways():
    size = 8 * 1024 * 1024

    async def echo_size(reader, writer):
        line = await reader.readuntil(b"\r\n\r\n")
        length = int(next(h for h in line.split(b"\r\n") if h.lower().startswith(b"content-length:")).split(b":")[1])
        got = 0
        while got < length:
            got += len(await reader.read(65536))
            await asyncio.sleep(0)  # a slow reader: the client's sends must wait for the buffer to drain
        body = b"y" * size
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        writer.close()

    async with raw_server(echo_size) as port, client() as c:
        response = await c.post(f"http://127.0.0.1:{port}/", content=b"x" * size, timeout=10.0)
        assert response.status_code == 200 and len(response.content) == size


async def test_a_keepalive_connection_the_server_closed_is_not_reused():
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    connections = 0

    async def one_then_close(reader, writer):
        nonlocal connections
        connections += 1
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.close()  # idle keep-alive connection closed by the server

    async with raw_server(one_then_close) as port, client() as c:
        for _ in range(3):
            assert (await c.get(f"http://127.0.0.1:{port}/")).text == "ok"
            await asyncio.sleep(0.2)
    assert connections == 3


async def test_extra_info():
    async def hold(reader, writer):
        await reader.read(1)
        writer.close()

    async with raw_server(hold) as port:
        stream = await AsyncioBackend().connect_tcp(
            "127.0.0.1", port, socket_options=[(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
        )
        assert stream.get_extra_info("server_addr") == ("127.0.0.1", port)
        assert stream.get_extra_info("client_addr")[0] == "127.0.0.1"
        assert stream.get_extra_info("socket").getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
        assert stream.get_extra_info("ssl_object") is None
        assert stream.get_extra_info("is_readable") is False
        await stream.write(b"x")
        await asyncio.sleep(0.1)
        assert stream.get_extra_info("is_readable") is True
        assert stream.get_extra_info("something else") is None
        await stream.aclose()


async def test_a_hangup_the_loop_has_not_read_yet_makes_the_connection_readable():
    """httpcore asks `is_readable` of an idle connection right before reusing it, possibly before the
    event loop has polled the server's hang-up: the kernel's socket must be asked too. The server is a
    thread, and the test blocks the loop (time.sleep) while the hang-up arrives."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def accept_read_close() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(1)

    server = threading.Thread(target=accept_read_close, daemon=True)
    server.start()
    try:
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=5.0)
        await stream.write(b"x")
        server.join(5.0)
        time.sleep(0.1)  # blocks the loop: the hang-up is in the kernel, not yet in the protocol
        assert stream._protocol.eof is False and stream._protocol.lost is False
        assert stream.get_extra_info("is_readable") is True
        await stream.aclose()
    finally:
        listener.close()


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="no Unix sockets")
async def test_unix_socket(tmp_path):
    path = str(tmp_path / "s")

    async def answer(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(answer, path)
    async with server, client(uds=path) as c:
        assert (await c.get("http://localhost/")).text == "ok"
    with pytest.raises(httpcore.ConnectError):
        await AsyncioBackend().connect_unix_socket(str(tmp_path / "nothing"))


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
        async with client(verify=ssl.create_default_context(cafile=str(cert))) as c:
            sample = await run_probe(c, endpoint(f"https://127.0.0.1:{port}/v1"))
            assert sample.ok, sample.error_text
            assert sample.ttft_ms is not None and sample.ttft_ms > 0
            response = await c.get(f"https://127.0.0.1:{port}/health")
            assert response.extensions["network_stream"].get_extra_info("ssl_object") is not None
        # the same server, not trusted: the certificate check fails and that is a TLS error
        sample = await probe(f"https://127.0.0.1:{port}/v1")
        assert sample.error_kind == "tls", sample.error_text


async def test_tls_against_a_plain_http_server(sim):
    sample = await probe(sim.url.replace("http://", "https://"))
    assert sample.error_kind == "tls", sample.error_text


async def test_tls_handshake_timeout():
    async with raw_server(silent) as port:
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port)
        began = time.monotonic()
        with pytest.raises(httpcore.ConnectTimeout):
            await stream.start_tls(ssl.create_default_context(), "127.0.0.1", timeout=0.2)
        assert time.monotonic() - began < 1.0
