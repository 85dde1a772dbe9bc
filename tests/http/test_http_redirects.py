"""Redirects: followed as curl and requests follow them, within the request's limits."""

from __future__ import annotations

import asyncio
import time

import pytest

from lpxtop import textsafe
from lpxtop.engine.probe import redirect_target, run_probe
from lpxtop.http import HttpClient, ReadTimeout, RedirectError
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.http_servers import raw_server, read_request
from tests.support.sim import endpoint

pytestmark = pytest.mark.timeout(30)


def redirecting(routes: dict[bytes, tuple[int, str]], seen: list, final: bytes = b"ok") -> object:
    """A keep-alive server: a path in `routes` answers (status, Location); any other path 200 `final`
    (echoing the method and body). `seen` gets (request line, headers, body)."""

    async def handle(reader, writer):
        while True:
            line, headers, body = await read_request(reader)
            seen.append((line, headers, body))
            path = line.split(b" ")[1]
            if path in routes:
                status, location = routes[path]
                page = b"moved"
                writer.write(b"HTTP/1.1 %d Moved\r\nLocation: %s\r\nContent-Length: %d\r\n\r\n%s"
                             % (status, location.encode(), len(page), page))
            else:
                answer = line.split(b" ")[0] + b" " + body + b" " + final
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer))
            await writer.drain()

    return handle


@pytest.mark.parametrize("status", [307, 308])
async def test_307_and_308_keep_the_method_and_the_body(status):
    seen: list = []
    routes = {b"/v1/chat/completions": (status, "/v2/chat/completions")}
    async with raw_server(redirecting(routes, seen)) as port, HttpClient(timeout=5.0) as client:
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        response = await client.post(url, json={"a": 1})
        assert response.content == b'POST {"a":1} ok'
        assert response.url == f"http://127.0.0.1:{port}/v2/chat/completions"
        assert response.redirects == ((status, url),)
        assert client.open_connections == 1, "the redirect's body was read: one connection did both"
    assert [s[0] for s in seen] == [b"POST /v1/chat/completions HTTP/1.1", b"POST /v2/chat/completions HTTP/1.1"]


@pytest.mark.parametrize("status", [301, 302, 303])
async def test_a_get_follows_301_302_303(status):
    seen: list = []
    server = raw_server(redirecting({b"/metrics": (status, "/real/metrics?x=1#frag")}, seen))
    async with server as port, HttpClient(timeout=5.0) as client:
        response = await client.get(f"http://127.0.0.1:{port}/metrics")
        assert response.content == b"GET  ok"
        assert response.url == f"http://127.0.0.1:{port}/real/metrics?x=1"
    assert seen[-1][0] == b"GET /real/metrics?x=1 HTTP/1.1"


@pytest.mark.parametrize("status", [301, 302, 303])
async def test_a_post_moved_by_301_302_303_is_an_error_that_names_the_location(status):
    seen: list = []
    routes = {b"/v1/chat/completions": (status, "http://elsewhere.example/v1/chat/completions")}
    async with raw_server(redirecting(routes, seen)) as port, HttpClient(timeout=5.0) as client:
        with pytest.raises(RedirectError) as caught:
            await client.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={})
        assert "http://elsewhere.example/v1/chat/completions" in str(caught.value)
        assert caught.value.status_code == status
        sample = await run_probe(client, endpoint(f"http://127.0.0.1:{port}/v1", model="m"))
    assert len(seen) == 2, "the POST was not sent to the new place"
    assert sample.error_kind == "http_3xx" and sample.http_status == status
    assert "elsewhere.example" in sample.error_message


async def test_at_most_five_hops():
    seen: list = []
    routes = {f"/{i}".encode(): (302, f"/{i + 1}") for i in range(10)}
    async with raw_server(redirecting(routes, seen)) as port, HttpClient(timeout=5.0) as client:
        with pytest.raises(RedirectError, match="more than 5 redirects"):
            await client.get(f"http://127.0.0.1:{port}/0")
        assert len(seen) == 6
        response = await client.get(f"http://127.0.0.1:{port}/5")  # five hops: followed
        assert response.status_code == 200 and len(response.redirects) == 5


