"""Every error class comes from a real faulty response (or socket) and is classified; nothing raises."""

from __future__ import annotations

import json
import socket
import sys
import time

import pytest

from lpxtop.engine.probe import run_probe
from lpxtop.http import HttpClient
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.ports import free_port
from tests.support.sim import endpoint


@pytest.fixture(scope="module")
def sim():
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=2, api_key=None)) as handle:
        yield handle


async def probe(url: str, **kw):
    """One probe through the engine's HTTP client, on a fresh client."""
    async with HttpClient() as client:
        return await run_probe(client, endpoint(url, **kw))


@pytest.mark.parametrize(
    ("faults", "kind", "extra"),
    [
        ({"fail_rate": 1.0}, "http_5xx", {}),
        ({"rate_limit": True}, "http_429", {}),
        ({"forbidden": True}, "http_403", {}),
        ({"cut_after_tokens": 3}, "stream_cut", {}),
        ({"error_event_after_tokens": 2}, "error_event", {}),
        ({"bad_json": True}, "bad_json", {}),
        ({"empty": True}, "empty", {}),
        ({"first_token_delay_ms": 3000}, "first_token_timeout", {"first_token_timeout_s": 0.5}),
        ({"slow_headers_s": 3.0}, "first_token_timeout", {"first_token_timeout_s": 0.5}),
        ({"stall_after_tokens": 2, "stall_s": 3.0}, "read_timeout", {"timeout_s": 0.8}),
    ],
)
async def test_fault_is_classified(sim, faults, kind, extra):
    sim.server.set_faults(count=1, **faults)
    began = time.monotonic()
    sample = await probe(sim.url, **extra)
    assert not sample.ok
    assert sample.error_kind == kind, sample.error_text
    assert sample.error_message
    assert time.monotonic() - began < 5, "every timeout is bounded"
    # The next request is healthy again: one faulty answer does not poison the client.
    after = await probe(sim.url)
    assert after.ok, after.error_text


async def test_429_honours_retry_after(sim):
    sim.server.set_faults(count=1, rate_limit=True)
    sample = await probe(sim.url)
    assert sample.error_kind == "http_429" and sample.retry_after_s == 2.0


async def test_unknown_model_is_404(sim):
    sample = await probe(sim.url, model="no-such-model")
    assert sample.error_kind == "http_404" and "no-such-model" in sample.error_message


async def test_missing_api_key_is_401_and_the_key_never_leaks(monkeypatch):
    secret = "sk-test-" + "x7" * 10
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=2, api_key=secret)) as sim:
        missing = await probe(sim.url)
        monkeypatch.setenv("LPXTOP_TEST_KEY", secret)
        good = await probe(sim.url, api_key_env="LPXTOP_TEST_KEY")
        monkeypatch.setenv("LPXTOP_TEST_KEY", "sk-wrong")
        wrong = await probe(sim.url, api_key_env="LPXTOP_TEST_KEY")
    assert missing.error_kind == "http_401"
    assert good.ok, good.error_text
    assert wrong.error_kind == "http_401"
    for sample in (missing, good, wrong):
        assert secret not in repr(sample)
    assert secret not in json.dumps(endpoint(sim.url, api_key_env="LPXTOP_TEST_KEY").to_json())


async def test_refused():
    sample = await probe(f"http://127.0.0.1:{free_port()}/v1")
    assert sample.error_kind == "refused", sample.error_text


async def test_tls_against_a_plain_http_server(sim):
    sample = await probe(sim.url.replace("http://", "https://"))
    assert sample.error_kind == "tls", sample.error_text


async def test_dns(monkeypatch):
    # Resolving a name would send a query to the network's resolver; only loopback traffic is allowed
    # here, so the resolver itself (the lowest layer) answers "no such name".
    def no_such_name(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_name)
    sample = await probe("http://no-such-host.invalid:8000/v1")
    assert sample.error_kind == "dns", sample.error_text


async def test_connect_timeout_on_a_full_backlog():
    # A listener that never accepts: once its backlog is full, the kernel drops new SYNs and connect hangs.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(8):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            fillers.append(s)
        time.sleep(0.1)
        began = time.monotonic()
        sample = await probe(f"http://127.0.0.1:{port}/v1", connect_timeout_s=0.3, first_token_timeout_s=2.0)
        assert time.monotonic() - began < 2.5
        assert sample.error_kind in ("connect_timeout", "first_token_timeout"), sample.error_text
    finally:
        for s in fillers:
            s.close()
        listener.close()


async def test_garbage_server_is_classified_not_raised():
    # A raw socket server that answers with nonsense bytes instead of HTTP.
    import asyncio

    async def handle(reader, writer):
        await reader.read(1024)
        writer.write(b"this is not http\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        sample = await probe(f"http://127.0.0.1:{port}/v1")
    assert not sample.ok and sample.error_kind in ("stream_cut", "other")


async def test_html_200_is_bad_json():
    import asyncio

    body = b"data: <html>oops</html>\n\n"

    async def handle(reader, writer):
        await reader.read(65536)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        sample = await probe(f"http://127.0.0.1:{port}/v1")
    assert sample.error_kind == "bad_json"


async def test_cancelling_a_probe_from_outside_is_not_swallowed(sim):
    import asyncio

    sim.server.set_faults(count=1, stall_after_tokens=1, stall_s=3.0)
    async with HttpClient() as client:
        task = asyncio.ensure_future(run_probe(client, endpoint(sim.url, timeout_s=5.0)))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_timed_out_probe_leaves_its_task_usable(sim):
    import asyncio

    # The timeout is delivered by cancelling the probing task; afterwards that task must await normally.
    sim.server.set_faults(count=1, first_token_delay_ms=2000)
    async with HttpClient() as client:
        sample = await run_probe(client, endpoint(sim.url, first_token_timeout_s=0.3))
        assert sample.error_kind == "first_token_timeout"
        await asyncio.sleep(0.05)
        if sys.version_info >= (3, 11):  # 3.10's tasks keep no count (pytest-asyncio's backport differs)
            assert asyncio.current_task().cancelling() == 0
        assert (await run_probe(client, endpoint(sim.url))).ok
