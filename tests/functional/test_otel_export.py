"""OpenTelemetry export end to end: a real engine probing the simulated server, the pipeline sending OTLP/HTTP
protobuf to a receiver on loopback that decodes it with the reference classes (`opentelemetry-proto`).
Names, units, bucket bounds, attributes, span kinds, parent/child links, the trace ids; a backend that is
down, slow or refusing; the command line (`once --json`'s "otlp", `load`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import replace

import pytest

from lpxtop import textsafe
from lpxtop.cli.assemble import build_engine
from lpxtop.model.events import SampleEvent
from lpxtop.otel import semconv as sc
from lpxtop.otel.pipeline import OtlpPipeline
from lpxtop.otel.settings import OtlpSettings, parse_endpoint
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.cli import run_cli
from tests.support.otlp_receiver import attrs, start_receiver, stop_receiver
from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.sim import endpoint
from tests.support.waiting import wait_for

FAST = SimConfig(model="sim-otel", ttft_ms=5, itl_ms=1, dify_tool_latency_ms=5)
TOKEN = "otlp-secret-token-7f3a9c"


@contextmanager
def receiver(**kw):
    r = start_receiver(**kw)
    try:
        yield r
    finally:
        stop_receiver(r)


@contextmanager
def exporting(url: str, target, *, interval_s: float = 0.4, timeout_s: float = 2.0, latest: bool = False,
              **endpoint_kw):
    """An engine probing `target`, its pipeline exporting to `url`; yields (engine, pipeline, samples seen)."""
    settings = OtlpSettings(endpoint=parse_endpoint(url), headers=(("x-api-key", TOKEN),), interval_s=interval_s,
                            timeout_s=timeout_s, latest_names=latest)
    textsafe.register_secret(TOKEN)
    config = endpoint(target, model=None, interval_s=0.2, metrics_interval_s=0.3, **endpoint_kw)
    engine = build_engine([config], window_s=300, discover=False)
    pipeline = OtlpPipeline(settings)
    pipeline.attach(engine)
    seen: list = []
    engine.add_listener(seen.append)
    pipeline.start()
    engine.start()
    try:
        yield engine, pipeline, seen
    finally:
        engine.stop()
        pipeline.close(timeout=3.0)


def traceparent_seen(record) -> str | None:
    """The traceparent the simulated server received with a request, once the simulator keeps it."""
    value = getattr(record, "traceparent", None)
    if value is None:
        value = (getattr(record, "headers", None) or {}).get("traceparent")
    return value


def test_probes_arrive_as_conventional_metrics_and_spans_with_their_own_trace_ids():
    with start_sim_in_thread(FAST) as sim, receiver() as rec:
        with exporting(rec.url, sim.url) as (engine, pipeline, seen):
            wait_for(lambda: len(rec.spans()) >= 4 and "lpxtop.endpoint.up" in rec.metrics(), timeout=20)
        samples = [e.sample for e in seen if isinstance(e, SampleEvent)]
        status = pipeline.status()
        # what the receiver was sent, and how
        for path in ("/v1/traces", "/v1/metrics"):
            sent = rec.of(path)
            assert sent and all(r.content_type == "application/x-protobuf" for r in sent)
            assert all(r.headers.get("x-api-key") == TOKEN for r in sent)
        spans = rec.spans()
        assert status["exported_spans"] == len(spans) == len(samples) and status["dropped_spans"] == 0
        assert status["failed_exports"] == 0 and status["last_error"] is None
        assert TOKEN not in json.dumps(status) and TOKEN not in json.dumps([a.to_json() for a in pipeline.alerts()])
        resource, scope, _ = spans[0]
        assert resource["service.name"] == "lpxtop" and scope.name == "lpxtop"
        by_response = {attrs(s.attributes)[sc.RESPONSE_ID]: s for _, _, s in spans}
        assert len({s.trace_id for _, _, s in spans}) == len(spans)  # a fresh trace per probe
        for sample in samples:
            span = by_response[sample.response_id]
            a = attrs(span.attributes)
            assert span.name == "chat sim-otel" and span.kind == 3  # SPAN_KIND_CLIENT
            assert span.parent_span_id == b""
            assert a[sc.OPERATION] == "chat" and a[sc.PROVIDER] == "vllm" and a[sc.REQUEST_MODEL] == "sim-otel"
            assert a[sc.SERVER_ADDRESS] == "127.0.0.1" and a[sc.SERVER_PORT] == int(sim.url.rsplit(":", 1)[1].split("/")[0])
            assert a[sc.OUTPUT_TOKENS] == sample.output_tokens and a[sc.STREAM] is True
            assert [e.name for e in span.events] == [sc.FIRST_TOKEN_EVENT]
            assert span.events[0].time_unix_nano - span.start_time_unix_nano == pytest.approx(sample.ttft_ms * 1e6, abs=1)
            assert span.end_time_unix_nano - span.start_time_unix_nano == pytest.approx(sample.e2e_ms * 1e6, abs=1)
            if sample.trace_id is not None:  # the probe package sends a traceparent and keeps it on the Sample
                assert span.trace_id.hex() == sample.trace_id and span.span_id.hex() == sample.span_id
            seen_by_server = traceparent_seen(sim.server.record_for(sample.response_id))
            if seen_by_server is not None:  # ... and the simulator keeps what it received
                assert seen_by_server.split("-")[1:3] == [span.trace_id.hex(), span.span_id.hex()]
        metrics = rec.metrics()
        duration = metrics["gen_ai.client.operation.duration"]
        assert duration.unit == "s" and duration.histogram.aggregation_temporality == 2  # CUMULATIVE
        point = duration.histogram.data_points[0]
        assert tuple(point.explicit_bounds) == sc.DURATION_BOUNDS and len(point.bucket_counts) == 15
        assert {k: v for k, v in attrs(point.attributes).items() if k != sc.CLIENT_LIMITED} == {
            sc.OPERATION: "chat", sc.PROVIDER: "vllm", sc.REQUEST_MODEL: "sim-otel", sc.RESPONSE_MODEL: "sim-otel",
            sc.SERVER_ADDRESS: "127.0.0.1", sc.SERVER_PORT: a[sc.SERVER_PORT]}
        total = sum(p.count for p in duration.histogram.data_points)
        assert total >= len(samples)
        for name in ("gen_ai.client.operation.time_to_first_chunk", "gen_ai.client.operation.time_per_output_chunk"):
            assert metrics[name].unit == "s"
            assert tuple(metrics[name].histogram.data_points[0].explicit_bounds) == sc.DURATION_BOUNDS
        usage = metrics["gen_ai.client.token.usage"]
        assert usage.unit == "{token}"
        assert {attrs(p.attributes)[sc.TOKEN_TYPE] for p in usage.histogram.data_points} == {"input", "output"}
        assert tuple(usage.histogram.data_points[0].explicit_bounds) == sc.TOKEN_BOUNDS
        assert tuple(metrics["lpxtop.probe.itl"].histogram.data_points[0].explicit_bounds) == sc.ITL_BOUNDS
        up = metrics["lpxtop.endpoint.up"].gauge.data_points[0]
        assert up.as_double == 1.0 and attrs(up.attributes)[sc.ENDPOINT] == "sim"
        for name in ("lpxtop.server.requests.waiting", "lpxtop.server.requests.running", "lpxtop.server.kv_cache.usage"):
            assert metrics[name].gauge.data_points


def test_the_pipeline_sends_the_ids_each_sample_carries():
    """The contract with the probe package: a Sample's trace_id/span_id are its span's ids, and the span starts
    at its sent_wall_ns (fed directly, as the engine's listener would)."""
    from lpxtop.model.probe import Sample

    with receiver() as rec:
        pipeline = OtlpPipeline(OtlpSettings(endpoint=rec.url, interval_s=0.2))
        pipeline.start()
        sent = []
        for i in range(5):
            trace, span = f"{i + 1:032x}", f"{i + 17:016x}"
            sample = Sample(endpoint="e", wall_time=time.time(), start_ns=0, ok=True, ttft_ms=3.0, e2e_ms=9.0,
                            token_event_ms=(3.0, 9.0), tokens_per_event=(1, 1), output_tokens=2, response_id=f"r{i}",
                            trace_id=trace, span_id=span, sent_wall_ns=time.time_ns())
            sent.append(sample)
            pipeline.on_event(SampleEvent("e", sample))
        pipeline.close()
        got = {attrs(s.attributes)[sc.RESPONSE_ID]: s for _, _, s in rec.spans()}
    for sample in sent:
        span = got[sample.response_id]
        assert (span.trace_id.hex(), span.span_id.hex()) == (sample.trace_id, sample.span_id)
        assert span.start_time_unix_nano == sample.sent_wall_ns


def test_agent_steps_arrive_as_an_invoke_agent_tree_and_a_dify_app_as_a_client_call():
    with start_sim_in_thread(FAST) as sim, receiver() as rec:
        with exporting(rec.url, sim.url, probes=("agent",), name="agent"):
            wait_for(lambda: sum(1 for *_, s in rec.spans() if s.name.startswith("invoke_agent lpxtop")) >= 2,
                     timeout=25)
        spans = [s for *_, s in rec.spans()]
    roots = [s for s in spans if s.name == "invoke_agent lpxtop"]
    assert roots
    for root in roots:
        children = sorted((s for s in spans if s.parent_span_id == root.span_id), key=lambda c: c.start_time_unix_nano)
        if sc.ERROR_TYPE not in attrs(root.attributes):
            assert [c.name for c in children] == ["chat sim-otel", "execute_tool get_weather", "chat sim-otel"]
        assert root.kind == 1  # INTERNAL: lpxtop runs the agent loop itself
        assert all(c.trace_id == root.trace_id for c in children)
        kinds = {c.name.split()[0]: c.kind for c in children}
        assert kinds.get("chat", 3) == 3 and kinds.get("execute_tool", 1) == 1
        assert all(root.start_time_unix_nano <= c.start_time_unix_nano <= c.end_time_unix_nano
                   <= root.end_time_unix_nano + 1 for c in children)
        assert attrs(root.attributes)[sc.OPERATION] == "invoke_agent"


def test_a_dify_app_step_is_a_client_invoke_agent_span_with_its_tool():
    with start_sim_in_thread(FAST) as sim, receiver() as rec:
        with exporting(rec.url, sim.url, probes=("agent",), api="dify", name="app"):
            wait_for(lambda: any(s.name.startswith("execute_tool") for *_, s in rec.spans()), timeout=25)
        spans = [s for *_, s in rec.spans()]
    tool = next(s for s in spans if s.name.startswith("execute_tool"))
    root = next(s for s in spans if s.span_id == tool.parent_span_id)
    assert root.name == "invoke_agent" and root.kind == 3 and attrs(root.attributes)[sc.PROVIDER] == "dify"


def test_the_opt_in_sends_the_newest_names():
    with start_sim_in_thread(FAST) as sim, receiver() as rec:
        with exporting(rec.url, sim.url, latest=True):
            wait_for(lambda: "gen_ai.client.inference.usage.output_tokens" in rec.metrics(), timeout=20)
        metrics = rec.metrics()
    assert "gen_ai.client.inference.duration" in metrics and "gen_ai.client.operation.duration" not in metrics
    assert "gen_ai.client.token.usage" not in metrics
    usage = metrics["gen_ai.client.inference.usage.output_tokens"]
    assert usage.sum.is_monotonic and usage.sum.aggregation_temporality == 2
    assert attrs(usage.sum.data_points[0].attributes)[sc.TOKEN_MODALITY] == "text"
    per_op = metrics["gen_ai.client.inference.operation.output_tokens"].histogram.data_points[0]
    assert tuple(per_op.explicit_bounds) == sc.TOKEN_BOUNDS


@pytest.mark.parametrize("mode", ["down", "slow", "refuse"])
def test_a_backend_that_is_down_slow_or_refusing_costs_spans_not_probes(mode):
    with start_sim_in_thread(FAST) as sim, receiver(mode="slow" if mode == "slow" else "refuse", delay_s=3.0,
                                                    status=400) as rec:
        url = f"http://127.0.0.1:{free_port()}" if mode == "down" else rec.url
        with exporting(url, sim.url, interval_s=0.3, timeout_s=0.5) as (engine, pipeline, _):
            wait_for(lambda: pipeline.failed_exports >= 2 and pipeline.dropped_spans >= 1, timeout=25)
            before = engine.snapshot().endpoints[0].probes_ok
            wait_for(lambda: engine.snapshot().endpoints[0].probes_ok >= before + 3, timeout=10)  # probing goes on
            alerts = wait_for(lambda: [a for a in engine.snapshot().alerts if a.kind == "otlp"], timeout=5)
            began = time.monotonic()
        closed_in = time.monotonic() - began
    status = pipeline.status()
    assert status["exported_spans"] == 0 and status["dropped_spans"] >= 1 and status["failed_exports"] >= 2
    assert {"down": "connection refused", "slow": "timed out", "refuse": "HTTP 400"}[mode] in status["last_error"]
    assert "failing" in alerts[0].message and alerts[0].severity == "warning"
    assert TOKEN not in status["last_error"] and TOKEN not in alerts[0].message
    assert closed_in < 8.0  # engine stop and the bounded last export


def test_a_full_span_buffer_drops_and_counts():
    from lpxtop.model.probe import Sample
    from lpxtop.otel import pipeline as module

    with receiver(mode="refuse", status=503) as rec:
        pipeline = OtlpPipeline(OtlpSettings(endpoint=rec.url, interval_s=3600, timeout_s=0.2))
        n = module.MAX_PENDING_SPANS + 100
        for i in range(n):
            pipeline.on_event(SampleEvent("e", Sample(endpoint="e", wall_time=time.time(), start_ns=i, ok=True,
                                                      e2e_ms=1.0, ttft_ms=1.0)))
        pipeline._drain(final=True)
        assert len(pipeline._pending) == module.MAX_PENDING_SPANS and pipeline.dropped_spans == 100
        pipeline.close(timeout=2.0)
    assert pipeline.dropped_spans == n and pipeline.exported_spans == 0


# ---- the command line ----

def lpxtop(*args: str, env: dict | None = None, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lpxtop", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env={**os.environ, **(env or {})})


def test_once_json_says_what_was_sent_and_the_resource_names_the_service(capsys, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"authorization=Bearer%20{TOKEN}")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "probe-box")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    with start_sim_in_thread(FAST) as sim, receiver() as rec:
        result = run_cli(capsys, "once", sim.url, "-n", "3", "--json", "--no-discover", "--otlp", rec.url)
        plain = run_cli(capsys, "once", sim.url, "-n", "1", "--json", "--no-discover")
        spans = rec.spans()
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["otlp"]["exported_spans"] == 3 == len(spans) and doc["otlp"]["dropped_spans"] == 0
    assert doc["otlp"]["endpoint"] == rec.url and doc["otlp"]["exported_points"] > 0
    assert "3 spans" in result.stderr
    assert TOKEN not in result.stdout + result.stderr
    resource = spans[0][0]
    assert resource["service.name"] == "probe-box" and resource["deployment.environment"] == "test"
    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in rec.requests)
    assert json.loads(plain.stdout)["otlp"] is None


