"""OTLP trace bodies for the receiver's tests, built with opentelemetry-proto as a server's SDK would."""

from __future__ import annotations

import json
import os
import time

from lpxtop.engine.traces import otlp

VLLM_SECONDS = {
    "gen_ai.latency.time_in_queue": "queue",
    "gen_ai.latency.time_in_model_prefill": "prefill",
    "gen_ai.latency.time_in_model_decode": "decode",
    "gen_ai.latency.time_to_first_token": "ttft",
    "gen_ai.latency.e2e": "e2e",
}


def new_trace_id() -> str:
    return os.urandom(16).hex()


def span(name: str, trace_id: str, *, start_ns: int | None = None, duration_ms: float = 50.0,
         attributes: dict | None = None):
    """One Span message; attribute values typed as given (float -> double, int -> int, str -> string)."""
    p = otlp.load()
    start = time.time_ns() - int(duration_ms * 1e6) if start_ns is None else start_ns
    message = p.Span(trace_id=bytes.fromhex(trace_id), span_id=os.urandom(8), name=name, kind=2,
                     start_time_unix_nano=start, end_time_unix_nano=start + int(duration_ms * 1e6))
    for key, value in (attributes or {}).items():
        kv = message.attributes.add(key=key)
        if isinstance(value, bool):
            kv.value.bool_value = value
        elif isinstance(value, str):
            kv.value.string_value = value
        elif isinstance(value, int):
            kv.value.int_value = value
        else:
            kv.value.double_value = value
    return message


def vllm_span(trace_id: str, *, queue: float = 0.004, prefill: float = 0.010, decode: float = 0.200,
              ttft: float = 0.016, e2e: float = 0.220, start_ns: int | None = None, **extra):
    """vLLM V1's `llm_request` span with its latency attributes (seconds, as vLLM sends them)."""
    values = {"queue": queue, "prefill": prefill, "decode": decode, "ttft": ttft, "e2e": e2e}
    attributes = {key: values[name] for key, name in VLLM_SECONDS.items() if values[name] is not None}
    attributes.update({"gen_ai.usage.prompt_tokens": 12, "gen_ai.usage.completion_tokens": 32,
                       "gen_ai.request.id": "chatcmpl-test"})
    attributes.update(extra)
    return span("llm_request", trace_id, start_ns=start_ns, duration_ms=e2e * 1000 if e2e else 50.0,
                attributes=attributes)


def request(*spans, service: str = "vllm"):
    """An ExportTraceServiceRequest holding `spans` under one resource."""
    p = otlp.load()
    message = p.ExportTraceServiceRequest()
    resource_spans = message.resource_spans.add()
    resource_spans.resource.attributes.add(key="service.name").value.string_value = service
    resource_spans.scope_spans.add().spans.extend(spans)
    return message


def protobuf_body(*spans, service: str = "vllm") -> bytes:
    return request(*spans, service=service).SerializeToString()


def json_body(*spans, service: str = "vllm") -> bytes:
    """OTLP/JSON: protobuf's JSON mapping with trace and span ids as hex (the specification's exception)."""
    p = otlp.load()
    document = p.json_format.MessageToDict(request(*spans, service=service))
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for item in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in item:
                        import base64

                        item[key] = base64.b64decode(item[key]).hex()
    return json.dumps(document).encode()


def varint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out



def proto_field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload
