"""Find inference servers running on this machine (`lpxtop --discover`).

Candidate ports come from listening sockets owned by known server processes, from their command
lines (``--port 8011``), from the usual default ports and from `extra_ports`. Each candidate is
confirmed on 127.0.0.1 only, with GET /v1/models (or Ollama's /api/version), bounded in time and
concurrency. Nothing is sent anywhere but loopback.

Every bound is on a whole request, and the whole discovery has a deadline: a candidate that answers
200 and then trickles its body a byte a second is cut when its time is up (each read alone would
have been on time), and discovery ends by its deadline whatever the candidates do.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Iterable

from lpxtop.engine.system.listeners import scan_listeners
from lpxtop.engine.system.patterns import ports_in_cmdline
from lpxtop.engine.system.processes import scan_processes
from lpxtop.http import HttpClient, HttpError
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.textsafe import scrub

# vLLM/TGI/trtllm-serve 8000, SGLang 30000, llama-server 8080, 3000 (TGI docs, many wrappers),
# Ollama 11434, LMDeploy 23333.
USUAL_PORTS: tuple[int, ...] = (8000, 30000, 8080, 3000, 11434, 23333)
MAX_CANDIDATES = 64  # a machine with hundreds of server processes still gets a bounded scan
LOOPBACK = "127.0.0.1"
DEADLINE_S = 5.0  # discovery as a whole


def candidate_ports(extra_ports: Iterable[int] = (), include_usual: bool = True) -> dict[int, str | None]:
    """Ports worth asking, with the server kind of the process behind each when known. Blocking.

    Asked-for ports come first, so the MAX_CANDIDATES bound never drops them.
    """
    kinds: dict[int, str] = {}
    table = scan_processes()
    scan = scan_listeners()
    for port, listeners in sorted(scan.by_port.items()):
        for ls in listeners:
            info = table.get(ls.pid) if ls.pid is not None else None
            server = info.server if info is not None else None
            if server is not None and not server.worker and _reachable_on_loopback(ls.ip):
                kinds.setdefault(port, server.kind)
    for info in table.values():
        server = info.server
        if server is not None and not server.worker:
            for port in ports_in_cmdline(info.cmdline):
                kinds.setdefault(port, server.kind)
    order = [*(int(p) for p in extra_ports), *kinds, *(USUAL_PORTS if include_usual else ())]
    ports = list(dict.fromkeys(p for p in order if 0 < p < 65536))[:MAX_CANDIDATES]
    return {p: kinds.get(p) for p in ports}


def _reachable_on_loopback(ip: str) -> bool:
    try:
        addr = ipaddress.ip_address(ip.split("%")[0])
    except ValueError:
        return False
    return addr.is_unspecified or (addr.version == 4 and addr.is_loopback)


def _model_ids(payload: object) -> list[str] | None:
    """Model ids from an OpenAI /v1/models body (outside text, made safe), or None if it is not one."""
    if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
        return None
    ids = (scrub(d["id"]) for d in payload["data"] if isinstance(d, dict) and isinstance(d.get("id"), str))
    return [i for i in ids if i]


async def _get_json(client: HttpClient, url: str, timeout_s: float) -> tuple[int, object]:
    """(status, parsed JSON or None); status 0 when nothing answered in `timeout_s` (the whole request)."""
    try:
        resp = await client.get(url, timeout=timeout_s)  # a float: each phase and the whole request (total)
    except (HttpError, OSError):
        return 0, None
    try:
        return resp.status_code, resp.json()
    except ValueError:
        return resp.status_code, None


async def _confirm(
    client: HttpClient, port: int, kind: str | None, timeout_s: float
) -> EndpointConfig | None:
    origin = f"http://{LOOPBACK}:{port}"
    status, body = await _get_json(client, f"{origin}/v1/models", timeout_s)
    if status == 0:
        return None
    models = _model_ids(body) if status == 200 else None
    if models is None and status in (401, 403) and kind is not None:
        models = []  # a known server started with --api-key: list it; the probe will ask for the key
    if models is None:
        # Older Ollama has no /v1/models but always /api/version; its OpenAI API is still under /v1.
        v_status, v_body = await _get_json(client, f"{origin}/api/version", timeout_s)
        if v_status != 200 or not isinstance(v_body, dict) or "version" not in v_body:
            return None
        kind = "ollama"
        _, tags = await _get_json(client, f"{origin}/api/tags", timeout_s)
        raw = tags.get("models") if isinstance(tags, dict) else None
        names = (scrub(m["name"]) for m in raw or () if isinstance(m, dict) and isinstance(m.get("name"), str))
        models = [n for n in names if n]
    return EndpointConfig(
        name=f"{kind or 'local'}:{port}",
        url=f"{origin}/v1",
        model=models[0] if models else None,
        discovered=True,
    )


async def discover(
    client: HttpClient | None = None,
    timeout_s: float = 1.0,
    *,
    extra_ports: Iterable[int] = (),
    include_usual: bool = True,
    concurrency: int = 8,
    deadline_s: float = DEADLINE_S,
) -> list[EndpointConfig]:
    """Inference servers answering on 127.0.0.1, ordered by port. Never raises for a port that fails.

    `client`: reused if given, otherwise a private one. Each request is bounded by `timeout_s` as a
    whole, and discovery ends within `deadline_s` (the candidates confirmed by then are returned).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_s
    ports = await asyncio.to_thread(candidate_ports, tuple(extra_ports), include_usual)
    own = client is None
    if client is None:
        # The client has no proxy support: an HTTP(S)_PROXY variable never routes loopback probes elsewhere.
        client = HttpClient(timeout=timeout_s)
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(port: int, kind: str | None) -> EndpointConfig | None:
        async with gate:
            return await _confirm(client, port, kind, timeout_s)  # at most three requests, each bounded as a whole

    tasks = [asyncio.ensure_future(one(p, k)) for p, k in sorted(ports.items())]
    try:
        if tasks:
            await asyncio.wait(tasks, timeout=max(0.0, deadline - loop.time()))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if own:
            await client.aclose()
    found = [t.result() for t in tasks if not t.cancelled() and t.exception() is None]
    return [ep for ep in found if ep is not None]


def discover_sync(
    timeout_s: float = 1.0, *, extra_ports: Iterable[int] = (), include_usual: bool = True,
    deadline_s: float = DEADLINE_S,
) -> list[EndpointConfig]:
    """`discover()` for callers without an event loop (the CLI before the engine starts)."""
    return asyncio.run(discover(timeout_s=timeout_s, extra_ports=extra_ports, include_usual=include_usual,
                                deadline_s=deadline_s))