def test_bad_otlp_settings_and_a_missing_package_are_usage_errors(capsys, monkeypatch):
    bad = run_cli(capsys, "once", "127.0.0.1:1", "--otlp", "grpc://x:4317", "--no-discover")
    assert bad.returncode == 2 and "OTLP/HTTP needs an http" in bad.stderr
    # as if lpxtop[otel] were not installed: the pipeline's import fails
    monkeypatch.delitem(sys.modules, "lpxtop.otel.pipeline", raising=False)
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    missing = run_cli(capsys, "once", "127.0.0.1:1", "--otlp", "http://127.0.0.1:1", "--no-discover",
                      "--deadline", "1")
    assert missing.returncode == 2 and "pip install 'lpxtop[otel]'" in missing.stderr


def test_load_requests_are_sampled_into_spans_and_all_counted_in_metrics(tmp_path):
    with start_sim_in_thread(replace(FAST, model="sim-load")) as sim, receiver() as rec:
        result = lpxtop("load", sim.url, "--concurrency", "2", "--duration", "1", "--warmup", "0.2", "--output-tokens",
                        "8", "--no-ui", "--no-record", "--json", str(tmp_path / "r.json"), "--client-lag-limit",
                        "1000", "--client-cpu-wait-limit", "1", "--otlp", rec.url, "--otlp-sample", "1",
                        timeout=60)
        spans = [s for *_, s in rec.spans()]
        metrics = rec.metrics()
    assert result.returncode == 0, result.stderr
    assert spans and all(attrs(s.attributes)[sc.REQUEST_KIND] == "load" for s in spans)
    assert {s.name for s in spans} == {"chat sim-load"}  # the model the test asked for, found by GET /models
    assert {attrs(s.attributes)[sc.LOAD_PHASE] for s in spans} >= {"measured"}
    assert all(attrs(s.attributes)[sc.LOAD_STEP] == 0 for s in spans)
    counted = sum(p.count for p in metrics["gen_ai.client.operation.duration"].histogram.data_points)
    assert counted == len(spans)  # --otlp-sample 1: every request traced, and every one counted
    assert "OpenTelemetry:" in result.stderr


@pytest.mark.parametrize("command", [None, "demo", "once", "record", "exporter", "load"])
def test_every_command_that_measures_takes_the_otlp_flags(command):
    from lpxtop.cli.entry import build_parser

    parser = build_parser(command)
    argv = ([] if command != "load" else ["127.0.0.1:1"]) + ["--otlp", "http://127.0.0.1:4318", "--otlp-sample",
                                                             "5%", "--otlp-interval", "2"]
    args = parser.parse_args(argv)
    assert (args.otlp, args.otlp_sample, args.otlp_interval) == ("http://127.0.0.1:4318", 0.05, 2.0)
