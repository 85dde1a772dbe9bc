"""The endpoint's model list (`GET /v1/models`), which the probes ask when no model is configured."""

from __future__ import annotations

import asyncio

from lpxtop import textsafe
from lpxtop.engine.diagnosis import MODELS_REQUEST, explain
from lpxtop.engine.probe.chat import MAX_NAME_CHARS
from lpxtop.engine.probe.errors import MAX_ERROR_BODY, classify_exception, error_message, http_error_kind
from lpxtop.engine.probe.stream import request_headers
from lpxtop.http import (
    BodyTooLarge,
    ConnectTimeout,
    HttpClient,
    HttpTimeout,
    PoolTimeout,
    Timeout,
)
from lpxtop.model.endpoint import EndpointConfig

MODELS_TIMEOUT_S = 5.0
MAX_MODEL_IDS = 1000
MODELS_MAX_BYTES = 4 * 1024 * 1024


async def fetch_models(
    client: HttpClient, endpoint: EndpointConfig, timeout_s: float = MODELS_TIMEOUT_S
) -> tuple[tuple[str, ...], str | None]:
    """Model ids from GET /v1/models, or () and a classified '<kind>: <message>' error whose message says
    what to do (engine/diagnosis.py). Never raises (except CancelledError)."""
    ids, error = await _ask_models(client, endpoint, timeout_s)
    if error is not None:
        kind, _, message = error.partition(": ")
        error = f"{kind}: {textsafe.scrub(explain(kind, message, endpoint, request=MODELS_REQUEST))}"
    return ids, error


async def _ask_models(
    client: HttpClient, endpoint: EndpointConfig, timeout_s: float
) -> tuple[tuple[str, ...], str | None]:
    """Model ids from GET /v1/models, or () and a classified '<kind>: <message>' error. Never raises
    (except CancelledError).

    Bounded as a whole by `timeout_s` (the client's total: a 200 that trickles a byte a second is cut
    when the time is up, though each read alone would be on time). The ids are server text: bounded in
    number and length and scrubbed like every other.
    """
    try:
        response = await client.get(
            endpoint.api_url("/models"),
            headers=request_headers(endpoint, stream=False),
            timeout=Timeout(connect=min(timeout_s, endpoint.connect_timeout_s), read=timeout_s, write=timeout_s,
                            pool=timeout_s, total=timeout_s),
            max_bytes=MODELS_MAX_BYTES,
        )
    except asyncio.CancelledError:
        raise
    except BodyTooLarge:
        return (), f"bad_json: GET /models answered more than {MODELS_MAX_BYTES} bytes"
    except HttpTimeout as exc:
        kind = "connect_timeout" if isinstance(exc, ConnectTimeout | PoolTimeout) else "read_timeout"
        return (), f"{kind}: GET /models took longer than {timeout_s:g} s"
    except Exception as exc:  # noqa: BLE001
        kind, msg = classify_exception(exc, started_stream=False)
        return (), textsafe.scrub(f"{kind}: {msg}")
    if response.status_code != 200:
        message = error_message(response.content[:MAX_ERROR_BODY])
        return (), textsafe.scrub(f"{http_error_kind(response.status_code)}: HTTP {response.status_code} on GET /models: {message}")
    try:
        data = response.json().get("data", [])
        ids = tuple(
            textsafe.scrub(str(d["id"])[:MAX_NAME_CHARS])
            for d in data[:MAX_MODEL_IDS]
            if isinstance(d, dict) and isinstance(d.get("id"), str | int) and not isinstance(d.get("id"), bool)
        )
    except (ValueError, AttributeError, TypeError, RecursionError):
        return (), "bad_json: GET /models did not return an OpenAI model list"
    return tuple(i for i in ids if i), None
