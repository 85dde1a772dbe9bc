"""OTLP bodies: protobuf and JSON read alike, gzip bounded, answers as the specification says."""

from __future__ import annotations

import gzip
import json

import pytest

from lpxtop.engine.traces import otlp
from tests.support.imports import pulled_in
from tests.support.traces_data import json_body, new_trace_id, proto_field, protobuf_body, vllm_span


def _ids(message) -> list[str]:
    return [otlp.hex_id(span.trace_id) for _, span in otlp.iter_spans(message)]


def test_protobuf_and_json_bodies_read_to_the_same_spans():
    trace_id = new_trace_id()
    s = vllm_span(trace_id)
    from_pb = otlp.parse_request(protobuf_body(s), otlp.CONTENT_PROTOBUF)
    from_json = otlp.parse_request(json_body(s), otlp.CONTENT_JSON)
    assert _ids(from_pb) == _ids(from_json) == [trace_id]
    assert from_pb == from_json


def test_json_ids_are_case_insensitive_hex_and_unknown_fields_are_ignored():
    trace_id = new_trace_id()
    document = json.loads(json_body(vllm_span(trace_id)))
    item = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    item["traceId"] = item["traceId"].upper()
    item["someFieldFromTheFuture"] = {"x": 1}
    document["resourceSpans"][0]["newThing"] = 3
    message = otlp.parse_request(json.dumps(document).encode(), otlp.CONTENT_JSON)
    assert _ids(message) == [trace_id]


@pytest.mark.parametrize("body", [b"", b"{}", b'{"resourceSpans": []}'])
def test_empty_requests_are_valid(body):
    assert otlp.count_spans(otlp.parse_request(body, otlp.CONTENT_JSON if body else otlp.CONTENT_PROTOBUF)) == 0


@pytest.mark.parametrize("body, media", [
    (b"\xff\xff\xff\xff", otlp.CONTENT_PROTOBUF),
    (b"\x0a\x80\x80\x80\x80\x10", otlp.CONTENT_PROTOBUF),  # a length far past the end
    (b"not json", otlp.CONTENT_JSON),
    (b"[1, 2]", otlp.CONTENT_JSON),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}', otlp.CONTENT_JSON),
    (b'{"resourceSpans": "x"}', otlp.CONTENT_JSON),
    (b"\xc3\x28", otlp.CONTENT_JSON),
    (b"[" * 100_000, otlp.CONTENT_JSON),
])
def test_garbage_is_a_bad_body(body, media):
    with pytest.raises(otlp.BadBody):
        otlp.parse_request(body, media)


