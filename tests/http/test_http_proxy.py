"""Proxies: HTTP_PROXY / HTTPS_PROXY / ALL_PROXY / NO_PROXY, as urllib reads them.

A forward proxy written in the test runs on 127.0.0.1 and is the only thing that resolves the target
name `inference.internal` (to 127.0.0.1), so every byte stays on loopback and a request that did not go
through the proxy could not have reached its target.
"""

from __future__ import annotations

import base64
import ssl
import urllib.request

import pytest

from lpxtop import textsafe
from lpxtop.engine.probe import run_probe
from lpxtop.engine.probe.errors import classify_exception
from lpxtop.http import HttpClient, ProxyError, UnsupportedProtocol, is_loopback
from lpxtop.http.proxies import ProxySettings
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.http_servers import (
    ForwardProxy,
    answer_each,
    answer_once,
    make_certificate,
    raw_server,
    server_tls,
)
from tests.support.ports import free_port
from tests.support.sim import endpoint

pytestmark = pytest.mark.timeout(30)

PASSWORD = "pa@ss-word-91"
MODELS = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 34\r\n\r\n{"data": [{"id": "remote-model"}]}'


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    return make_certificate(tmp_path_factory.mktemp("tls"), "inference.internal")


async def test_http_through_the_proxy_in_absolute_form_with_credentials(monkeypatch):
    seen: list = []
    proxy = ForwardProxy()
    async with raw_server(answer_once(MODELS, seen)) as target, proxy.running():
        monkeypatch.setenv("HTTP_PROXY", f"http://lpx%20user:{PASSWORD.replace('@', '%40')}@127.0.0.1:{proxy.port}")
        async with HttpClient(timeout=5.0) as client:
            response = await client.get(f"http://inference.internal:{target}/v1/models")
    assert response.json()["data"][0]["id"] == "remote-model"
    (line, headers), = proxy.seen
    assert line == f"GET http://inference.internal:{target}/v1/models HTTP/1.1".encode()
    assert headers["host"] == f"inference.internal:{target}"
    token = base64.b64encode(f"lpx user:{PASSWORD}".encode()).decode()
    assert headers["proxy-authorization"] == f"Basic {token}"
    assert "proxy-authorization" not in seen[0][1], "the credentials are the proxy's, not the target's"
    assert PASSWORD not in textsafe.redact(f"echo {PASSWORD} {token}") and token not in textsafe.redact(token)


async def test_https_through_a_connect_tunnel(monkeypatch, certificate):
    cert, key = certificate
    proxy = ForwardProxy()
    async with raw_server(answer_each(MODELS), ssl_context=server_tls(cert, key)) as target, proxy.running():
        monkeypatch.setenv("https_proxy", f"127.0.0.1:{proxy.port}")  # lower case, no scheme: as urllib reads it
        context = ssl.create_default_context(cafile=str(cert))
        async with HttpClient(timeout=5.0, ssl_context=context) as client:
            for _ in range(2):
                response = await client.get(f"https://inference.internal:{target}/v1/models")
                assert response.json()["data"][0]["id"] == "remote-model"
            assert client.open_connections == 1
    (line, headers), = proxy.seen  # one tunnel, kept alive for both requests
    assert line == f"CONNECT inference.internal:{target} HTTP/1.1".encode()
    assert headers["host"] == f"inference.internal:{target}"


async def test_a_probe_through_the_proxy(monkeypatch):
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=2, api_key=None)) as sim:
        proxy = ForwardProxy()
        async with proxy.running():
            monkeypatch.setenv("ALL_PROXY", f"http://127.0.0.1:{proxy.port}")
            async with HttpClient(timeout=5.0) as client:
                sample = await run_probe(client, endpoint(f"http://inference.internal:{sim.port}/v1", model="m"))
    assert sample.ok, sample.error_text
    assert sample.output_tokens == 16
    assert proxy.seen[0][0].startswith(f"POST http://inference.internal:{sim.port}/v1/chat/completions".encode())


async def test_loopback_targets_never_go_through_the_proxy(monkeypatch):
    proxy = ForwardProxy(names=("127.0.0.1", "localhost"))
    async with raw_server(answer_each(MODELS)) as target, proxy.running():
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.port}")
        async with HttpClient(timeout=5.0) as client:
            for host in ("127.0.0.1", "localhost", "[::ffff:127.0.0.1]"):
                if host.startswith("[") and not _has_ipv6_mapped():
                    continue
                response = await client.get(f"http://{host}:{target}/v1/models")
                assert response.status_code == 200
    assert proxy.seen == []


def _has_ipv6_mapped() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::", 0))
        return True
    except OSError:
        return False


