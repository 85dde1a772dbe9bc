"""Which inference server is this? From /metrics names, or by asking its other endpoints."""

from __future__ import annotations

from typing import Any

from lpxtop.engine.scrape.exposition import Exposition
from lpxtop.engine.scrape.metric_names import KINDS, KindNames
from lpxtop.engine.scrape.ollama import looks_like_ps
from lpxtop.http import HttpClient
from lpxtop.model.endpoint import EndpointConfig

PROBE_TIMEOUT = 3.0

MAX_JSON_BYTES = 4 * 1024 * 1024

# /v1/models `owned_by` values that name the server (vLLM, SGLang, llama-server, LMDeploy say so).
OWNED_BY = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llamacpp", "lmdeploy": "lmdeploy", "tgi": "tgi"}


def detect_kind(expo: Exposition) -> KindNames | None:
    """The kind whose metric-name prefix appears in the scrape, in KINDS' priority order."""
    present = {k.kind: False for k in KINDS}
    for name in expo.names:
        for k in KINDS:
            if not present[k.kind] and name.startswith(k.prefixes):
                present[k.kind] = True
    return next((k for k in KINDS if present[k.kind]), None)


async def probe_kind(client: HttpClient, endpoint: EndpointConfig) -> str | None:
    """Ask a server what it is, for servers without /metrics; None when nothing says. Never raises.

    Tries, each bounded by a 3 s timeout: /v1/models `owned_by`, Ollama's /api/version and
    /api/ps, TGI's /info, llama.cpp's /props.
    """
    models = await _get_json(client, endpoint.url.rstrip("/") + "/models", endpoint.sent_headers)
    if isinstance(models, dict) and isinstance(models.get("data"), list):
        for m in models["data"]:
            owner = m.get("owned_by") if isinstance(m, dict) else None
            if isinstance(owner, str) and owner.lower() in OWNED_BY:
                return OWNED_BY[owner.lower()]
    origin = endpoint.origin
    version = await _get_json(client, origin + "/api/version")
    if (
        isinstance(version, dict)
        and set(version) == {"version"}
        and looks_like_ps(await _get_json(client, origin + "/api/ps"))
    ):
        return "ollama"
    info = await _get_json(client, origin + "/info")
    if isinstance(info, dict) and ("router" in info or "max_input_tokens" in info) and "model_id" in info:
        return "tgi"
    props = await _get_json(client, origin + "/props")
    if isinstance(props, dict) and ("default_generation_settings" in props or "total_slots" in props):
        return "llamacpp"
    return None


async def _get_json(client: HttpClient, url: str, headers: dict[str, str] | None = None) -> Any:
    try:
        # PROBE_TIMEOUT bounds the whole GET (the client's total), so a trickled body is cut too.
        r = await client.get(url, headers=headers, timeout=PROBE_TIMEOUT, max_bytes=MAX_JSON_BYTES)
        if r.status_code != 200:
            return None
        return r.json()
    except Exception:  # any failure just means "this endpoint does not tell us"
        return None
