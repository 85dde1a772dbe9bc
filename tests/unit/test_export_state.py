"""The exporter's accumulation and families, fed the engine's own records (no network)."""

from __future__ import annotations

import bisect
import random
import time
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lpxtop.checks import ConfigError
from lpxtop.config import load_config_file
from lpxtop.engine.agent.window import summarize
from lpxtop.export.collector import LpxtopCollector
from lpxtop.export.settings import (
    DEFAULT_BUCKETS,
    ExporterSettings,
    check_buckets,
    parse_listen,
    settings_from_table,
)
from lpxtop.export.state import MAX_ENDPOINTS, MAX_PENDING, ExportState
from lpxtop.model.agent import AgentStep, AgentStepEvent
from lpxtop.model.alerts import Alert
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.events import SampleEvent, ScrapeEvent
from lpxtop.model.probe import Sample
from lpxtop.model.server import ServerLatency, ServerMetrics
from lpxtop.model.snapshot import EndpointView, Snapshot


def sample(name: str, ok: bool = True, ttft: float = 50.0, gaps: int = 15, gap: float = 10.0, kind: str | None = None):
    events = tuple(ttft + i * gap for i in range(gaps + 1)) if ok else ()
    return Sample(endpoint=name, wall_time=time.time(), start_ns=0, ok=ok, error_kind=None if ok else kind,
                  ttft_ms=ttft if ok else None, e2e_ms=events[-1] if ok else None, token_event_ms=events,
                  output_tokens=gaps + 1 if ok else None)


def view(name: str, *, model: str | None = "m", kind: str = "vllm", sent: int = 1, server: bool = True) -> EndpointView:
    return EndpointView(
        config=EndpointConfig(name=name, url=f"http://{name}/v1"), status="up", model=model, server_kind=kind,
        probes_sent=sent, probes_ok=sent, probes_failed=0, errors={}, ttft_ms=None, itl_ms=None, tpot_ms=None,
        e2e_ms=None, output_tokens_per_s=None, output_tokens=None, output_tokens_approx=False, last_error=None,
        last_error_time=None, samples=(), server=ServerMetrics(kind=kind, requests_waiting=3.0) if server else None,
    )


def snapshot(*views: EndpointView, alerts: tuple[Alert, ...] = ()) -> Snapshot:
    return Snapshot(wall_time=time.time(), host_name="h", version="0", started_at=0.0, paused=False, interval_s=2.0,
                    endpoints=views, alerts=alerts)


def exposition(state: ExportState, snap: Snapshot) -> dict:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LpxtopCollector(state, lambda: snap, "node-1"))
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def test_histograms_count_each_value_in_the_bucket_the_edges_say():
    """Differential: the exposition's cumulative buckets against bisect over the same values."""
    state = ExportState(DEFAULT_BUCKETS)
    rng = random.Random(7)
    ttfts = [rng.uniform(1, 3000) for _ in range(500)]
    for t in ttfts:
        state.listener(SampleEvent("a", sample("a", ttft=t)))
    state.listener(ScrapeEvent("a", time.time(), ServerMetrics()))  # not a sample: ignored
    out = exposition(state, snapshot(view("a")))
    edges = DEFAULT_BUCKETS["ttft"]
    for edge in edges:
        expected = bisect.bisect_right([t / 1000 for t in sorted(ttfts)], edge)
        labels = frozenset({"host": "node-1", "endpoint": "a", "model": "m", "server_kind": "vllm",
                            "le": repr(float(edge)) if edge != int(edge) else f"{edge:.1f}"}.items())
        assert out[("lpxtop_probe_ttft_seconds_bucket", labels)] == expected, edge
    ident = frozenset({"host": "node-1", "endpoint": "a", "model": "m", "server_kind": "vllm"}.items())
    assert out[("lpxtop_probe_ttft_seconds_count", ident)] == 500
    assert out[("lpxtop_probe_ttft_seconds_sum", ident)] == pytest.approx(sum(ttfts) / 1000)
    assert out[("lpxtop_probe_itl_seconds_count", ident)] == 500 * 15
    assert out[("lpxtop_probe_output_tokens_total", ident)] == 500 * 16
    assert out[("lpxtop_probes_total", ident)] == 500


