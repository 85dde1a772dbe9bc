"""The chat and completions probe: one streaming request to an OpenAI-compatible endpoint, as a Sample.

The request is the measured stream's (stream.py) and its events are read by the chunk rule (chunks.py);
this module builds the request's body and turns the outcome into a `Sample`. TTFT is the first token
event, ITL the gaps between token events, E2E the last one; output tokens come from `usage` when it
holds a real count, else from the events (marked approximate). Definitions: docs/measurement.md.

Every failure becomes a classified Sample; no exception escapes except cancellation. Text that came
from the server (error messages, ids, the model name) goes through `textsafe.scrub` as it enters the
Sample, so a key a server echoes back, or a terminal escape in its message, reaches no screen or file.
The load generator's requests are this probe's requests (lpxtop/load/step.py).
"""

from __future__ import annotations

import secrets
import time

from lpxtop import textsafe
from lpxtop.engine.probe.chunks import ChunkSink
from lpxtop.engine.probe.stream import StreamOutcome, measured_stream
from lpxtop.http import HttpClient
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.probe import Sample

MAX_NAME_CHARS = 256  # a model id, response id or finish reason longer than this is cut


def build_body(endpoint: EndpointConfig, model: str | None, include_usage: bool = True) -> dict:
    """The streaming request body; a fresh random prefix defeats prefix caching so prefill time shows."""
    prompt = endpoint.prompt
    if endpoint.random_prefix:
        prompt = f"[{secrets.token_hex(6)}] {prompt}"
    body: dict = {"max_tokens": endpoint.max_tokens, "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    if model:
        body["model"] = model
    if endpoint.api == "completions":
        body["prompt"] = prompt
    else:
        body["messages"] = [{"role": "user", "content": prompt}]
    body.update(endpoint.extra_body)  # e.g. ignore_eos for a load test
    return body


def endpoint_path(endpoint: EndpointConfig) -> str:
    return endpoint.api_url("/completions" if endpoint.api == "completions" else "/chat/completions")


def rejects_stream_options(sample: Sample) -> bool:
    """An older server that refuses `stream_options` (HTTP 400/422 naming it): probe again without it."""
    return sample.http_status in (400, 422) and "stream_options" in (sample.error_message or "")


async def run_probe(
    client: HttpClient, endpoint: EndpointConfig, model: str | None = None, *, include_usage: bool = True,
    ttft_from: str = "sent",
) -> Sample:
    """Send one streaming request and measure it. Never raises (except CancelledError). `ttft_from`: where
    its clock starts (stream.py TTFT_FROM)."""
    body = build_body(endpoint, model or endpoint.model, include_usage)
    sink = ChunkSink()
    out = await measured_stream(client, endpoint, endpoint_path(endpoint), body, sink, ttft_from=ttft_from)
    return _sample(endpoint, sink, out)


def failed_sample(config: EndpointConfig, error: str) -> Sample:
    """A probe that could not be sent (no model, the deadline), from its '<kind>: <message>' error."""
    kind, _, message = error.partition(": ")
    return Sample(
        endpoint=config.name,
        wall_time=time.time(),
        start_ns=time.perf_counter_ns(),
        ok=False,
        error_kind=kind or "other",
        error_message=message or None,
    )


def name(value: object) -> str | None:
    """A name the server sent (model id, response id, finish reason): a bounded, safe string, or None."""
    if isinstance(value, str) and value:
        return textsafe.scrub(value[:MAX_NAME_CHARS])
    return None


def _sample(endpoint: EndpointConfig, sink: ChunkSink, out: StreamOutcome) -> Sample:
    start_ns = out.start_ns
    token_ms = tuple((t - start_ns) / 1e6 for t in sink.token_ns)
    if sink.usage_completion is not None:
        n, approx = sink.usage_completion, False
    elif sink.token_ns:
        n, approx = sum(sink.tokens_per_event), True
    else:
        n, approx = None, False
    return Sample(
        endpoint=endpoint.name,
        wall_time=out.wall_time,
        start_ns=start_ns,
        ok=out.ok,
        error_kind=out.error_kind,
        error_message=textsafe.scrub(out.error_message),
        http_status=out.status,
        response_id=name(sink.response_id),
        model=name(sink.model),
        connect_ms=out.ms(out.connect_ns) if out.connect_ns is not None else 0.0,
        first_event_ms=out.ms(sink.first_event_ns),
        ttft_ms=token_ms[0] if token_ms else None,
        e2e_ms=token_ms[-1] if token_ms else None,
        token_event_ms=token_ms,
        tokens_per_event=tuple(sink.tokens_per_event),
        output_tokens=n,
        output_tokens_approx=approx,
        prompt_tokens=sink.usage_prompt,
        finish_reason=name(sink.finish_reason),
        retry_after_s=out.retry_after_s,
        end_wall_time=time.time(),
        pool_wait_ms=out.pool_wait_ns / 1e6 if out.pool_wait_ns is not None else None,
        redirected_to=out.redirected_to,
        trace_id=out.trace.trace_id,
        span_id=out.trace.span_id,
        sent_wall_ns=out.sent_wall_ns,
    )
