"""Whole-request bounds: a server that answers and then trickles cannot hold a request
past its limit. Every case is a real loopback server that sends a byte at a time."""

from __future__ import annotations

import asyncio
import time

import pytest

from lpxtop.engine.probe import fetch_models, run_probe
from lpxtop.http import HttpClient, ReadTimeout, Timeout
from tests.support.http_servers import raw_server, read_request, trickle
from tests.support.sim import endpoint

pytestmark = pytest.mark.timeout(30)

# A body of 200 bytes at one byte every 50 ms: 10 s in all, each read well within any read timeout here.
SLOW_BODY = b"x" * 200
EVERY_S = 0.05


async def test_get_is_bounded_as_a_whole_not_read_by_read():
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n"
    async with raw_server(trickle(head, SLOW_BODY, EVERY_S)) as port, HttpClient() as client:
        began = time.monotonic()
        with pytest.raises(ReadTimeout, match="limit of 0.3 s"):
            await client.get(f"http://127.0.0.1:{port}/", timeout=0.3)
        assert 0.25 < time.monotonic() - began < 1.2
        assert client.open_connections == 0, "the half-read connection was closed"


async def test_without_a_total_get_uses_its_longest_phase_as_one():
    # The engine's fetch of /v1/models passes phases only: the longest (0.4 s) bounds the whole GET.
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    body = b"1\r\nx\r\n" * 40
    async with raw_server(trickle(head, body, EVERY_S)) as port, HttpClient() as client:
        began = time.monotonic()
        with pytest.raises(ReadTimeout):
            await client.get(f"http://127.0.0.1:{port}/", timeout=Timeout(connect=0.2, read=0.4, write=0.2, pool=0.2))
        assert 0.35 < time.monotonic() - began < 1.3


async def test_a_trickled_models_list_does_not_hold_the_probe_loop():
    head = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n'
    async with raw_server(trickle(head, SLOW_BODY, EVERY_S)) as port, HttpClient() as client:
        began = time.monotonic()
        ids, error = await fetch_models(client, endpoint(f"http://127.0.0.1:{port}/v1"), timeout_s=0.3)
        assert time.monotonic() - began < 1.2
    assert ids == () and error is not None and "read_timeout" in error, error


async def test_a_trickled_head_is_bounded_by_the_read_timeout():
    head = b"HTTP/1.1 200 OK\r\n" + b"X-Filler: y\r\n" * 20 + b"\r\n"
    async with raw_server(trickle(b"", head, EVERY_S)) as port, HttpClient() as client:
        began = time.monotonic()
        with pytest.raises(ReadTimeout, match="response head"):
            # per-phase limits only: the head must still come within the read timeout as a whole
            await client.stream("GET", f"http://127.0.0.1:{port}/", timeout=Timeout(1.0, 0.3, 1.0, 1.0))
        assert 0.25 < time.monotonic() - began < 1.2


async def test_a_streams_total_covers_its_body():
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n"
    async with raw_server(trickle(head, SLOW_BODY, EVERY_S)) as port, HttpClient() as client:
        began = time.monotonic()
        response = await client.stream("GET", f"http://127.0.0.1:{port}/", timeout=Timeout(2.0, 2.0, 2.0, 2.0, total=0.3))
        got = b""
        with pytest.raises(ReadTimeout, match="limit of 0.3 s"):
            while data := await response.receive():
                got += data
        assert 0 < len(got) < len(SLOW_BODY)
        assert 0.25 < time.monotonic() - began < 1.2
        # receive(timeout) bounds one wait, the total still the whole: a fresh stream with a patient reader
        response = await client.stream("GET", f"http://127.0.0.1:{port}/", timeout=Timeout(2.0, 2.0, 2.0, 2.0, total=0.2))
        with pytest.raises(ReadTimeout):
            await response.feed(lambda data, t: False, timeout=5.0)


async def test_read_within_keeps_what_came_of_a_trickled_error_body():
    head = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 200\r\n\r\n"
    async with raw_server(trickle(head, SLOW_BODY, EVERY_S)) as port, HttpClient() as client:
        response = await client.stream("GET", f"http://127.0.0.1:{port}/", timeout=Timeout(5.0, 5.0, 5.0, 5.0))
        began = time.monotonic()
        body = await response.read(8192, truncate=True, within=0.25)
        assert 0.2 < time.monotonic() - began < 1.0
        assert 0 < len(body) < len(SLOW_BODY) and set(body) == {ord("x")}
        assert client.open_connections == 0
        response = await client.stream("GET", f"http://127.0.0.1:{port}/", timeout=Timeout(5.0, 5.0, 5.0, 5.0))
        with pytest.raises(ReadTimeout):
            await response.read(8192, within=0.15)  # without truncate, running out of time is an error


async def test_an_error_status_whose_body_trickles_keeps_its_status():
    head = (b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 7\r\nContent-Type: application/json\r\n"
            b"Content-Length: 200\r\n\r\n")
    async with raw_server(trickle(head, SLOW_BODY, EVERY_S)) as port, HttpClient() as client:
        began = time.monotonic()
        sample = await run_probe(client, endpoint(f"http://127.0.0.1:{port}/v1", model="m",
                                                  first_token_timeout_s=4.0, timeout_s=8.0))
        took = time.monotonic() - began
    assert sample.error_kind == "http_5xx", sample.error_text
    assert sample.http_status == 503 and sample.retry_after_s == 7.0
    assert took < 2.5, "the error's body is read for a bounded time, not until the probe's deadline"


async def test_a_request_that_keeps_its_limits_is_not_cut():
    # A body that trickles but ends well within the total is read whole.
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"
    async with raw_server(trickle(head, b"hello", 0.02)) as port, HttpClient() as client:
        response = await client.get(f"http://127.0.0.1:{port}/", timeout=2.0)
        assert response.content == b"hello"


async def test_the_total_limit_counts_from_the_start_of_the_request():
    # A connect that takes long leaves less for the body: the total is one budget for all phases.
    async def slow_answer(reader, writer):
        await read_request(reader)
        await asyncio.sleep(0.2)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n")
        for _ in range(200):
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(EVERY_S)

    async with raw_server(slow_answer) as port, HttpClient() as client:
        began = time.monotonic()
        with pytest.raises(ReadTimeout):
            await client.get(f"http://127.0.0.1:{port}/", timeout=0.4)
        assert 0.35 < time.monotonic() - began < 1.3
