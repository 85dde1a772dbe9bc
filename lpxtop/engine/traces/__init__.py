"""OpenTelemetry in: the server's own per-request spans, received over OTLP/HTTP and joined to lpxtop's requests.

- `process.py`  TraceReceiverProcess: the receiver in its own process, feeding the join (what commands run)
- `receiver.py` TraceReceiver: `POST /v1/traces` (protobuf and JSON, gzip), bounded; its own thread
- `forward.py`  SpanForwarder: every accepted body passed on unchanged to the user's collector
- `otlp.py`     the opentelemetry-proto messages (an optional extra, imported on use), bodies in and out
- `settings.py` `[traces]` and --traces-listen/--traces-forward -> ReceiverSettings
- `spans.py`    read_span(): a vLLM / SGLang / TGI span into SpanSegments, by their own names
- `join.py`     TraceJoin: requests and spans matched by trace id; chain and population windows
- `context.py`  parse_traceparent(), same_host(): the W3C header, and whether two clocks are one

The records it makes (SpanSegments, JoinedRequest, ChainSummary, ReceiverStats) are in lpxtop/model/chain.py.
Importing this package does not import opentelemetry-proto; starting a receiver does.
"""

from lpxtop.engine.traces.context import ParentContext, parse_traceparent, same_host
from lpxtop.engine.traces.join import TraceJoin
from lpxtop.engine.traces.otlp import OtelUnavailable
from lpxtop.engine.traces.process import TraceReceiverProcess
from lpxtop.engine.traces.receiver import ReceiverSettings, TraceReceiver, TraceReceiverServer

__all__ = [
    "OtelUnavailable",  # opentelemetry-proto is missing; the message says what to install
    "ParentContext",  # the trace id, parent span id and flags a traceparent names
    "ReceiverSettings",  # where the receiver listens, where it forwards, and its bounds
    "TraceJoin",  # note_request(), add_segments(), snapshot(endpoint) -> ChainSummary
    "TraceReceiver",  # the receiver on its own thread: start() -> (host, port), stats(), stop()
    "TraceReceiverProcess",  # the same in its own process (no shared interpreter lock with the probes)
    "TraceReceiverServer",  # the same on the running event loop
    "parse_traceparent",  # a traceparent header -> ParentContext or None
    "same_host",  # whether an endpoint URL is this machine (to-server is then measurable)
]
