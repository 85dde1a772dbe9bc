"""The W3C trace context lpxtop sends with each request (`traceparent`), so a server's own spans can be
joined to lpxtop's record of the same request.

Each request gets a fresh context: a random 128-bit trace id and a random 64-bit span id (the span is
lpxtop's client span; the server's spans name it as their parent). The calls of one agent step share
one trace, each with a span id of its own (`next_call`), so the server's span of each call is told
apart by its parent (lpxtop/engine/traces/join.py). The flags say "sampled" (`01`): lpxtop
keeps a record of every request it sends. Format and rules: W3C Trace Context, level 1, `traceparent`
version 00 (docs/measurement.md, "Trace context").
"""

from __future__ import annotations

import os
from dataclasses import dataclass

TRACEPARENT_HEADER = "traceparent"


@dataclass(frozen=True, slots=True)
class TraceContext:
    """One request's trace id (32 lowercase hex digits) and span id (16), neither all zeros."""

    trace_id: str
    span_id: str

    def traceparent(self) -> str:
        """The `traceparent` header's value: version 00, this trace and span, sampled."""
        return f"00-{self.trace_id}-{self.span_id}-01"


def new_trace_context() -> TraceContext:
    """A fresh context with random ids (from os.urandom; an all-zero id is invalid and drawn again)."""
    raw = os.urandom(24)
    while not any(raw[:16]) or not any(raw[16:]):
        raw = os.urandom(24)
    return TraceContext(trace_id=raw[:16].hex(), span_id=raw[16:].hex())


def next_call(context: TraceContext) -> TraceContext:
    """Another request of the same trace (an agent step's next call): the trace id, a fresh span id."""
    raw = os.urandom(8)
    while not any(raw) or raw.hex() == context.span_id:
        raw = os.urandom(8)
    return TraceContext(trace_id=context.trace_id, span_id=raw.hex())
