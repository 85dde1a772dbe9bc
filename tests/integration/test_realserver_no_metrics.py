"""llama-server started without --metrics: lpxtop says why in one line, and the probe still works."""

from __future__ import annotations

import inspect

import httpx
import pytest

from lpxtop.model.endpoint import EndpointConfig
from tests.support.realservers import LLAMA_MODEL, import_lpxtop, raw_scrape

pytestmark = [pytest.mark.realserver, pytest.mark.timeout(300)]


async def test_llamacpp_without_metrics_flag(llama_server_no_metrics) -> None:
    servers = import_lpxtop("lpxtop.engine.scrape.servers", "ServerScraper")
    probe = import_lpxtop("lpxtop.engine.probe", "run_probe")
    httpclient = import_lpxtop("lpxtop.http", "HttpClient")
    server = llama_server_no_metrics
    endpoint = EndpointConfig(name="llama-nometrics", url=server.api_url, model=LLAMA_MODEL, max_tokens=16)
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0)) as client, httpclient.HttpClient(timeout=30.0) as ours:
        raw = await raw_scrape(client, server.origin)
        assert raw.status == 501  # what the server does, seen directly
        result = servers.ServerScraper(endpoint).scrape(ours)
        metrics = await result if inspect.isawaitable(result) else result
        sample = await probe.run_probe(ours, endpoint)

    assert metrics.status != "ok"
    assert "501" in metrics.status, metrics.status
    assert "\n" not in metrics.status and len(metrics.status) <= 200, metrics.status
    assert metrics.requests_running is None and metrics.requests_waiting is None
    assert metrics.kv_cache_usage is None

    assert sample.ok, sample.error_text
    assert sample.http_status == 200
    assert 0 < sample.ttft_ms <= sample.e2e_ms
    assert sample.output_tokens and not sample.output_tokens_approx  # from llama-server's usage chunk