def test_failures_count_by_class_and_labels_stick_through_an_outage():
    state = ExportState(DEFAULT_BUCKETS)
    state.listener(SampleEvent("a", sample("a")))
    exposition(state, snapshot(view("a")))
    state.listener(SampleEvent("a", sample("a", ok=False, kind="refused")))
    state.listener(SampleEvent("a", sample("a", ok=False, kind="something_new")))
    # during the outage the engine knows no server kind: the labels keep what they were
    out = exposition(state, snapshot(view("a", model=None, kind="unknown")))
    ident = {"host": "node-1", "endpoint": "a", "model": "m", "server_kind": "vllm"}
    errors = {dict(ls)["kind"]: v for (n, ls), v in out.items() if n == "lpxtop_probe_errors_total"}
    assert errors["refused"] == 1 and errors["other"] == 1 and sum(errors.values()) == 2
    assert all(set(ident.items()) <= set(ls) for (n, ls) in out if n.startswith("lpxtop_probe"))
    assert out[("lpxtop_probe_success", frozenset(ident.items()))] == 0.0


def test_an_endpoint_appears_once_its_labels_are_settled():
    state = ExportState(DEFAULT_BUCKETS)
    out = exposition(state, snapshot(view("a", model=None, kind="unknown", sent=0, server=False)))
    assert not any(dict(ls).get("endpoint") == "a" for _, ls in out)  # not yet: model and kind unknown
    out = exposition(state, snapshot(view("a", sent=1)))
    assert ("lpxtop_endpoint_up", frozenset({"host": "node-1", "endpoint": "a", "model": "m",
                                             "server_kind": "vllm"}.items())) in out


def test_the_queue_and_the_label_sets_are_bounded():
    state = ExportState(DEFAULT_BUCKETS)
    for _ in range(MAX_PENDING + 10):
        state.listener(SampleEvent("a", sample("a")))
    for i in range(MAX_ENDPOINTS + 5):
        state.listener(SampleEvent(f"ep{i}", sample(f"ep{i}")))
    with state.lock:
        state.drain()
    assert state.dropped >= 10 + 5
    assert len(state.endpoints()) <= MAX_ENDPOINTS


def test_alert_series_stay_at_zero_once_over():
    state = ExportState(DEFAULT_BUCKETS)
    active = Alert("warning", "kv_saturated", "KV full", "a")
    out = exposition(state, snapshot(view("a"), alerts=(active,)))
    key = ("lpxtop_alert", frozenset({"host": "node-1", "kind": "kv_saturated", "severity": "warning"}.items()))
    assert out[key] == 1
    assert exposition(state, snapshot(view("a")))[key] == 0


