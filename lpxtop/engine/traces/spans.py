"""Reading a server's request span into segments: vLLM, SGLang and TGI, each by its own names.

Only spans a reader knows by name are read, and only the attributes it knows; anything else is
counted, never guessed at. Where each server's names come from (see docs/traces.md for the versions):

- **vLLM** (V1; vllm/v1/engine/output_processor.py `do_tracing`, names in vllm/tracing/utils.py
  `SpanAttributes`): one SERVER span `llm_request` per request, started at the request's arrival, with
  `gen_ai.latency.time_in_queue`, `time_in_model_prefill`, `time_in_model_decode`,
  `time_to_first_token`, `e2e` in seconds (doubles). Everything lpxtop reads, in one span.
- **SGLang** (`--enable-trace`; python/sglang/srt/observability/trace.py and req_time_stats.py): one
  span per stage of a request under the request's trace — `prefill_waiting` (the queue) and
  `prefill_forward` (prefill) are read from their durations. No time to first token or decode in one
  figure, so no "outside" for SGLang; the stages arrive as separate spans, merged by trace id.
- **TGI** (router/src/server.rs: the `generate`, `generate_stream`, `completions` and
  `chat_completions` handlers' spans): `queue_time` and `total_time` recorded as Rust `Duration` debug
  strings ("1.234567ms"). No prefill/decode split and no time to first token. TGI exports OTLP/gRPC
  only, so it reaches lpxtop through a collector (docs/traces.md).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Any

from lpxtop.engine.traces.otlp import attributes, hex_id
from lpxtop.model.chain import SpanSegments

VLLM_SPAN = "llm_request"
VLLM_ATTRIBUTES = {  # attribute -> segment (seconds in the span, ms in lpxtop)
    "gen_ai.latency.time_in_queue": "queue_ms",
    "gen_ai.latency.time_in_model_prefill": "prefill_ms",
    "gen_ai.latency.time_in_model_decode": "decode_ms",
    "gen_ai.latency.time_to_first_token": "server_ttft_ms",
    "gen_ai.latency.e2e": "server_e2e_ms",
}
SGLANG_STAGES = {"prefill_waiting": "queue_ms", "prefill_forward": "prefill_ms"}
TGI_SPANS = ("generate", "generate_stream", "completions", "chat_completions")
TGI_ATTRIBUTES = {"queue_time": "queue_ms", "total_time": "server_e2e_ms"}

MAX_SEGMENT_MS = 3_600_000.0  # an hour: a longer queue or prefill is a broken clock or a hostile span
MAX_SPAN_AGE_S = 600.0  # a span that started longer ago than this (or ...)
MAX_SPAN_AHEAD_S = 60.0  # ... further in the future than this has an absurd time: dropped, counted


@dataclass(frozen=True)
class Reading:
    """What a reader made of one span.

    `segments` None with `dropped` None: no reader knows the span (counted as unrecognized).
    `dropped`: a span a reader knows but whose ids or times are absurd (dropped whole, counted).
    `bad_values`: attributes a reader knows with a value it refuses (wrong type, NaN, negative, huge);
    they are left out of the segments, not guessed at.
    """

    segments: SpanSegments | None = None
    dropped: str | None = None
    bad_values: int = 0


UNRECOGNIZED = Reading()


def read_span(span: Any, source: str, now_ns: int | None = None) -> Reading:
    """Read one OTLP span (an opentelemetry-proto `Span`) with the reader its name calls for."""
    name = span.name
    if name == VLLM_SPAN:
        reader, server = _read_attributes, "vllm"
        table = VLLM_ATTRIBUTES
    elif name in SGLANG_STAGES or _SGLANG_ROOT.match(name):
        reader, server, table = _read_sglang, "sglang", SGLANG_STAGES
    elif name in TGI_SPANS:
        reader, server, table = _read_tgi, "tgi", TGI_ATTRIBUTES
    else:
        return UNRECOGNIZED
    trace = bytes(span.trace_id)
    if len(trace) != 16 or not any(trace):
        return Reading(dropped="bad_trace_id")
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    now = time.time_ns() if now_ns is None else now_ns
    if not (now - MAX_SPAN_AGE_S * 1e9 <= start <= now + MAX_SPAN_AHEAD_S * 1e9) or (end and end < start):
        return Reading(dropped="bad_time")
    return reader(span, hex_id(trace), source, server, table)


def _read_attributes(span: Any, trace_id: str, source: str, server: str, table: dict[str, str]) -> Reading:
    values, bad = _segments_from(attributes(span), table, _seconds_to_ms)
    return Reading(SpanSegments(trace_id=trace_id, server=server, source=source,
                                start_wall_ns=span.start_time_unix_nano, **_ids(span), **values), bad_values=bad)


def _ids(span: Any) -> dict[str, str | None]:
    """The span's own id and its parent's (hex; None when absent or not 8 bytes)."""
    own, parent = bytes(span.span_id), bytes(span.parent_span_id)
    return {"span_id": hex_id(own) if len(own) == 8 and any(own) else None,
            "parent_span_id": hex_id(parent) if len(parent) == 8 and any(parent) else None}


_SGLANG_ROOT = re.compile(r"^(?:\w+ )?Req [0-9A-Za-z-]{1,64}$")


def _read_sglang(span: Any, trace_id: str, source: str, server: str, table: dict[str, str]) -> Reading:
    name = span.name
    values: dict[str, float] = {}
    start: int | None = None
    bad = 0
    if name in table:
        ms = (span.end_time_unix_nano - span.start_time_unix_nano) / 1e6
        if span.end_time_unix_nano and 0 <= ms <= MAX_SEGMENT_MS:
            values[table[name]] = ms
        else:
            bad = 1
    else:  # the request's root span: its start is the server's arrival
        start = span.start_time_unix_nano
    return Reading(SpanSegments(trace_id=trace_id, server=server, source=source, start_wall_ns=start,
                                complete=False, **_ids(span), **values), bad_values=bad)


def _read_tgi(span: Any, trace_id: str, source: str, server: str, table: dict[str, str]) -> Reading:
    found = attributes(span)
    if "queue_time" not in found:  # a TGI handler span whose request did not finish, or another server's
        return UNRECOGNIZED
    values, bad = _segments_from(found, table, _rust_duration_ms)
    return Reading(SpanSegments(trace_id=trace_id, server=server, source=source,
                                start_wall_ns=span.start_time_unix_nano, **_ids(span), **values), bad_values=bad)


def _segments_from(found: dict[str, Any], table: dict[str, str], to_ms) -> tuple[dict[str, float], int]:
    values: dict[str, float] = {}
    bad = 0
    for attribute, segment in table.items():
        if attribute not in found:
            continue
        ms = to_ms(found[attribute])
        if ms is None:
            bad += 1
        else:
            values[segment] = ms
    return values, bad


def _seconds_to_ms(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None  # a string, an array: not a number of seconds (not parsed, not guessed)
    ms = float(value) * 1000.0
    return ms if math.isfinite(ms) and 0.0 <= ms <= MAX_SEGMENT_MS else None


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|µs|us|ms|s)\s*$")
_UNIT_MS = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1000.0}


def _rust_duration_ms(value: Any) -> float | None:
    """Rust's `format!("{:?}", Duration)`: "1.234567ms", "15.2µs", "2.003s", "0ns"."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    match = _DURATION.match(value)
    if match is None:
        return None
    ms = float(match.group(1)) * _UNIT_MS[match.group(2)]
    return ms if math.isfinite(ms) and ms <= MAX_SEGMENT_MS else None


def merge(old: SpanSegments, new: SpanSegments) -> tuple[SpanSegments, int]:
    """Two readings of one trace combined: each segment from the first span that gave it.

    Returns the merged segments and how many of `new`'s segments were already known (duplicates).
    """
    updates: dict[str, Any] = {}
    duplicates = 0
    for name in ("start_wall_ns", "queue_ms", "prefill_ms", "decode_ms", "server_ttft_ms", "server_e2e_ms"):
        value = getattr(new, name)
        if value is None:
            continue
        if getattr(old, name) is None:
            updates[name] = value
        elif name != "start_wall_ns":
            duplicates += 1
    if new.complete and not old.complete:
        updates["complete"] = True
    if not updates:
        return old, duplicates
    return SpanSegments(**{**_fields(old), **updates}), duplicates


def _fields(segments: SpanSegments) -> dict[str, Any]:
    return {name: getattr(segments, name) for name in SpanSegments.__dataclass_fields__}