def test_truncated_protobuf_is_a_bad_body():
    body = protobuf_body(vllm_span(new_trace_id()), vllm_span(new_trace_id()))
    with pytest.raises(otlp.BadBody):
        otlp.parse_request(body[: len(body) // 2], otlp.CONTENT_PROTOBUF)


def test_gunzip_is_bounded_against_a_bomb():
    bomb = gzip.compress(b"\0" * (50 * 1024 * 1024))  # ~50 KB that would expand to 50 MB
    assert len(bomb) < 100_000
    with pytest.raises(otlp.BodyTooLarge):
        otlp.gunzip(bomb, 1024 * 1024)


def test_gunzip_refuses_truncated_and_non_gzip_bodies():
    data = gzip.compress(b"hello" * 1000)
    assert otlp.gunzip(data, 10_000) == b"hello" * 1000
    with pytest.raises(otlp.BadBody):
        otlp.gunzip(data[:-10], 10_000)
    with pytest.raises(otlp.BadBody):
        otlp.gunzip(b"plain text", 10_000)


def test_success_answers_leave_partial_success_unset_unless_spans_were_rejected():
    p = otlp.load()
    ok = p.ExportTraceServiceResponse.FromString(otlp.success_body(otlp.CONTENT_PROTOBUF))
    assert not ok.HasField("partial_success")
    partial = p.ExportTraceServiceResponse.FromString(otlp.success_body(otlp.CONTENT_PROTOBUF, 3, "rate"))
    assert partial.partial_success.rejected_spans == 3
    assert json.loads(otlp.success_body(otlp.CONTENT_JSON)) == {}
    assert json.loads(otlp.success_body(otlp.CONTENT_JSON, 2, "x")) == {
        "partialSuccess": {"rejectedSpans": "2", "errorMessage": "x"}}


def test_status_bodies_are_google_rpc_status_in_the_request_type():
    assert json.loads(otlp.status_body(otlp.CONTENT_JSON, "bad")) == {"message": "bad"}
    raw = otlp.status_body(None, "bad", code=3)
    assert otlp.load().Status.FromString(raw).message == "bad"
    assert raw == b"\x08\x03\x12\x03bad"  # field 1 varint 3, field 2 "bad": google.rpc.Status on the wire


@pytest.mark.parametrize("header, media", [
    ("application/x-protobuf", otlp.CONTENT_PROTOBUF),
    ("Application/X-Protobuf; charset=binary", otlp.CONTENT_PROTOBUF),
    ("application/json; charset=utf-8", otlp.CONTENT_JSON),
    ("text/plain", None),
    ("", None),
    (None, None),
])
def test_media_types(header, media):
    assert otlp.media_type(header) == media


def test_resource_key_names_the_service_and_tells_resources_apart():
    a = otlp.parse_request(protobuf_body(vllm_span(new_trace_id()), service="vllm"), otlp.CONTENT_PROTOBUF)
    b = otlp.parse_request(protobuf_body(vllm_span(new_trace_id()), service="other"), otlp.CONTENT_PROTOBUF)
    key_a = next(otlp.iter_spans(a))[0]
    key_b = next(otlp.iter_spans(b))[0]
    assert key_a.startswith("vllm#") and key_b.startswith("other#") and key_a != key_b


def test_protobuf_nested_past_the_decoders_depth_is_a_bad_body():
    value = proto_field(1, b"x")  # AnyValue.string_value
    for _ in range(500):  # AnyValue.kvlist_value -> KeyValueList.values -> KeyValue.value -> AnyValue ...
        value = proto_field(6, proto_field(1, proto_field(1, b"k") + proto_field(2, value)))
    span_bytes = vllm_span(new_trace_id()).SerializeToString() + proto_field(9, proto_field(1, b"deep") + proto_field(2, value))
    body = proto_field(1, proto_field(2, proto_field(2, span_bytes)))  # request.resource_spans.scope_spans.spans
    with pytest.raises(otlp.BadBody):
        otlp.parse_request(body, otlp.CONTENT_PROTOBUF)


def test_importing_lpxtop_does_not_import_protobuf():
    # opentelemetry-proto costs ~0.1 s of start-up: only a receiver or the sim's exporter loads it
    modules = ["lpxtop.cli.entry", "lpxtop.engine.traces", "lpxtop.engine.traces.settings", "lpxtop.sim.server",
               "lpxtop.engine.runner"]
    assert pulled_in(modules, ("google.protobuf", "opentelemetry")) == {}


def test_missing_package_is_a_clear_message():
    import subprocess
    import sys

    code = ("import sys; sys.modules['opentelemetry.proto.collector.trace.v1'] = None\n"
            "from lpxtop.engine.traces import TraceJoin, TraceReceiver, OtelUnavailable, ReceiverSettings\n"
            "try:\n    TraceReceiver(TraceJoin(), ReceiverSettings(port=0))\n"
            "except OtelUnavailable as exc:\n    print(exc); sys.exit(0)\nsys.exit(1)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-500:]
    assert "pip install 'lpxtop[otel]'" in result.stdout


def _spans_of(batch) -> list:
    return [(source, span.SerializeToString() if span is not None else None) for source, span in batch.spans()]


def test_the_span_by_span_split_reads_what_the_full_parse_reads():
    # the receiver's split (otlp_lazy) held to the library's own full parse, over several resources and scopes
    from tests.support.traces_data import request, span

    one = request(*(vllm_span(new_trace_id()) for _ in range(3)), service="a")
    two = request(span("Load weights", new_trace_id()), vllm_span(new_trace_id(), queue=None), service="b")
    two.resource_spans[0].scope_spans.add().spans.extend([vllm_span(new_trace_id())])
    one.resource_spans.extend(two.resource_spans)
    one.resource_spans.add()  # an empty resource
    body = one.SerializeToString()
    lazy = otlp.read_body(body, otlp.CONTENT_PROTOBUF)
    full = otlp.parse_request(body, otlp.CONTENT_PROTOBUF)
    assert lazy.count == otlp.count_spans(full) == 6
    assert _spans_of(lazy) == [(source, s.SerializeToString()) for source, s in otlp.iter_spans(full)]


def test_one_bad_span_inside_good_framing_is_none_and_the_rest_are_read():
    good = vllm_span(new_trace_id()).SerializeToString()
    bad = b"\x0a\x80\x80\x80"  # a trace id whose length runs past the span's end
    scope = proto_field(2, good) + proto_field(2, bad) + proto_field(2, good)
    body = proto_field(1, proto_field(2, scope))
    with pytest.raises(otlp.BadBody):
        otlp.parse_request(body, otlp.CONTENT_PROTOBUF)  # the full parse refuses the whole body
    spans = [s for _, s in otlp.read_body(body, otlp.CONTENT_PROTOBUF).spans()]
    assert [s is None for s in spans] == [False, True, False]


def test_a_json_body_is_read_whole():
    batch = otlp.read_body(json_body(vllm_span(new_trace_id())), otlp.CONTENT_JSON)
    assert batch.count == 1 and len(list(batch.spans())) == 1
