"""OpenTelemetry in: the server's own per-request spans, received over OTLP/HTTP and joined to lpxtop's requests.

- `process.py`  TraceReceiverProcess: the receiver in its own process, feeding the join (what commands run)
- `receiver.py` TraceReceiver: `POST /v1/traces` (protobuf and JSON, gzip), bounded; its own thread
- `forward.py`  SpanForwarder: every accepted body passed on unchanged to the user's collector
- `otlp.py`     the opentelemetry-proto messages (an optional extra, imported on use), bodies in and out
- `limits.py`   ReceiverSettings and the bounds (no aiohttp import)
- `settings.py` `[traces]` and --traces-listen/--traces-forward -> ReceiverSettings
- `attach.py`   the commands' side: the flags, start_traces()/stop_traces(), `once`'s wait for spans
- `feed.py`     ChainFeed: the join fed by an engine's probes and agent calls, its receiver, the snapshot hook
- `views.py`    an endpoint's chain in its view; an agent step's time by its calls' own spans
- `spans.py`    read_span(): a vLLM / SGLang / TGI span into SpanSegments, by their own names
- `join.py`     TraceJoin: requests and spans matched by trace id (and parent span id); chain and population windows
- `context.py`  parse_traceparent(), same_host(): the W3C header, and whether two clocks are one

The records it makes (SpanSegments, JoinedRequest, UnjoinedRequest, ChainEvent, ChainSummary,
ReceiverStats) are in lpxtop/model/chain.py. Importing this package imports nothing else: the names below
load on first use (the receiver brings aiohttp; starting it, opentelemetry-proto).
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "OtelUnavailable": "otlp",  # opentelemetry-proto is missing; the message says what to install
    "ParentContext": "context",  # the trace id, parent span id and flags a traceparent names
    "ReceiverSettings": "limits",  # where the receiver listens, where it forwards, and its bounds
    "TraceJoin": "join",  # note_request(), add_segments(), snapshot(endpoint) -> ChainSummary
    "TraceReceiver": "receiver",  # the receiver on its own thread: start() -> (host, port), stats(), stop()
    "TraceReceiverProcess": "process",  # the same in its own process (no shared interpreter lock with the probes)
    "TraceReceiverServer": "receiver",  # the same on the running event loop
    "ChainFeed": "feed",  # the join beside an engine (what --traces-listen starts)
    "parse_traceparent": "context",  # a traceparent header -> ParentContext or None
    "same_host": "context",  # whether an endpoint URL is this machine (to-server is then measurable)
    "perf_to_wall_offset_ns": "context",  # this process's perf_counter_ns -> wall-clock offset, for span times
    "check_traces_table": "settings",  # the config file's [traces] table, checked
    "add_traces_flags": "attach",  # --traces-listen / --traces-forward on a command's parser
    "start_traces": "attach",  # the receiver and the join for a command, from its flags and file
    "stop_traces": "attach",  # the receiver stopped, its process ended
    "finish_once": "attach",  # `once`'s wait for the spans of its last requests
    "with_chain": "views",  # an endpoint's view with its chain summary
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
