"""Span readers: vLLM, SGLang and TGI by their own names; anything else counted, never guessed at."""

from __future__ import annotations

import time

import pytest

from lpxtop.engine.traces.spans import merge, read_span
from tests.support.traces_data import new_trace_id, span, vllm_span


def test_vllm_llm_request_gives_every_segment_in_ms():
    trace_id = new_trace_id()
    s = vllm_span(trace_id, queue=0.004, prefill=0.010, decode=0.2, ttft=0.016, e2e=0.22)
    reading = read_span(s, "vllm#1")
    seg = reading.segments
    assert reading.dropped is None and reading.bad_values == 0
    assert seg.trace_id == trace_id and seg.server == "vllm" and seg.source == "vllm#1" and seg.complete
    assert (seg.queue_ms, seg.prefill_ms, seg.decode_ms, seg.server_ttft_ms, seg.server_e2e_ms) == \
        pytest.approx((4.0, 10.0, 200.0, 16.0, 220.0))
    assert seg.start_wall_ns == s.start_time_unix_nano


def test_vllm_span_without_latency_attributes_is_read_but_has_none():
    reading = read_span(span("llm_request", new_trace_id()), "s")
    assert reading.segments is not None and not reading.segments.has_latency


@pytest.mark.parametrize("value", ["0.004", float("nan"), float("inf"), -0.5, 7200.0, True])
def test_vllm_attribute_of_the_wrong_type_or_absurd_value_is_left_out_and_counted(value):
    s = vllm_span(new_trace_id(), queue=None)
    s.attributes.add(key="gen_ai.latency.time_in_queue")
    kv = s.attributes[-1]
    if isinstance(value, bool):
        kv.value.bool_value = value
    elif isinstance(value, str):
        kv.value.string_value = value
    else:
        kv.value.double_value = value
    reading = read_span(s, "s")
    assert reading.segments.queue_ms is None
    assert reading.segments.prefill_ms is not None  # the other attributes still count
    assert reading.bad_values == 1


def test_integer_seconds_are_numbers():
    s = span("llm_request", new_trace_id(), attributes={"gen_ai.latency.time_in_queue": 2})
    assert read_span(s, "s").segments.queue_ms == 2000.0


@pytest.mark.parametrize("name", ["Load weights", "Allocate KV cache", "GET /v1/models", "", "llm_request2"])
def test_unknown_spans_are_unrecognized(name):
    reading = read_span(span(name, new_trace_id(), attributes={"gen_ai.latency.time_in_queue": 1.0}), "s")
    assert reading.segments is None and reading.dropped is None


def test_absurd_and_future_times_and_bad_ids_drop_the_span():
    now = time.time_ns()
    assert read_span(vllm_span(new_trace_id(), start_ns=now + 3_600 * 10**9), "s").dropped == "bad_time"
    assert read_span(vllm_span(new_trace_id(), start_ns=now - 86_400 * 10**9), "s").dropped == "bad_time"
    assert read_span(vllm_span(new_trace_id(), start_ns=1), "s").dropped == "bad_time"
    backwards = vllm_span(new_trace_id())
    backwards.end_time_unix_nano = backwards.start_time_unix_nano - 1
    assert read_span(backwards, "s").dropped == "bad_time"
    zero = vllm_span("0" * 32)
    assert read_span(zero, "s").dropped == "bad_trace_id"
    short = vllm_span(new_trace_id())
    short.trace_id = b"\x01\x02"
    assert read_span(short, "s").dropped == "bad_trace_id"


def test_sglang_stage_spans_merge_into_queue_and_prefill():
    trace_id = new_trace_id()
    now = time.time_ns()
    root = read_span(span("Req 1a2b3c4d", trace_id, start_ns=now - 90_000_000, duration_ms=80), "sg").segments
    waiting = read_span(span("prefill_waiting", trace_id, start_ns=now - 80_000_000, duration_ms=7.5), "sg").segments
    forward = read_span(span("prefill_forward", trace_id, start_ns=now - 70_000_000, duration_ms=12.0), "sg").segments
    assert root.server == waiting.server == "sglang" and not waiting.complete
    merged, dup = merge(root, waiting)
    merged, dup2 = merge(merged, forward)
    assert (dup, dup2) == (0, 0)
    assert merged.start_wall_ns == now - 90_000_000
    assert merged.queue_ms == pytest.approx(7.5) and merged.prefill_ms == pytest.approx(12.0)
    assert merged.server_ttft_ms is None  # SGLang says no TTFT in one figure: no outside, not guessed
    _, dup3 = merge(merged, waiting)
    assert dup3 == 1


@pytest.mark.parametrize("text, ms", [("1.234567ms", 1.234567), ("15.2µs", 0.0152), ("15us", 0.015),
                                      ("2.5s", 2500.0), ("0ns", 0.0)])
def test_tgi_duration_strings(text, ms):
    s = span("chat_completions", new_trace_id(), attributes={"queue_time": text, "total_time": "40ms",
                                                              "inference_time": "30ms"})
    seg = read_span(s, "tgi").segments
    assert seg.server == "tgi" and seg.queue_ms == pytest.approx(ms) and seg.server_e2e_ms == 40.0
    assert seg.prefill_ms is None and seg.server_ttft_ms is None


def test_tgi_handler_span_without_queue_time_is_unrecognized_and_bad_durations_are_counted():
    assert read_span(span("generate", new_trace_id(), attributes={"parameters": "x"}), "t").segments is None
    reading = read_span(span("generate", new_trace_id(), attributes={"queue_time": "soon"}), "t")
    assert reading.segments.queue_ms is None and reading.bad_values == 1
