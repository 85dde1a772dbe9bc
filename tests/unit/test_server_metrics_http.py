"""ServerScraper against real loopback HTTP servers (aiohttp.web on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from lpxtop.engine.scrape.kinds import probe_kind
from lpxtop.engine.scrape.servers import ServerScraper
from tests.support.metrics_server import METRICS, capture, endpoint, http_client, serve, text_handler
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(20)


async def test_scrapes_a_real_capture_with_identity_encoding() -> None:
    hits: list[web.Request] = []
    body = capture("vllm-0.32.0-cpu-local-capture-after-load.txt")
    async with serve({"/metrics": text_handler(body, hits=hits)}) as origin, http_client() as client:
        m = await ServerScraper(endpoint(origin)).scrape(client)
    assert (m.kind, m.status, m.models) == ("vllm", "ok", ("tiny-llama",))
    assert m.requests_running == 0.0
    assert m.scrape_ms is not None and m.scrape_ms >= 0
    assert hits[0].headers["Accept-Encoding"] == "identity"


async def test_rates_between_two_real_scrapes() -> None:
    bodies = [
        capture("vllm-0.32.0-cpu-local-capture-idle.txt"),
        capture("vllm-0.32.0-cpu-local-capture-after-load.txt"),
    ]

    async def handle(request: web.Request) -> web.Response:
        return web.Response(text=bodies.pop(0), content_type="text/plain")

    now = [100.0]
    async with serve({"/metrics": handle}) as origin, http_client() as client:
        scraper = ServerScraper(endpoint(origin), clock=lambda: now[0])
        first = await scraper.scrape(client)
        now[0] = 110.0
        second = await scraper.scrape(client)
    assert first.generation_tokens_per_s is None
    assert second.generation_tokens_per_s == pytest.approx(276.0)  # (2784 - 24) / 10 s, line 153
    assert second.server_ttft_ms is not None and second.server_ttft_ms.p50 == pytest.approx(10.0)


async def test_api_key_goes_to_the_endpoints_own_origin_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LPXTOP_TEST_KEY", "sk-test-123")
    hits: list[web.Request] = []
    body = capture("llamacpp-server-0c1e5709-local-capture-after-load.txt")
    async with (
        serve({"/metrics": text_handler(body, hits=hits)}) as origin,
        serve({"/metrics": text_handler(body, hits=hits)}) as other,
        http_client() as client,
    ):
        await ServerScraper(endpoint(origin, api_key_env="LPXTOP_TEST_KEY")).scrape(client)
        ep = endpoint(origin, api_key_env="LPXTOP_TEST_KEY", metrics_url=other + "/metrics")
        await ServerScraper(ep).scrape(client)
    assert hits[0].headers.get("Authorization") == "Bearer sk-test-123"
    assert "Authorization" not in hits[1].headers


async def test_metrics_url_override_like_triton_port_8002() -> None:
    body = capture("triton-trtllm-2026-07-tensorrtllm_backend-readme.txt")
    async with serve({}) as api, serve({"/metrics": text_handler(body)}) as metrics, http_client() as client:
        m = await ServerScraper(endpoint(api, metrics_url=metrics + "/metrics")).scrape(client)
    assert (m.kind, m.status, m.requests_waiting) == ("triton", "ok", 1.0)


async def test_llamacpp_without_metrics_flag_answers_501() -> None:
    # llama-server's own error body when started without --metrics
    body = json.dumps(
        {
            "error": {
                "code": 501,
                "message": "This server does not support metrics endpoint.",
                "type": "not_supported_error",
            }
        }
    )
    hits: list[web.Request] = []
    async with (
        serve({"/metrics": text_handler(body, status=501, hits=hits)}) as origin,
        http_client() as client,
    ):
        scraper = ServerScraper(endpoint(origin))
        m = await scraper.scrape(client)
        again = await scraper.scrape(client)
    assert m.status == "no /metrics: llama.cpp answers 501 — start llama-server with --metrics"
    assert m.kind == "llamacpp"
    assert again.status == m.status
    assert len(hits) == 1  # asked again only after recheck_s, not on every call


async def test_404_is_a_normal_state_with_a_reason() -> None:
    async with serve({}) as origin, http_client() as client:
        m = await ServerScraper(endpoint(origin)).scrape(client)
    assert m.status.startswith("no /metrics: HTTP 404")
    assert m.kind == "unknown"
    assert m.requests_running is None and m.kv_cache_usage is None


async def test_without_metrics_the_server_is_asked_what_it_is() -> None:
    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "qwen", "owned_by": "sglang"}]})

    async with serve({"/v1/models": models}) as origin, http_client() as client:
        scraper = ServerScraper(endpoint(origin))
        m = await scraper.scrape(client)
    assert m.status.startswith("no /metrics: HTTP 404")
    assert m.kind == "sglang" and scraper.kind == "sglang"
    assert m.requests_running is None


async def test_connection_refused() -> None:
    port = free_port()
    async with http_client() as client:
        m = await ServerScraper(endpoint(f"http://127.0.0.1:{port}")).scrape(client)
    assert m.status == f"no /metrics: connection refused (127.0.0.1:{port})"


async def test_hang_times_out_in_bounded_time() -> None:
    release = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(release.wait(), 10)
        return web.Response(text="late")

    async with serve({"/metrics": hang}) as origin, http_client() as client:
        started = time.monotonic()
        m = await ServerScraper(endpoint(origin), timeout_s=0.3).scrape(client)
        elapsed = time.monotonic() - started
        release.set()
    assert m.status.startswith("no /metrics: timed out after 0.3 s")
    assert elapsed < 2.0


async def test_trickling_body_hits_the_overall_deadline() -> None:
    release = asyncio.Event()

    async def trickle(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        for _ in range(100):  # one byte per 0.1 s: each read is quick, the whole never ends
            if release.is_set():
                break
            await resp.write(b"#")
            await asyncio.sleep(0.1)
        return resp

    async with serve({"/metrics": trickle}) as origin, http_client() as client:
        started = time.monotonic()
        m = await ServerScraper(endpoint(origin), timeout_s=0.3).scrape(client)
        elapsed = time.monotonic() - started
        release.set()
    assert "timed out" in m.status
    assert elapsed < 2.0


async def test_garbage_body_is_an_error_status() -> None:
    async def html(request: web.Request) -> web.Response:
        return web.Response(text="<html><body>Welcome</body></html>", content_type="text/html")

    async with serve({"/metrics": html}) as origin, http_client() as client:
        m = await ServerScraper(endpoint(origin)).scrape(client)
    assert m.status.startswith("error: /metrics is not Prometheus text (text/html: ")


async def test_ollama_found_through_api_ps_after_404() -> None:
    payload = (METRICS / "ollama-api-ps-handwritten.json").read_text(encoding="utf-8")

    async def ps(request: web.Request) -> web.Response:
        return web.Response(text=payload, content_type="application/json")

    async with serve({"/api/ps": ps}) as origin, http_client() as client:
        scraper = ServerScraper(endpoint(origin))
        m = await scraper.scrape(client)
        forced = await ServerScraper(endpoint(origin, server_kind="ollama")).scrape(client)
    assert (m.kind, m.status, m.models_loaded) == ("ollama", "ok", 2)
    assert m.models == ("gemma3:4b", "llama3.1:70b")
    assert forced.models == m.models


async def test_single_flight() -> None:
    hits: list[web.Request] = []
    body = capture("llamacpp-server-0c1e5709-local-capture-after-load.txt")
    async with (
        serve({"/metrics": text_handler(body, hits=hits, delay=0.2)}) as origin,
        http_client() as client,
    ):
        scraper = ServerScraper(endpoint(origin))
        a, b = await asyncio.gather(scraper.scrape(client), scraper.scrape(client))
    assert len(hits) == 1
    assert a is b and a.kind == "llamacpp"


async def test_forced_kind_wins_over_detection() -> None:
    body = capture("sglang-2025-sglang-docs-production_metrics.txt")
    async with serve({"/metrics": text_handler(body)}) as origin, http_client() as client:
        m = await ServerScraper(endpoint(origin, server_kind="vllm")).scrape(client)
    assert m.kind == "vllm"
    assert m.requests_running is None  # no vllm:* names in an SGLang scrape


async def test_probe_kind() -> None:
    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "tiny-llama", "owned_by": "vllm"}]})

    async def version(request: web.Request) -> web.Response:
        return web.json_response({"version": "0.12.6"})

    async def ps(request: web.Request) -> web.Response:
        return web.json_response({"models": []})

    async def props(request: web.Request) -> web.Response:
        return web.json_response({"default_generation_settings": {}, "total_slots": 4})

    async with http_client() as client:
        async with serve({"/v1/models": models}) as origin:
            assert await probe_kind(client, endpoint(origin)) == "vllm"
        async with serve({"/api/version": version, "/api/ps": ps}) as origin:
            assert await probe_kind(client, endpoint(origin)) == "ollama"
        async with serve({"/props": props}) as origin:
            assert await probe_kind(client, endpoint(origin)) == "llamacpp"
        async with serve({}) as origin:
            assert await probe_kind(client, endpoint(origin)) is None


@contextlib.asynccontextmanager
async def dropping_server(drop: set[int], body: str) -> AsyncIterator[tuple[str, list[tuple[int, int]]]]:
    """A raw loopback server with keep-alive that reads each request and hangs up without an answer when
    the request's number (1, 2, ... over all connections) is in `drop`, else answers with `body`; yields
    (origin, (connection, request) numbers seen)."""
    seen: list[tuple[int, int]] = []
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        number = connections
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                await reader.readuntil(b"\r\n\r\n")
                seen.append((number, len(seen) + 1))
                if len(seen) in drop:
                    break
                data = body.encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                             + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        server.close()
        await server.wait_closed()


async def test_a_scrape_dropped_on_a_kept_alive_connection_is_sent_once_more() -> None:
    """llama.cpp closes idle connections after 5 s: the next scrape on that connection gets no answer.
    The client sends it again on a new connection (its stale-connection retry), so the scrape is ok."""
    body = capture("llamacpp-server-0c1e5709-local-capture-after-load.txt")
    async with dropping_server({2}, body) as (origin, seen), http_client() as client:
        scraper = ServerScraper(endpoint(origin))
        first = await scraper.scrape(client)
        second = await scraper.scrape(client)
    assert (first.status, first.kind) == ("ok", "llamacpp"), first.status
    assert second.status == "ok", second.status
    assert seen == [(1, 1), (1, 2), (2, 3)]  # the second scrape's request, dropped on connection 1, sent again on 2


async def test_a_fresh_connection_that_drops_is_an_error_and_not_sent_again() -> None:
    async with dropping_server({1, 2, 3}, "") as (origin, seen), http_client() as client:
        m = await ServerScraper(endpoint(origin)).scrape(client)
    assert m.status.startswith("error: /metrics request failed (RemoteProtocolError"), m.status
    assert seen == [(1, 1)]  # a new connection that hangs up is the server's answer, not a stale reuse


async def test_a_last_scrape_can_ask_for_the_histograms() -> None:
    """Between two histogram reads (every 10 s) the last ones stand in; `once`'s last scrape must cover
    every probe before it, so it can ask for them."""
    name = "vllm:time_to_first_token_seconds"
    pages = [f'vllm:num_requests_running 0\n{name}_bucket{{le="0.1"}} {n}\n{name}_bucket{{le="+Inf"}} {n}\n'
             f'{name}_count {n}\n{name}_sum {n * 0.05}\n' for n in (0, 2, 5, 9)]

    async def handle(request: web.Request) -> web.Response:
        return web.Response(text=pages.pop(0), content_type="text/plain")

    now = [100.0]
    async with serve({"/metrics": handle}) as origin, http_client() as client:
        scraper = ServerScraper(endpoint(origin), clock=lambda: now[0])
        for _ in range(2):  # the first two read them
            await scraper.scrape(client)
            now[0] += 2.0
        carried = await scraper.scrape(client)  # 2 s after the last read: the last ones stand in
        now[0] += 2.0
        forced = await scraper.scrape(client, histograms=True)
    assert carried.server_ttft_ms is not None and carried.server_ttft_ms.count == 2
    assert forced.server_ttft_ms is not None and forced.server_ttft_ms.count == 9
    assert forced.server_ttft_ms.mean == pytest.approx(50.0)
