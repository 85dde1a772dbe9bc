"""OTLP/HTTP trace bodies in and out, through the maintained `opentelemetry-proto` messages.

What the OTLP specification (opentelemetry-proto docs/specification.md, "OTLP/HTTP") asks of a server:
`POST /v1/traces` with an `ExportTraceServiceRequest`, binary protobuf (`application/x-protobuf`) or
protobuf's JSON mapping (`application/json`, with trace and span ids as hex rather than base64, enums
as integers, unknown fields ignored), optionally gzip-compressed (`Content-Encoding: gzip`), the body
limited in size after decompression too (413 past it). The answer is an `ExportTraceServiceResponse` in
the request's content type — `partial_success` set (with `rejected_spans`) only when some spans were
refused — or, for a failure, a `google.rpc.Status` with a 4xx/5xx status: 400 for data that cannot be
read (never retried), 429/503 with `Retry-After` when overloaded (retried).

The package costs ~90-130 ms to import on this kind of machine (measured with
`python -X importtime -c "import opentelemetry.proto.collector.trace.v1.trace_service_pb2"`), close to
a tenth of the dashboard's start-up, so it is an optional extra (`pip install 'lpxtop[otel]'`) imported
only when a receiver or the simulator's exporter is configured: `load()` imports it or raises
`OtelUnavailable` with what to install.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

CONTENT_PROTOBUF = "application/x-protobuf"
CONTENT_JSON = "application/json"
INSTALL_HINT = "pip install 'lpxtop[otel]' (or: pip install opentelemetry-proto)"


class OtelUnavailable(RuntimeError):
    """opentelemetry-proto is not installed (or cannot be imported); the message says what to install."""


class BadBody(ValueError):
    """A body that cannot be read as an ExportTraceServiceRequest (answered with 400, never retried)."""


class BodyTooLarge(ValueError):
    """A body larger than the limit, before or after decompression (answered with 413)."""


@dataclass(frozen=True)
class Proto:
    """The message classes lpxtop uses, imported once."""

    ExportTraceServiceRequest: Any
    ExportTraceServiceResponse: Any
    ResourceSpans: Any
    ScopeSpans: Any
    Span: Any
    Status: Any
    LazyRequest: Any
    KeyValue: Any
    AnyValue: Any
    Resource: Any
    json_format: Any
    DecodeError: type[Exception]


_PROTO: Proto | None = None


def load() -> Proto:
    """The opentelemetry-proto messages, imported on first use; OtelUnavailable when not installed."""
    global _PROTO
    if _PROTO is not None:
        return _PROTO
    try:
        from google.protobuf import json_format
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
        from opentelemetry.proto.common.v1 import common_pb2
        from opentelemetry.proto.resource.v1 import resource_pb2
        from opentelemetry.proto.trace.v1 import trace_pb2
    except ImportError as exc:  # also a protobuf runtime too old for the generated code
        raise OtelUnavailable(f"OpenTelemetry spans need the opentelemetry-proto package ({exc}): "
                              f"{INSTALL_HINT}") from None
    _PROTO = Proto(
        ExportTraceServiceRequest=trace_service_pb2.ExportTraceServiceRequest,
        ExportTraceServiceResponse=trace_service_pb2.ExportTraceServiceResponse,
        ResourceSpans=trace_pb2.ResourceSpans, ScopeSpans=trace_pb2.ScopeSpans, Span=trace_pb2.Span,
        Status=_status_class(), LazyRequest=_lazy_request_class(), KeyValue=common_pb2.KeyValue, AnyValue=common_pb2.AnyValue,
        Resource=resource_pb2.Resource, json_format=json_format, DecodeError=DecodeError,
    )
    return _PROTO


def available() -> bool:
    """Whether opentelemetry-proto can be imported (imports it)."""
    try:
        load()
    except OtelUnavailable:
        return False
    return True


def _status_class() -> Any:
    """`google.rpc.Status` (code, message) built from its two-field descriptor in a private pool.

    opentelemetry-proto does not ship it (googleapis-common-protos does, a further dependency for one
    message); `details` is left out, which the specification allows.
    """
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto(name="lpxtop/google_rpc_status.proto", package="google.rpc",
                                             syntax="proto3")
    message = fdp.message_type.add(name="Status")
    f = descriptor_pb2.FieldDescriptorProto
    message.field.add(name="code", number=1, type=f.TYPE_INT32, label=f.LABEL_OPTIONAL, json_name="code")
    message.field.add(name="message", number=2, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL, json_name="message")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("google.rpc.Status"))


def _lazy_request_class() -> Any:
    """ExportTraceServiceRequest with each span (and resource) left as its encoded bytes.

    The same field numbers as opentelemetry/proto/collector/trace/v1/trace_service.proto and
    trace/v1/trace.proto (request.resource_spans = 1; ResourceSpans.resource = 1, scope_spans = 2;
    ScopeSpans.spans = 2), declared as `bytes` where the real messages nest: the library splits a body
    into its spans in one quick call (best of 7, under a load average of 12: a 4 MiB body 15.5 ms
    against 68.6 ms for a full parse; vLLM's batch of 512 spans 0.02 ms against 0.53 ms; one span
    4.5 µs), and each span is then parsed alone, so the receiver never holds the interpreter lock for
    a whole body's decoding while a probe waits for its bytes. tests/unit/test_traces_otlp.py holds it
    to the full parse.
    """
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="lpxtop/otlp_lazy.proto", package="lpxtop.otlp_lazy",
                                             syntax="proto3")
    request = fdp.message_type.add(name="Request")
    request.field.add(name="resource_spans", number=1, type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED,
                      type_name=".lpxtop.otlp_lazy.ResourceSpans")
    resource_spans = fdp.message_type.add(name="ResourceSpans")
    resource_spans.field.add(name="resource", number=1, type=f.TYPE_BYTES, label=f.LABEL_OPTIONAL)
    resource_spans.field.add(name="scope_spans", number=2, type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED,
                             type_name=".lpxtop.otlp_lazy.ScopeSpans")
    scope_spans = fdp.message_type.add(name="ScopeSpans")
    scope_spans.field.add(name="spans", number=2, type=f.TYPE_BYTES, label=f.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("lpxtop.otlp_lazy.Request"))


class SpanBatch:
    """The spans of one body: `count`, and `spans()` yielding (source, Span or None) one at a time.

    A protobuf body is split into its spans first (otlp_lazy) and each span parsed when reached: None
    for a span that does not parse (counted by the receiver, the others still read). A JSON body is
    parsed whole (protobuf's JSON mapping has no such split).
    """

    def __init__(self, lazy: Any = None, full: Any = None) -> None:
        self._lazy = lazy
        self._full = full
        if lazy is not None:
            self.count = sum(len(s.spans) for rs in lazy.resource_spans for s in rs.scope_spans)
        else:
            self.count = count_spans(full)

    def spans(self) -> Iterator[tuple[str, Any]]:
        if self._full is not None:
            yield from iter_spans(self._full)
            return
        p = load()
        for resource_spans in self._lazy.resource_spans:
            try:
                resource = p.Resource.FromString(resource_spans.resource)
            except (p.DecodeError, RecursionError, ValueError):
                resource = p.Resource()
            source = resource_key(resource)
            for scope_spans in resource_spans.scope_spans:
                for raw in scope_spans.spans:
                    try:
                        yield source, p.Span.FromString(raw)
                    except (p.DecodeError, RecursionError, ValueError):
                        yield source, None


def read_body(body: bytes, media: str) -> SpanBatch:
    """A body's spans, ready to be read one at a time; BadBody if its framing cannot be read."""
    if media == CONTENT_PROTOBUF:
        p = load()
        try:
            return SpanBatch(lazy=p.LazyRequest.FromString(body))
        except (p.DecodeError, RecursionError, ValueError) as exc:
            raise BadBody(f"the body is not an ExportTraceServiceRequest ({_short(exc)})") from None
    return SpanBatch(full=parse_request(body, media))


def media_type(content_type: str | None) -> str | None:
    """CONTENT_PROTOBUF or CONTENT_JSON for a Content-Type header (parameters ignored), else None."""
    base = (content_type or "").split(";", 1)[0].strip().lower()
    if base in (CONTENT_PROTOBUF, "application/protobuf"):
        return CONTENT_PROTOBUF
    if base == CONTENT_JSON:
        return CONTENT_JSON
    return None


def gunzip(body: bytes, limit: int) -> bytes:
    """The gzip `body` decompressed, never holding more than `limit` + 1 bytes of output (a gzip bomb
    of a few KB that would expand to gigabytes stops at the limit); BodyTooLarge past it, BadBody if
    it is not gzip, is cut short, or has bytes after its end."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise BadBody(f"the body is not valid gzip ({exc})") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise BodyTooLarge(f"the body is larger than {limit} bytes once decompressed")
    if not inflater.eof:
        raise BadBody("the gzip body is cut short")
    return out


def parse_request(body: bytes, media: str) -> Any:
    """An ExportTraceServiceRequest from a binary or JSON body; BadBody if it cannot be read."""
    p = load()
    if media == CONTENT_PROTOBUF:
        try:
            return p.ExportTraceServiceRequest.FromString(body)
        except (p.DecodeError, RecursionError, ValueError) as exc:
            raise BadBody(f"the body is not an ExportTraceServiceRequest ({_short(exc)})") from None
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise BadBody(f"the body is not JSON ({_short(exc)})") from None
    if not isinstance(document, dict):
        raise BadBody("the JSON body is not an object")
    try:
        _hex_ids_to_base64(document)
        return p.json_format.ParseDict(document, p.ExportTraceServiceRequest(), ignore_unknown_fields=True)
    except (p.json_format.ParseError, RecursionError, ValueError, TypeError, AttributeError) as exc:
        raise BadBody(f"the JSON body is not an ExportTraceServiceRequest ({_short(exc)})") from None


_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def _hex_ids_to_base64(document: dict) -> None:
    """OTLP/JSON writes trace and span ids as hex; protobuf's JSON mapping reads bytes as base64."""
    for resource_spans in _list(document.get("resourceSpans")):
        for scope_spans in _list(_get(resource_spans, "scopeSpans")):
            for span in _list(_get(scope_spans, "spans")):
                _convert_ids(span)
                for link in _list(_get(span, "links")):
                    _convert_ids(link)


def _convert_ids(item: Any) -> None:
    if not isinstance(item, dict):
        return
    for key in _ID_FIELDS:
        value = item.get(key)
        if isinstance(value, str) and value:
            try:
                item[key] = base64.b64encode(bytes.fromhex(value)).decode()
            except ValueError:
                raise ValueError(f"{key} is not hex") from None


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else None


def iter_spans(request: Any) -> Iterator[tuple[str, Any]]:
    """(source, span) for every span of a request; `source` names the resource that sent it."""
    for resource_spans in request.resource_spans:
        source = resource_key(resource_spans.resource)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield source, span


def count_spans(request: Any) -> int:
    return sum(len(s.spans) for rs in request.resource_spans for s in rs.scope_spans)


def resource_key(resource: Any) -> str:
    """A short stable name for a span's resource: `service.name` and a hash of all its plain attributes
    (two servers on one host that report the same attributes share a key)."""
    service = "unknown"
    parts: list[str] = []
    for kv in resource.attributes:
        value = plain_value(kv.value)
        if kv.key == "service.name" and isinstance(value, str):
            service = value[:64]
        parts.append(f"{kv.key}={value!r}")
    digest = hashlib.blake2b("\n".join(sorted(parts)).encode("utf-8", "replace"), digest_size=4).hexdigest()
    return f"{service}#{digest}"


def plain_value(value: Any) -> str | int | float | bool | None:
    """An AnyValue's string/int/double/bool, or None for arrays, maps, bytes and unset values."""
    which = value.WhichOneof("value")
    if which in ("string_value", "int_value", "double_value", "bool_value"):
        return getattr(value, which)
    return None


def attributes(span: Any) -> dict[str, str | int | float | bool | None]:
    """A span's attributes as a dict of plain values (the first of a repeated key wins)."""
    out: dict[str, str | int | float | bool | None] = {}
    for kv in span.attributes:
        if kv.key not in out:
            out[kv.key] = plain_value(kv.value)
    return out


def hex_id(raw: bytes) -> str:
    return binascii.hexlify(raw).decode()


def success_body(media: str, rejected: int = 0, message: str = "") -> bytes:
    """ExportTraceServiceResponse: partial_success set only when spans were rejected (or to warn)."""
    p = load()
    response = p.ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    return _encode(response, media)


def status_body(media: str | None, message: str, code: int = 0) -> bytes:
    """google.rpc.Status for a 4xx/5xx answer (protobuf when the request's type is unknown)."""
    p = load()
    return _encode(p.Status(code=code, message=message), media or CONTENT_PROTOBUF)


def _encode(message: Any, media: str) -> bytes:
    if media == CONTENT_JSON:
        p = load()
        return json.dumps(p.json_format.MessageToDict(message), separators=(",", ":")).encode()
    return message.SerializeToString()


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:120]
