"""Which model a probe sends, and which models the endpoint serves (`GET /v1/models`).

A configured model is sent at once; without one, the first model the server lists. The list is asked
again now and then beside the probes (the ports' mismatch check compares it with the process behind the
port), and a probe refused for its model names the models the server does serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from lpxtop.engine.diagnosis import model_matches, model_not_served, no_model_listed
from lpxtop.engine.probe import fetch_models
from lpxtop.engine.probe.models import MODELS_TIMEOUT_S
from lpxtop.http import HttpClient
from lpxtop.model.probe import Sample
from lpxtop.textsafe import scrub

if TYPE_CHECKING:
    from lpxtop.engine.endpoints import EndpointState

# GET /v1/models is bounded as a whole by MODELS_TIMEOUT_S, or the endpoint's --timeout when shorter (a trickle
# is cut)
MODELS_RECHECK_S = 60.0
MODEL_REFUSAL_KINDS = ("http_404", "http_4xx")  # how servers refuse a model they do not serve (404; some 400)


async def resolve_model(state: EndpointState, client: HttpClient) -> tuple[str | None, str | None]:
    """The model to send. Once a model is known (configured, or listed before) the probe does not wait:
    GET /v1/models (for the ports' mismatch check) runs beside it now and then. Without one, the
    probe needs its answer, so each probe asks until a model is known, and a failure keeps its own
    kind (`refused`, `tls`, `http_401` ...: engine/diagnosis.py says what to do)."""
    now = time.monotonic()
    if state.model is not None:
        stale = not state.models_known or now - state.models_checked_at >= MODELS_RECHECK_S
        if stale and (state.models_task is None or state.models_task.done()):
            state.models_checked_at = now
            state.models_task = asyncio.create_task(check_models(state, client), name=f"models:{state.config.name}")
        return state.model, None
    state.models_checked_at = now
    error = await check_models(state, client)
    if state.model is None:
        return None, error or f"no_model: {no_model_listed(state.config)}"
    return state.model, None


async def name_served_models(state: EndpointState, sample: Sample, model: str | None) -> Sample:
    """A probe refused for its model (a typo in --model, most often): say which models the server does serve,
    from GET /v1/models (waiting, bounded, for the check that runs beside the first probe)."""
    if sample.error_kind not in MODEL_REFUSAL_KINDS or model is None:
        return sample
    task = state.models_task
    if task is not None and not task.done():
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(task), MODELS_TIMEOUT_S)
    served = state.served_models
    if not served or model_matches(model, served) or (
        sample.error_kind != "http_404" and "model" not in (sample.error_message or "").lower()
    ):
        return sample
    return replace(sample, error_message=model_not_served(model, served))


async def check_models(state: EndpointState, client: HttpClient) -> str | None:
    """Ask GET /v1/models, bounded as a whole (as the endpoint's requests are); returns the error, if any."""
    ids, error = await fetch_models(client, state.config, min(MODELS_TIMEOUT_S, state.config.timeout_s))
    ids = tuple(t for t in (scrub(i) for i in ids) if t)  # model ids are outside text
    # on failure nothing is known to be served: a stale list would hide a port taken over by another process
    state.served_models = ids
    state.models_known = True
    state.models_checked_at = time.monotonic()
    if state.config.model is None and ids:
        state.model = ids[0]
    state.changed()
    return error
