"""The fleet's PromQL and the snapshot built from Prometheus' answers (answers written as Prometheus
sends them; the real Prometheus runs in tests/functional/test_fleet_prometheus.py)."""

from __future__ import annotations

import json

import pytest

from lpxtop.fleet.build import Reading, endpoint_views, gpus
from lpxtop.fleet.client import PromClient, PromError, normalize_base
from lpxtop.fleet.promql import FleetQueries, SelectorError, check_duration, parse_matchers
from lpxtop.fleet.source import FleetSettings, build_snapshot
from tests.support.fleet_readings import lpxtop_reading, reading, s


def test_selectors_and_durations():
    assert parse_matchers('{job="lpxtop"}') == 'job="lpxtop"'
    assert parse_matchers('job="lpxtop", env=~"prod.*"') == 'job="lpxtop", env=~"prod.*"'
    assert parse_matchers(' { a!="x\\"y" } ') == 'a!="x\\"y"'
    assert parse_matchers("") == "" and parse_matchers("{}") == ""
    for bad in ("job=lpxtop", '{job="a"} or up', '{job="a"', "1+1"):
        with pytest.raises(SelectorError):
            parse_matchers(bad)
    assert check_duration("5m") == "5m"
    with pytest.raises(SelectorError):
        check_duration("5 minutes")
    q = FleetQueries(match='job="lpxtop"', window="2m")
    assert all('job="lpxtop"' in text for key, text in q.instant().items()
               if not key.startswith(("server_", "dcgm", "nvitop")))
    assert "[2m]" in q.quantile("ttft", 0.5)
    assert normalize_base("prom:9090/") == "http://prom:9090"
    assert normalize_base("https://x/prometheus/") == "https://x/prometheus"


def test_rows_per_host_and_endpoint_with_their_figures():
    views = {v.key: v for v in endpoint_views(lpxtop_reading(), "5m")}
    assert set(views) == {"hostA/e1", "hostB/e1", "10.0.0.3/10.0.0.3:30000"}
    a = views["hostA/e1"]
    assert (a.model, a.server_kind, a.status, a.host) == ("m1", "vllm", "degraded", "hostA")
    assert a.ttft_ms.p50 == pytest.approx(30.0) and a.ttft_ms.mean == pytest.approx(31.0) and a.ttft_ms.count == 96
    assert a.output_tokens_per_s.p50 == pytest.approx(100.0) and a.output_tokens_per_s.p99 == pytest.approx(200.0)
    assert (a.probes_sent, a.probes_failed, a.probes_ok) == (100, 4, 96)
    assert a.error_rate == pytest.approx(0.04) and a.errors == {"http_5xx": 3, "refused": 1}
    assert a.last_error.startswith("http_5xx: 3 in the last 5m")
    assert a.server.requests_waiting == 4 and a.server.kv_cache_usage == 0.5 and a.server.server_ttft_ms.p50 == 20.0
    assert a.gpu_mem_bytes == 2**30
    b = views["hostB/e1"]  # its exporter is down: still a row, marked down, saying why
    assert b.status == "down" and "does not answer Prometheus" in b.last_error and b.ttft_ms.p50 == pytest.approx(120)
    direct = views["10.0.0.3/10.0.0.3:30000"]
    assert direct.server_kind == "sglang" and direct.model == "big" and direct.ttft_ms is None
    assert direct.server.requests_waiting == 3 and direct.server.kv_cache_usage == 0.7  # TP ranks summed
    assert direct.server.server_ttft_ms.p50 == pytest.approx(250.0)
    assert direct.to_json()["host"] == "10.0.0.3"


def test_the_snapshot_says_what_is_wrong_with_prometheus():
    settings = FleetSettings(prometheus_url="http://prom:9090")
    snap = build_snapshot(settings, lpxtop_reading(), started_at=0.0, seq=1, last_good=None)
    kinds = [a.kind for a in snap.alerts]
    assert "exporter_down" in kinds and "prometheus" not in kinds
    broken = Reading(taken_at=1001.0, errors={"rows": "cannot reach Prometheus at http://prom:9090: refused"})
    later = build_snapshot(settings, broken, started_at=0.0, seq=2, last_good=1000.0, previous=snap)
    assert later.endpoints == snap.endpoints  # the last good rows stay
    assert later.alerts[0].severity == "critical" and "showing the view from" in later.alerts[0].message


def test_gpus_from_lpxtop_dcgm_and_nvitop_without_doubles():
    r = reading(
        gpu_used=[s(40 * 2**30, host="hostA", gpu="gpu0", uuid="GPU-a", name="H100")],
        gpu_total=[s(80 * 2**30, host="hostA", gpu="gpu0", uuid="GPU-a", name="H100")],
        gpu_processes=[s(39 * 2**30, host="hostA", gpu="gpu0", pid="123", process="vllm", endpoint="e1")],
        # dcgm-exporter sees hostA's GPU too (same UUID: skipped) and hostC's (MiB)
        dcgm_used_mib=[s(1000, gpu="0", UUID="GPU-a", Hostname="hostA"),
                       s(2048, gpu="1", UUID="GPU-c", Hostname="hostC", modelName="A100")],
        dcgm_free_mib=[s(2048, gpu="1", UUID="GPU-c", Hostname="hostC", modelName="A100")],
        dcgm_util_pct=[s(50, gpu="1", UUID="GPU-c", Hostname="hostC", modelName="A100")],
        nvitop_used_mib=[s(10, hostname="hostD", index="0", devicename="L4", uuid="GPU-d")],
        nvitop_total_mib=[s(20, hostname="hostD", index="0", devicename="L4", uuid="GPU-d")],
    )
    snap = gpus(r)
    by_uuid = {d.uuid: d for d in snap.devices}
    assert set(by_uuid) == {"GPU-a", "GPU-c", "GPU-d"}
    assert by_uuid["GPU-a"].processes[0].endpoint == "hostA/e1" and by_uuid["GPU-a"].mem_used_pct == 50
    assert by_uuid["GPU-c"].mem_total_bytes == 4096 * 2**20 and by_uuid["GPU-c"].util_pct == 50
    assert by_uuid["GPU-c"].name == "hostC · A100" and by_uuid["GPU-d"].mem_used_pct == 50
    assert gpus(reading()).status.startswith("unavailable")


def test_the_client_turns_every_bad_answer_into_one_line():
    client = PromClient("http://prom:9090", max_series=2)
    ok = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"a": "1"}, "value": [1, "NaN"]}, {"metric": {"a": "2"}, "value": [1, "2"]},
        {"metric": {"a": "3"}, "value": [1, "3"]}]}}).encode()
    answer = client._decode(200, ok)
    assert answer.truncated == 1 and [x.value for x in answer.series] == [None, 2.0]  # NaN dropped, cut at 2
    with pytest.raises(PromError, match="bad_data"):
        client._decode(400, b'{"status":"error","errorType":"bad_data","error":"parse error"}')
    with pytest.raises(PromError, match="not Prometheus' API"):
        client._decode(502, b"<html>bad gateway</html>")
    with pytest.raises(PromError, match="not a vector"):
        client._decode(200, b'{"status":"success","data":{"resultType":"string","result":[1,"x"]}}')