def test_exporter_settings_from_flags_and_the_config_file(tmp_path):
    assert parse_listen("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_listen(":9464") == ("0.0.0.0", 9464)
    assert parse_listen("[::1]:9") == ("::1", 9)
    assert parse_listen("9464") == ("127.0.0.1", 9464)
    for bad in ("", "host", "h:99999", "[::1]9"):
        with pytest.raises(ConfigError):
            parse_listen(bad)
    assert check_buckets([0.1, 1], "x") == (0.1, 1.0)
    for bad in ([], [1, 0.5], [0, 1], ["a"], [float("inf")], [True]):
        with pytest.raises(ConfigError):
            check_buckets(bad, "x")
    path = tmp_path / "lpxtop.toml"
    path.write_text('[exporter]\nlisten = "0.0.0.0:9500"\nhost = "gpu-1"\n\nttft_buckets = [0.2, 0.1]\n')
    table = load_config_file(path).exporter
    with pytest.raises(ConfigError, match=rf"{path}:5: \[exporter\]: key 'ttft_buckets'"):
        settings_from_table(table, path)
    path.write_text('[exporter]\nlisten = "0.0.0.0:9500"\nhost = "gpu-1"\ne2e_buckets = [1, 2]\nprobe = false\n')
    settings = settings_from_table(load_config_file(path).exporter, path, host_label="flag")
    assert settings.listen == "0.0.0.0:9500" and settings.host_label == "flag" and not settings.probe_enabled
    assert settings.buckets["e2e"] == (1.0, 2.0) and settings.buckets["ttft"] == DEFAULT_BUCKETS["ttft"]
    path.write_text("[exporter]\nlisen = 1\n")
    with pytest.raises(ConfigError, match="unknown key 'lisen'"):
        settings_from_table(load_config_file(path).exporter, path)
    assert ExporterSettings(listen_host="::1", listen_port=1).listen == "[::1]:1"


IDENT = {"host": "node-1", "endpoint": "a", "model": "m", "server_kind": "vllm"}


def ident(**extra: str) -> frozenset:
    return frozenset({**IDENT, **extra}.items())


def test_server_exact_means_and_the_gap_with_its_method():
    """The server's exact means (Δsum/Δcount) as their own families; the gap only where the dashboard shows
    one, labelled with how it was found (model/server_gap.py), and absent where it shows a reason."""
    probes = tuple(replace(sample("a", ttft=ttft), start_ns=i * 10**9) for i, ttft in enumerate((12.0, 14.0)))
    latency = ServerLatency(p50=9.0, p99=11.0, count=30.0, mean=10.0, min_at_least=8.0, max_at_most=12.0)
    queue = ServerLatency(p50=0.1, p99=0.3, count=30.0, mean=0.2)
    server = ServerMetrics(kind="vllm", server_ttft_ms=latency, server_queue_ms=queue,
                           server_e2e_ms=ServerLatency(None, None, 30.0, mean=250.0))
    state = ExportState(DEFAULT_BUCKETS)
    out = exposition(state, snapshot(replace(view("a"), samples=probes, server=server)))
    assert out[("lpxtop_server_ttft_mean_seconds", ident())] == pytest.approx(0.010)
    assert out[("lpxtop_server_queue_time_mean_seconds", ident())] == pytest.approx(0.0002)
    assert out[("lpxtop_server_e2e_mean_seconds", ident())] == pytest.approx(0.25)
    assert ("lpxtop_server_itl_mean_seconds", ident()) not in out  # the server has no such histogram: absent
    # client mean 13 ms − server mean 10 ms, an estimate within [13 − 12, 13 − 8]
    assert out[("lpxtop_ttft_gap_seconds", ident(method="window_means"))] == pytest.approx(0.003)
    wide = replace(latency, max_at_most=200.0)  # the server's TTFTs spread wide: no gap, and no series
    queued = replace(server, server_ttft_ms=wide, server_queue_ms=replace(queue, mean=80.0))
    out = exposition(state, snapshot(replace(view("a"), samples=probes, server=queued)))
    assert not [k for k in out if k[0] == "lpxtop_ttft_gap_seconds"]


def test_client_limited_probes_are_counted():
    state = ExportState(DEFAULT_BUCKETS)
    state.listener(SampleEvent("a", sample("a")))
    state.listener(SampleEvent("a", replace(sample("a"), client_limited=True)))
    out = exposition(state, snapshot(view("a")))
    assert out[("lpxtop_probes_client_limited_total", ident())] == 1
    assert out[("lpxtop_probes_total", ident())] == 2


def agent_step(**kw) -> AgentStep:
    values = dict(endpoint="a", api="chat", wall_time=time.time(), start_ns=0, time_to_tool_call_ms=80.0,
                  step_ms=300.0)
    values.update(kw)
    return AgentStep(**values)


def test_agent_steps_have_their_histograms_and_errors_by_kind():
    state = ExportState(DEFAULT_BUCKETS)
    state.listener(AgentStepEvent("a", agent_step()))
    state.listener(AgentStepEvent("a", agent_step(error_kind="bad_tool_args", step_ms=500.0)))  # still timed
    state.listener(AgentStepEvent("a", agent_step(error_kind="http_5xx", time_to_tool_call_ms=None, step_ms=None)))
    state.listener(AgentStepEvent("a", agent_step(error_kind="brand_new")))
    agent_only = replace(view("a", sent=0), agent=summarize((agent_step(),), api="chat", chain_steps=5))
    out = exposition(state, snapshot(agent_only))
    assert out[("lpxtop_agent_steps_total", ident())] == 4
    errors = {dict(ls)["kind"]: v for (n, ls), v in out.items() if n == "lpxtop_agent_errors_total"}
    assert errors["bad_tool_args"] == 1 and errors["http_5xx"] == 1 and errors["other"] == 1
    assert errors["no_tool_call"] == 0 and errors["refused"] == 0 and sum(errors.values()) == 3  # every kind from 0
    assert out[("lpxtop_agent_step_seconds_count", ident())] == 3
    assert out[("lpxtop_agent_step_seconds_sum", ident())] == pytest.approx(0.3 + 0.5 + 0.3)
    assert out[("lpxtop_agent_step_seconds_bucket", ident(le="0.5"))] == 3
    assert out[("lpxtop_agent_time_to_tool_call_seconds_count", ident())] == 3
    assert out[("lpxtop_agent_time_to_tool_call_seconds_bucket", ident(le="0.05"))] == 0
    # an endpoint probed by agent steps alone has no chat probe series
    assert ("lpxtop_probes_total", ident()) not in out