async def test_a_loop_is_an_error_at_once():
    seen: list = []
    routes = {b"/a": (307, "/b"), b"/b": (308, "/a")}
    async with raw_server(redirecting(routes, seen)) as port, HttpClient(timeout=5.0) as client:
        with pytest.raises(RedirectError, match="loop"):
            await client.get(f"http://127.0.0.1:{port}/a")
    assert len(seen) == 2


async def test_only_http_urls_are_followed():
    seen: list = []
    server = raw_server(redirecting({b"/x": (302, "ftp://files.example/x")}, seen))
    async with server as port, HttpClient(timeout=5.0) as client:
        with pytest.raises(RedirectError, match="not an http"):
            await client.get(f"http://127.0.0.1:{port}/x")


async def test_credentials_stay_with_their_origin():
    textsafe.register_secret("azure-key-0123456789")
    seen_a: list = []
    seen_b: list = []
    async with raw_server(redirecting({}, seen_b)) as other:
        routes = {b"/same": (307, "/same-final"), b"/away": (307, f"http://localhost:{other}/away-final")}
        async with raw_server(redirecting(routes, seen_a)) as port, HttpClient(timeout=5.0) as client:
            secrets = {"Authorization": "Bearer sk-test-123456", "api-key": "azure-key-0123456789",
                       "X-Plain": "kept"}
            await client.get(f"http://127.0.0.1:{port}/same", headers=secrets)
            await client.get(f"http://127.0.0.1:{port}/away", headers=secrets)
    same_final = seen_a[1][1]
    assert same_final["authorization"] == "Bearer sk-test-123456" and same_final["api-key"] == "azure-key-0123456789"
    (_, away_headers, _), = seen_b  # another host (localhost, not 127.0.0.1): no credentials
    assert "authorization" not in away_headers and "api-key" not in away_headers
    assert away_headers["x-plain"] == "kept"


async def test_a_redirect_never_leaves_the_requests_total_limit():
    async def slow_second_hop(reader, writer):
        while True:
            line, _, _ = await read_request(reader)
            if line.startswith(b"GET /first "):
                writer.write(b"HTTP/1.1 307 Moved\r\nLocation: /second\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                continue
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
            for _ in range(100):
                await asyncio.sleep(0.05)
                writer.write(b"x")
                await writer.drain()

    async with raw_server(slow_second_hop) as port, HttpClient() as client:
        began = time.monotonic()
        with pytest.raises(ReadTimeout):
            await client.get(f"http://127.0.0.1:{port}/first", timeout=0.3)
        assert time.monotonic() - began < 1.2


async def test_a_probe_through_a_307_measures_the_whole_exchange():
    # A gateway that sends the probe to the real server: the probe succeeds and its URL is the final one.
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=2, api_key=None)) as sim:
        async def gateway(reader, writer):
            while True:
                line, _, _ = await read_request(reader)
                path = line.split(b" ")[1].decode()
                location = f"{sim.url.removesuffix('/v1')}{path}"
                writer.write(f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n"
                             .encode())
                await writer.drain()

        async with raw_server(gateway) as port, HttpClient(timeout=5.0) as client:
            sample = await run_probe(client, endpoint(f"http://127.0.0.1:{port}/v1", model="m"))
    assert sample.ok, sample.error_text
    assert sample.output_tokens == 16
    assert sample.redirected_to == f"{sim.url.removesuffix('/v1')}/v1/chat/completions"  # kept, to be shown


def test_a_redirect_target_is_shown_without_credentials_or_query():
    assert redirect_target("https://user:secret@gw.example:8443/v1/chat?sig=abc#x") == "https://gw.example:8443/v1/chat?…"
    assert redirect_target("http://[::1]:8000/v1/chat/completions") == "http://[::1]:8000/v1/chat/completions"
    assert redirect_target("http://h/\x1b]0;title\x07p") == "http://h/p"  # terminal escapes scrubbed
