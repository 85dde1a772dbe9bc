"""Auto-discovery against real servers on loopback ports."""

from __future__ import annotations

import sys
import time

import pytest
from aiohttp import web

from lpxtop.engine.system.discovery import USUAL_PORTS, candidate_ports, discover, discover_sync
from lpxtop.http import HttpClient
from lpxtop.model.endpoint import EndpointConfig
from tests.support.ports import free_port, listener_pids, running_children
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def children(tmp_path):
    with running_children(tmp_path) as kids:
        yield kids


def at(found: list[EndpointConfig], port: int) -> EndpointConfig | None:
    hits = [ep for ep in found if ep.port == port]
    return hits[0] if hits else None


async def test_finds_the_sim_on_an_extra_port(children):
    port = free_port()
    children.sim(port, "disc-model")
    found = await discover(extra_ports=[port], include_usual=False)
    assert at(found, port) == EndpointConfig(
        name=f"lpxtop-sim:{port}", url=f"http://127.0.0.1:{port}/v1", model="disc-model", discovered=True
    )


async def test_finds_a_server_from_its_command_line(children):
    # No extra_ports: the port comes from the process (a known server kind, `--port N` in its cmdline).
    port = free_port()
    children.sim_as("vllm", port, "cmdline-model")
    assert candidate_ports(include_usual=False).get(port) == "vllm"
    found = await discover(include_usual=False)
    ep = at(found, port)
    assert ep is not None and ep.name == f"vllm:{port}" and ep.model == "cmdline-model" and ep.discovered


async def test_known_server_asking_for_a_key_is_listed_without_a_model(children):
    port = free_port()
    children.sim_as("vllm", port, "keyed-model", "--api-key", "sekrit-1")
    found = await discover(include_usual=False)
    assert at(found, port) == EndpointConfig(
        name=f"vllm:{port}", url=f"http://127.0.0.1:{port}/v1", model=None, discovered=True
    )


async def test_default_scan_includes_usual_ports_and_stays_bounded(children):
    port = free_port()
    children.sim(port, "disc-default")
    assert set(USUAL_PORTS) <= set(candidate_ports())
    start = time.monotonic()
    found = await discover(extra_ports=[port], timeout_s=1.0)
    # Other servers on this machine may answer on the usual ports; ours must be there, all on loopback.
    assert at(found, port) is not None and at(found, port).model == "disc-default"
    assert all(ep.host == "127.0.0.1" and ep.discovered for ep in found)
    assert time.monotonic() - start < 10


async def test_ollama_without_v1_models_is_found_through_its_native_api():
    # An older Ollama: /api/version and /api/tags, and no /v1/models (404).
    async def version(request):
        return web.json_response({"version": "0.1.32"})

    async def tags(request):
        return web.json_response(
            {"models": [{"name": "llama3:latest", "size": 1}, {"name": "qwen2:7b", "size": 2}]}
        )

    app = web.Application()
    app.add_routes([web.get("/api/version", version), web.get("/api/tags", tags)])
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        async with HttpClient() as client:
            found = await discover(client, extra_ports=[port], include_usual=False)
    finally:
        await runner.cleanup()
    assert at(found, port) == EndpointConfig(
        name=f"ollama:{port}", url=f"http://127.0.0.1:{port}/v1", model="llama3:latest", discovered=True
    )


async def test_plain_web_server_and_closed_port_are_not_servers(children):
    web_port = free_port()
    closed_port = free_port()
    proc = children.start([sys.executable, "-m", "http.server", str(web_port), "--bind", "127.0.0.1"])
    wait_for(lambda: proc.pid in listener_pids(web_port), timeout=15)
    found = await discover(extra_ports=[web_port, closed_port], include_usual=False, timeout_s=0.5)
    assert at(found, web_port) is None and at(found, closed_port) is None


def test_sync_wrapper(children):
    port = free_port()
    children.sim(port, "disc-sync")
    found = discover_sync(extra_ports=[port], include_usual=False)
    assert at(found, port) is not None and at(found, port).model == "disc-sync"