async def test_a_proxy_that_refuses_the_tunnel(monkeypatch):
    proxy = ForwardProxy(refuse_connect=407)
    async with proxy.running():
        monkeypatch.setenv("HTTPS_PROXY", f"http://user:{PASSWORD}@127.0.0.1:{proxy.port}")
        async with HttpClient(timeout=5.0) as client:
            with pytest.raises(ProxyError) as caught:
                await client.get("https://inference.internal:8443/v1/models")
            sample = await run_probe(client, endpoint("https://inference.internal:8443/v1", model="m"))
    assert caught.value.status_code == 407 and f"127.0.0.1:{proxy.port}" in str(caught.value)
    kind, message = classify_exception(caught.value, started_stream=False)
    assert kind == "http_4xx" and "407" in message and PASSWORD not in message
    assert sample.error_kind == "http_4xx" and sample.http_status == 407, sample.error_text
    assert "proxy" in sample.error_message and PASSWORD not in sample.error_message


async def test_a_proxy_that_cannot_be_reached_is_named(monkeypatch):
    port = free_port()  # nothing listens there
    monkeypatch.setenv("HTTP_PROXY", f"http://user:{PASSWORD}@127.0.0.1:{port}")
    async with HttpClient(timeout=5.0) as client:
        with pytest.raises(ProxyError) as caught:
            await client.get("http://inference.internal:8000/v1/models")
        sample = await run_probe(client, endpoint("http://inference.internal:8000/v1", model="m"))
    kind, message = classify_exception(caught.value, started_stream=False)
    assert kind == "refused" and f"proxy 127.0.0.1:{port}" in message and "HTTP_PROXY" in message
    assert PASSWORD not in message
    assert sample.error_kind == "refused" and "proxy" in sample.error_message


async def test_an_unusable_proxy_url_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "socks5://127.0.0.1:1080")
    async with HttpClient(timeout=5.0) as client:
        with pytest.raises(UnsupportedProtocol, match="socks5:// proxy; lpxtop can use http:// proxies only"):
            await client.get("https://inference.internal/v1/models")


@pytest.mark.parametrize(
    "no_proxy",
    ["", "*", "inference.internal", ".internal", "internal", "other.example,inference.internal:8000",
     "inference.internal:9999", " inference.internal , x", "INFERENCE.internal", "api.example.com"],
)
@pytest.mark.parametrize(
    "target", [("http", "inference.internal", 8000), ("https", "inference.internal", 443),
               ("http", "api.example.com", 80), ("https", "sub.api.example.com", 443), ("http", "10.1.2.3", 8000)],
)
def test_no_proxy_decisions_agree_with_urllib(no_proxy, target, monkeypatch):
    monkeypatch.setenv("http_proxy", "http://proxy.corp:3128")
    monkeypatch.setenv("HTTPS_PROXY", "http://secure-proxy.corp:3129")
    if no_proxy:
        monkeypatch.setenv("NO_PROXY", no_proxy)
    scheme, host, port = target
    settings = ProxySettings.from_environment()
    assert settings is not None
    proxy = settings.for_target(scheme, host, port)
    environment = urllib.request.getproxies_environment()
    expected = None if urllib.request.proxy_bypass_environment(f"{host}:{port}", environment) else environment[scheme]
    assert (None if proxy is None else f"http://{proxy.shown}") == expected


def test_the_environment_as_urllib_reads_it(monkeypatch):
    assert ProxySettings.from_environment() is None, "no variable: no proxy, no cost"
    monkeypatch.setenv("HTTP_PROXY", "http://upper:3128")
    monkeypatch.setenv("http_proxy", "http://lower:3128")
    settings = ProxySettings.from_environment()
    assert settings is not None and settings.for_target("http", "a.example", 80).host == "lower"
    monkeypatch.setenv("REQUEST_METHOD", "GET")  # CGI: an upper-case HTTP_PROXY may come from a client header
    monkeypatch.delenv("http_proxy")
    assert ProxySettings.from_environment() is None
    monkeypatch.delenv("REQUEST_METHOD")
    monkeypatch.setenv("ALL_PROXY", "http://all:3128")
    settings = ProxySettings.from_environment()
    assert settings.for_target("https", "a.example", 443).host == "all"
    assert settings.for_target("http", "a.example", 80).host == "upper"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("::ffff:127.0.0.1", True), ("localhost", True),
     ("LOCALHOST.", True), ("api.localhost", True), ("10.0.0.1", False), ("localhost.example.com", False),
     ("::2", False), ("inference.internal", False)],
)
def test_what_counts_as_loopback(host, loopback):
    assert is_loopback(host) is loopback
