"""Statuses: interim 1xx answers are skipped, 204/304 and HEAD have no body, and a
final status the probe cannot use keeps its number and gets the class that says what it is."""

from __future__ import annotations

import pytest

from lpxtop.engine.probe import run_probe
from lpxtop.engine.probe.errors import classify_exception, http_error_kind
from lpxtop.http import HttpClient, RemoteProtocolError
from lpxtop.model.probe import ERROR_KINDS
from tests.support.http_servers import answer_each, raw_server
from tests.support.sim import endpoint

pytestmark = pytest.mark.timeout(30)

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@pytest.mark.parametrize(
    ("status", "kind"),
    [(204, "http_other"), (206, "http_other"), (301, "http_3xx"), (302, "http_3xx"), (304, "http_3xx"),
     (308, "http_3xx"), (400, "http_4xx"), (401, "http_401"), (403, "http_403"), (404, "http_404"),
     (418, "http_4xx"), (429, "http_429"), (500, "http_5xx"), (503, "http_5xx"), (599, "http_5xx"),
     (600, "http_other"), (999, "http_other")],
)
def test_each_status_has_the_class_that_says_what_it_is(status, kind):
    assert http_error_kind(status) == kind
    assert kind in ERROR_KINDS


async def test_interim_answers_are_skipped_and_the_connection_is_reused():
    interim = (b"HTTP/1.1 100 Continue\r\n\r\n"
               b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
               b"HTTP/1.1 102 Processing\r\n\r\n")
    accepted: list[int] = []
    async with raw_server(answer_each(interim + OK), accepted) as port, HttpClient(timeout=5.0) as client:
        for _ in range(3):
            response = await client.get(f"http://127.0.0.1:{port}/")
            assert (response.status_code, response.content) == (200, b"ok")
            assert "link" not in response.headers
    assert len(accepted) == 1


async def test_endless_interim_answers_are_an_error():
    flood = b"HTTP/1.1 100 Continue\r\n\r\n" * 40 + OK
    async with raw_server(answer_each(flood)) as port, HttpClient(timeout=5.0) as client:
        with pytest.raises(RemoteProtocolError, match="interim"):
            await client.get(f"http://127.0.0.1:{port}/")


async def test_an_unasked_protocol_switch_is_an_error():
    switch = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    async with raw_server(answer_each(switch)) as port, HttpClient(timeout=5.0) as client:
        with pytest.raises(RemoteProtocolError, match="101"):
            await client.get(f"http://127.0.0.1:{port}/")


@pytest.mark.parametrize(
    ("method", "answer"),
    [
        ("GET", b"HTTP/1.1 204 No Content\r\nContent-Length: 2\r\n\r\n"),
        ("GET", b"HTTP/1.1 304 Not Modified\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n"),
        ("HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"),
        ("HEAD", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"),
    ],
)
async def test_no_body_answers_leave_the_connection_ready_for_the_next(method, answer):
    # Each body-less answer is followed on the same connection by a normal one: reading a body that
    # the headers announce would swallow the next response.
    seen: list = []
    accepted: list[int] = []

    async def alternate(reader, writer):
        from tests.support.http_servers import read_request

        while True:
            line, _, _ = await read_request(reader)
            seen.append(line)
            writer.write(answer if line.startswith(method.encode() + b" /empty") else OK)
            await writer.drain()

    async with raw_server(alternate, accepted) as port, HttpClient(timeout=5.0) as client:
        for _ in range(2):
            empty = await client.request(method, f"http://127.0.0.1:{port}/empty")
            assert empty.content == b"" and empty.is_complete
            assert (await client.get(f"http://127.0.0.1:{port}/next")).content == b"ok"
    assert len(accepted) == 1


@pytest.mark.parametrize(
    ("answer", "status", "kind"),
    [
        (b"HTTP/1.1 204 No Content\r\n\r\n", 204, "http_other"),
        (b"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\n{}", 202, "http_other"),
        (b"HTTP/1.1 302 Found\r\nContent-Length: 0\r\n\r\n", 302, "http_3xx"),  # no Location: not followable
        (b"HTTP/1.1 304 Not Modified\r\n\r\n", 304, "http_3xx"),
        (b"HTTP/1.1 418 I'm a teapot\r\nContent-Length: 0\r\n\r\n", 418, "http_4xx"),
        (b"HTTP/1.1 700 Beyond\r\nContent-Length: 0\r\n\r\n", 700, "http_other"),
    ],
)
async def test_a_probe_keeps_the_status_number_and_class(answer, status, kind):
    async with raw_server(answer_each(answer)) as port, HttpClient(timeout=5.0) as client:
        sample = await run_probe(client, endpoint(f"http://127.0.0.1:{port}/v1", model="m"))
    assert (sample.http_status, sample.error_kind) == (status, kind), sample.error_text
    assert f"HTTP {status}" in sample.error_message


async def test_an_unasked_switch_in_a_probe_is_reported_as_such():
    switch = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n"
    async with raw_server(answer_each(switch)) as port, HttpClient(timeout=5.0) as client:
        sample = await run_probe(client, endpoint(f"http://127.0.0.1:{port}/v1", model="m"))
    assert not sample.ok and "101" in sample.error_message, sample.error_text
    kind, _ = classify_exception(RemoteProtocolError("x"), started_stream=False)
    assert sample.error_kind == kind
