"""Spans built from what was measured (lpxtop/otel/spans.py): their ids are the request's traceparent, their
times the sample's, an agent step is a tree; the sampling rule is the SDK's; the measures' names follow the
naming mode (lpxtop/otel/measures.py, semconv.py)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.sampling import Decision, TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanKind, StatusCode

from lpxtop.model.agent import AgentStep
from lpxtop.model.probe import Sample
from lpxtop.otel import semconv as sc
from lpxtop.otel.aggregate import Aggregator
from lpxtop.otel.measures import EndpointInfo, Measures
from lpxtop.otel.spans import SpanBuilder, parse_ids

INFO = EndpointInfo(name="gpu:8000", api="chat", address="10.0.0.5", port=8000, provider="vllm",
                    request_model="qwen", max_tokens=16)
T0 = 1_700_000_000_000_000_000
TRACE, SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"


def builder() -> SpanBuilder:
    return SpanBuilder(Resource.create({"service.name": "t"}), InstrumentationScope("lpxtop", "0"))


def sample(**kw) -> Sample:
    values = dict(endpoint="gpu:8000", wall_time=T0 / 1e9, start_ns=0, ok=True, model="qwen-resp", response_id="r1",
                  ttft_ms=40.0, e2e_ms=100.0, token_event_ms=(40.0, 60.0, 100.0), tokens_per_event=(1, 1, 1),
                  output_tokens=3, prompt_tokens=12, finish_reason="length", http_status=200, trace_id=TRACE,
                  span_id=SPAN, sent_wall_ns=T0 + 5_000)
    values.update(kw)
    return Sample(**values)


def test_a_probe_span_carries_the_traceparent_ids_and_the_measured_times():
    span = builder().request(sample(), INFO)
    assert f"{span.context.trace_id:032x}" == TRACE and f"{span.context.span_id:016x}" == SPAN
    assert span.parent is None and span.kind is SpanKind.CLIENT and span.name == "chat qwen"
    assert span.start_time == T0 + 5_000 and span.end_time == T0 + 5_000 + 100_000_000
    (event,) = span.events
    assert event.name == sc.FIRST_TOKEN_EVENT and event.timestamp == T0 + 5_000 + 40_000_000
    a = span.attributes
    assert a[sc.OPERATION] == "chat" and a[sc.PROVIDER] == "vllm" and a[sc.REQUEST_MODEL] == "qwen"
    assert a[sc.RESPONSE_MODEL] == "qwen-resp" and a[sc.SERVER_ADDRESS] == "10.0.0.5" and a[sc.SERVER_PORT] == 8000
    assert a[sc.OUTPUT_TOKENS] == 3 and a[sc.INPUT_TOKENS] == 12 and a[sc.TIME_TO_FIRST_CHUNK] == 0.04
    assert a[sc.FINISH_REASONS] == ("length",) and sc.ERROR_TYPE not in a
    assert span.status.status_code is StatusCode.UNSET


def test_without_sent_wall_ns_the_start_is_the_wall_time_after_lpxtops_pool_wait():
    span = builder().request(sample(sent_wall_ns=None, pool_wait_ms=2.0), INFO)
    assert span.start_time == T0 + 2_000_000


def test_a_failed_probe_is_an_error_span_with_its_kind():
    s = sample(ok=False, error_kind="http_5xx", error_message="HTTP 503: overloaded", http_status=503, ttft_ms=None,
               e2e_ms=None, token_event_ms=(), tokens_per_event=(), output_tokens=None,
               end_wall_time=T0 / 1e9 + 0.25)
    span = builder().request(s, INFO)
    assert span.status.status_code is StatusCode.ERROR and span.status.description == "http_5xx: HTTP 503: overloaded"
    assert span.attributes[sc.ERROR_TYPE] == "http_5xx" and span.events == ()
    assert abs((span.end_time - span.start_time) - 250_000_000) < 1_000  # send to when lpxtop gave up


def test_a_request_without_a_traceparent_gets_fresh_valid_ids():
    span = builder().request(sample(trace_id=None, span_id=None), INFO)
    assert span.context.trace_id != 0 and span.context.span_id != 0
    assert parse_ids("0" * 32, "0" * 16) is None and parse_ids("xyz", SPAN) is None


def agent_step(**kw) -> AgentStep:
    values = dict(endpoint="gpu:8000", api="chat", wall_time=T0 / 1e9, start_ns=0, tool_name="get_weather",
                  tool_calls=1, call1_ttft_ms=30.0, call1_e2e_ms=80.0, tool_ms=50.0, call2_start_ms=140.0,
                  answer_ttft_ms=20.0, answer_e2e_ms=60.0, step_ms=200.0)
    values.update(kw)
    return AgentStep(**values)


def by_name(spans):
    return {s.name: s for s in spans}


def test_an_agent_step_is_invoke_agent_with_call_tool_call_children():
    spans = builder().agent_step(agent_step(), INFO)
    assert [s.name for s in spans] == ["invoke_agent lpxtop", "chat qwen", "execute_tool get_weather", "chat qwen"]
    root, call1, tool, call2 = spans
    assert root.kind is SpanKind.INTERNAL and call1.kind is call2.kind is SpanKind.CLIENT
    assert tool.kind is SpanKind.INTERNAL
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}
    assert all(s.parent.span_id == root.context.span_id for s in (call1, tool, call2))
    assert (root.start_time, root.end_time) == (T0, T0 + 200_000_000)
    assert (call1.start_time, call1.end_time) == (T0, T0 + 80_000_000)
    assert (tool.start_time, tool.end_time) == (T0 + 90_000_000, T0 + 140_000_000)
    assert (call2.start_time, call2.end_time) == (T0 + 140_000_000, T0 + 200_000_000)
    assert call2.events[0].timestamp == T0 + 160_000_000
    assert root.attributes[sc.OPERATION] == "invoke_agent" and tool.attributes[sc.TOOL_NAME] == "get_weather"


def test_an_agent_step_uses_the_calls_own_ids_when_the_record_has_them():
    """The probe package may keep each call's traceparent on the step: a call in the step's trace is its
    child under its own span id; one that began a trace of its own is a root there, linked both ways."""
    step = agent_step()
    object.__setattr__(step, "trace_id", TRACE)
    object.__setattr__(step, "span_id", "1111111111111111")
    object.__setattr__(step, "call1_trace_id", TRACE)
    object.__setattr__(step, "call1_span_id", SPAN)
    object.__setattr__(step, "call2_trace_id", "f" * 32)
    object.__setattr__(step, "call2_span_id", "2222222222222222")
    root, call1, _, call2 = builder().agent_step(step, INFO)
    assert f"{root.context.span_id:016x}" == "1111111111111111"
    assert f"{call1.context.span_id:016x}" == SPAN and call1.parent.span_id == root.context.span_id
    assert f"{call2.context.trace_id:032x}" == "f" * 32 and call2.parent is None
    assert call2.links[0].context.span_id == root.context.span_id
    assert root.links[0].context.span_id == call2.context.span_id


def test_a_failed_call_1_ends_the_tree_there():
    step = agent_step(error_kind="http_5xx", error_message="call 1: HTTP 500", failed_call=1, call1_e2e_ms=None,
                      tool_ms=None, call2_start_ms=None, answer_ttft_ms=None, answer_e2e_ms=None, step_ms=None)
    root, call1 = builder().agent_step(step, INFO)
    assert root.status.status_code is StatusCode.ERROR and call1.status.status_code is StatusCode.ERROR
    assert call1.attributes[sc.ERROR_TYPE] == "http_5xx" and root.end_time == T0 + 30_000_000


def test_a_dify_step_is_a_client_invoke_agent_with_the_tool_it_saw():
    step = agent_step(api="dify", call1_ttft_ms=None, call1_e2e_ms=None, call2_start_ms=None, tool_ms=40.0,
                      time_to_tool_name_ms=50.0, time_to_observation_ms=90.0, answer_ttft_ms=120.0,
                      answer_e2e_ms=200.0, step_ms=200.0, client_latency_ms=210.0)
    info = EndpointInfo(name="app", api="dify", provider="dify")
    root, tool = builder().agent_step(step, info)
    assert root.name == "invoke_agent" and root.kind is SpanKind.CLIENT and root.attributes[sc.PROVIDER] == "dify"
    assert root.end_time == T0 + 210_000_000 and tool.parent.span_id == root.context.span_id
    assert (tool.start_time, tool.end_time) == (T0 + 50_000_000, T0 + 90_000_000)


@settings(max_examples=60, deadline=None)
@given(share=st.sampled_from([0.0, 0.01, 0.1, 0.5, 0.999, 1.0]), seed=st.integers(0, 2**32))
def test_the_sampling_rule_is_the_sdks(share, seed):
    from lpxtop.otel.pipeline import ratio_bound

    sampler = TraceIdRatioBased(share)
    rng = random.Random(seed)
    bound = ratio_bound(share)
    for _ in range(200):
        trace_id = rng.getrandbits(128) or 1
        ours = (trace_id & ((1 << 64) - 1)) < bound
        theirs = sampler.should_sample(None, trace_id, "x").decision is Decision.RECORD_AND_SAMPLE
        assert ours == theirs


def names(latest: bool) -> set[str]:
    agg = Aggregator()
    m = Measures(agg, latest=latest)
    m.request(sample(), INFO, 0)
    m.request(sample(ok=False, error_kind="refused", ttft_ms=None, e2e_ms=None, token_event_ms=(),
                     tokens_per_event=(), output_tokens=None, prompt_tokens=None), INFO, 0)
    m.agent_step(agent_step(), INFO, 0)
    return {metric.name for metric, _ in agg.collect()}


def test_default_names_are_the_v1_41_conventions():
    assert names(False) == {"gen_ai.client.operation.duration", "gen_ai.client.operation.time_to_first_chunk",
                            "gen_ai.client.operation.time_per_output_chunk", "gen_ai.client.token.usage",
                            "lpxtop.probe.itl", "lpxtop.probe.errors"}


def test_the_opt_in_names_are_the_newest_conventions():
    assert names(True) == {"gen_ai.client.inference.duration", "gen_ai.client.inference.time_to_first_chunk",
                           "gen_ai.client.inference.time_per_output_chunk",
                           "gen_ai.client.inference.usage.input_tokens", "gen_ai.client.inference.usage.output_tokens",
                           "gen_ai.client.inference.operation.input_tokens",
                           "gen_ai.client.inference.operation.output_tokens", "gen_ai.invoke_agent.duration",
                           "gen_ai.execute_tool.duration", "lpxtop.probe.itl", "lpxtop.probe.errors"}


def test_a_client_limited_probe_has_series_of_its_own():
    agg = Aggregator()
    m = Measures(agg)
    m.request(sample(), INFO, 0)
    m.request(sample(client_limited=True), INFO, 0)
    rows = dict((metric.name, rows) for metric, rows in agg.collect())
    durations = rows["gen_ai.client.operation.duration"]
    assert len(durations) == 2
    assert sorted(dict(a).get(sc.CLIENT_LIMITED, False) for a, _ in durations) == [False, True]
