"""A real Prometheus scraping two lpxtop exporters (two processes standing for two hosts, each probing
its own simulated server with a different TTFT), a server scraped directly, and `/probe` of a server
that hangs; then `lpxtop fleet` reading it all back.

One Prometheus for the module (scrape and rule evaluation every second; it scrapes its static targets first
about 5 s after it starts, when its target discovery first reports them, so the exporters probe every 0.1 s
to have the counts the tests need soon after). Skipped with a reason when
the prometheus binary is missing; failed instead under LPXTOP_REQUIRE_PROMETHEUS=1 (CI).
"""

from __future__ import annotations

import bisect
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from lpxtop.export.settings import DEFAULT_BUCKETS
from lpxtop.fleet.promql import FleetQueries
from lpxtop.fleet.source import FleetReader, FleetSettings, FleetSource
from lpxtop.http import HttpClient
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.ports import free_port
from tests.support.prometheus import HangingServer, Prometheus, binary, running, series, value

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "prometheus" / "lpxtop.rules.yml"
# Simulated TTFTs chosen in the middle of a default bucket, ±10 % jitter included: 35 ms in (25, 50],
# 170 ms in (150, 200]. The comparison below still computes the bucket from the measured value.
HOSTS = {"hostA": 35.0, "hostB": 170.0}
MIN_PROBES = 8
MATCH = '{job="lpxtop"}'


@dataclass
class Fleet:
    prometheus: Prometheus
    exporters: dict[str, str]  # host label -> exporter base URL
    direct: str  # instance of the server Prometheus scrapes without an exporter
    covered: str  # instance of a server that is scraped directly AND probed by an exporter


def _exporter(url: str, host: str, port: int, log: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "lpxtop", "exporter", url, "--listen", f"127.0.0.1:{port}", "--host-label", host,
            "--interval", "0.1", "--no-discover"]
    with open(log, "wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Iterator[Fleet]:
    binary("prometheus")
    work = tmp_path_factory.mktemp("fleet")
    with ExitStack() as stack:
        sims = {host: stack.enter_context(start_sim_in_thread(SimConfig(model=f"model-{host}", ttft_ms=ttft, itl_ms=2)))
                for host, ttft in HOSTS.items()}
        direct = stack.enter_context(start_sim_in_thread(SimConfig(model="model-direct", ttft_ms=5, itl_ms=1)))
        hanging = stack.enter_context(HangingServer())
        exporters = {}
        for host, sim in sims.items():
            port = free_port()
            proc = _exporter(sim.url, host, port, work / f"exporter-{host}.log")
            stack.enter_context(running(proc))
            exporters[host] = f"127.0.0.1:{port}"
        direct_instance = f"127.0.0.1:{direct.port}"
        covered_instance = f"127.0.0.1:{sims['hostA'].port}"
        config = f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: ["{RULES}"]
scrape_configs:
  - job_name: lpxtop
    static_configs:
      - targets: [{", ".join(f'"{a}"' for a in exporters.values())}]
  - job_name: lpxtop-probe
    metrics_path: /probe
    scrape_interval: 2s
    scrape_timeout: 1s
    params:
      model: [m]
    static_configs:
      - targets: ["{hanging.url}"]
    relabel_configs:
      - source_labels: [__address__]
        target_label: __param_target
      - source_labels: [__param_target]
        target_label: instance
      - target_label: __address__
        replacement: {exporters["hostA"]}
  - job_name: vllm-direct
    static_configs:
      - targets: ["{direct_instance}", "{covered_instance}"]
"""
        prometheus = Prometheus(work, config).start()
        stack.callback(prometheus.stop)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            # an increase needs two scrapes of the series: what rate() and histogram_quantile need too
            counts = {r["metric"]["host"]: float(r["value"][1]) for r in prometheus.query(
                'sum by (host) (increase(lpxtop_probe_ttft_seconds_count{job="lpxtop"}[1m]))')}
            if len(counts) == 2 and min(counts.values()) >= MIN_PROBES and prometheus.query(
                    'lpxtop_probe_success{job="lpxtop-probe"}'):
                break
            time.sleep(0.5)
        else:
            logs = "\n".join(p.read_text(errors="replace")[-800:] for p in work.glob("*.log"))
            raise AssertionError(f"no data in Prometheus in time: {logs}")
        yield Fleet(prometheus, exporters, direct_instance, covered_instance)


def _fleet_json(fleet: Fleet, *extra: str) -> tuple[int, dict]:
    result = subprocess.run([sys.executable, "-m", "lpxtop", "fleet", "--prometheus", fleet.prometheus.url,
                             "--match", MATCH, "--window", "1m", "--json", *extra],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    return result.returncode, json.loads(result.stdout)


def test_fleet_json_lists_both_hosts_and_agrees_with_each_engine_within_a_bucket(fleet: Fleet):
    code, doc = _fleet_json(fleet)
    # each exporter's own engine: the dashboard's window p50, read from the exporter right after
    measured = {}
    for host, address in fleet.exporters.items():
        samples = series(httpx.get(f"http://{address}/metrics", timeout=5).text)
        measured[host] = value(samples, "lpxtop_probe_window_ttft_seconds", percentile="p50") * 1000.0
    assert code == 0, doc["prometheus"]
    assert doc["schema"] == 1 and doc["source"] == "fleet" and doc["prometheus"]["status"] == "ok"
    rows = {(e["host"], e["name"]): e for e in doc["endpoints"]}
    lpxtop_rows = {host: e for (host, _), e in rows.items() if host in HOSTS}
    assert set(lpxtop_rows) == set(HOSTS)
    edges_ms = [0.0, *(b * 1000.0 for b in DEFAULT_BUCKETS["ttft"])]
    for host, row in lpxtop_rows.items():
        assert row["status"] == "up" and row["model"] == f"model-{host}" and row["server_kind"] == "vllm"
        assert row["probes"]["sent"] > 0 and row["probes"]["failed"] == 0
        fleet_p50 = row["latency_ms"]["ttft"]["p50"]
        engine_p50 = measured[host]
        # the histogram's resolution: the bucket the engine's exact median falls in
        i = bisect.bisect_left(edges_ms, engine_p50)
        low, high = edges_ms[i - 1], edges_ms[i]
        assert low <= fleet_p50 <= high, f"{host}: fleet {fleet_p50:.1f} ms, engine {engine_p50:.1f} ms, bucket ({low}, {high}]"
        assert row["latency_ms"]["ttft"]["mean"] == pytest.approx(engine_p50, rel=0.25)  # the mean is exact
        assert row["server"]["requests_waiting"] is not None
    assert lpxtop_rows["hostB"]["latency_ms"]["ttft"]["p50"] > lpxtop_rows["hostA"]["latency_ms"]["ttft"]["p50"]
    # a server Prometheus scrapes directly, with no exporter: its own figures, no client TTFT
    direct = rows[("127.0.0.1", fleet.direct)]
    assert direct["server_kind"] == "vllm" and direct["model"] == "model-direct"
    assert direct["latency_ms"]["ttft"] is None and direct["server"]["kv_cache_usage"] is not None
    # ... but not a second row for the server hostA's exporter already probes
    assert ("127.0.0.1", fleet.covered) not in rows


def test_probe_scraped_by_prometheus_answers_within_the_scrape_timeout(fleet: Fleet):
    prom = fleet.prometheus
    success = prom.query('lpxtop_probe_success{job="lpxtop-probe"}')
    assert success and float(success[0]["value"][1]) == 0.0
    assert float(prom.query('up{job="lpxtop-probe"}')[0]["value"][1]) == 1.0  # no scrape timed out
    took = float(prom.query('max_over_time(scrape_duration_seconds{job="lpxtop-probe"}[1m])')[0]["value"][1])
    assert took < 1.0
    failed = prom.query('lpxtop_probe_failed{job="lpxtop-probe"} == 1')
    assert {r["metric"]["kind"] for r in failed} <= {"first_token_timeout", "connect_timeout", "read_timeout"}


def test_the_documented_rules_load_and_evaluate(fleet: Fleet):
    prom = fleet.prometheus
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        groups = httpx.get(f"{prom.url}/api/v1/rules", timeout=5).json()["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        if rules and all(r.get("lastEvaluation", "").startswith("20") for r in rules):
            break
        time.sleep(0.5)
    assert len(rules) >= 10 and all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        hosts = {r["metric"]["host"] for r in prom.query("lpxtop:probe_ttft_seconds:p95_5m")}
        if hosts == set(HOSTS):
            break
        time.sleep(0.5)
    assert hosts == set(HOSTS)


async def test_every_fleet_query_is_valid_promql_and_within_bounds(fleet: Fleet):
    settings = FleetSettings(prometheus_url=fleet.prometheus.url, queries=FleetQueries(match='job="lpxtop"', window="1m"))
    async with HttpClient(timeout=10) as http:
        reading = await FleetReader(settings).read(http, charts=True)
    assert reading.errors == {}
    assert reading.charts["ttft_p50_ms"].series  # query_range gives the charts' points
    # a series cap: a broad query is cut, and the cut is said
    capped = FleetSettings(prometheus_url=fleet.prometheus.url, max_series=1, queries=FleetQueries(window="1m"))
    source = FleetSource(capped)
    async with HttpClient(timeout=10) as http:
        snap = await source.refresh(http)
    assert any(a.kind == "prometheus_series_cap" for a in snap.alerts)


async def test_the_dashboard_renders_the_fleet_worst_first_with_a_host_column(fleet: Fleet):
    from lpxtop.ui.app import create_app
    from lpxtop.ui.screens.detail import DetailScreen
    from lpxtop.ui.widgets.charts import PlotextChart
    from lpxtop.ui.widgets.endpoints_table import EndpointsTable

    settings = FleetSettings(prometheus_url=fleet.prometheus.url, refresh_s=1.0,
                             queries=FleetQueries(match='job="lpxtop"', window="1m"))
    source = FleetSource(settings)
    app = create_app(source, refresh_s=0.2, ssh=False, on_ready=source.start)
    try:
        async with app.run_test(size=(160, 40)) as pilot:
            table = app.screen.query_one(EndpointsTable)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and len(table.row_names) < 3:
                await pilot.pause(0.2)
            keys = table.row_names
            assert keys[0].startswith("hostB/") and keys[1].startswith("hostA/")  # worst (slowest) first
            assert "Host" in [c.label for c in table.columns]
            await pilot.press("p")
            await pilot.pause(0.1)
            assert any("fleet view" in str(n.message) for n in app._notifications)
            await pilot.press("enter")
            await pilot.pause(0.3)
            assert isinstance(app.screen, DetailScreen)
            deadline = time.monotonic() + 10
            chart = app.screen.query_one("#chart-ttft", PlotextChart)
            while time.monotonic() < deadline and (chart.spec is None or chart.spec.empty):
                await pilot.pause(0.3)
            assert chart.spec is not None and not chart.spec.empty  # from query_range
    finally:
        source.stop()


def test_fleet_says_when_prometheus_is_not_there():
    port = free_port()
    result = subprocess.run([sys.executable, "-m", "lpxtop", "fleet", "--prometheus", f"127.0.0.1:{port}", "--json",
                             "--timeout", "2"], capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert result.returncode == 3
    doc = json.loads(result.stdout)
    assert doc["endpoints"] == [] and "cannot reach Prometheus" in doc["prometheus"]["status"]
    assert "cannot reach Prometheus" in result.stderr


def test_fleet_survives_a_prometheus_that_hangs_or_answers_nonsense():
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Nonsense(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            if "lpxtop_endpoint_up" in self.path:
                body = b'{"status":"error","errorType":"bad_data","error":"parse error at char 3"}'
                self.send_response(400)
            else:
                body = b"<html>proxy error</html>"
                self.send_response(502)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Nonsense)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    try:
        source = FleetSource(FleetSettings(prometheus_url=f"127.0.0.1:{server.server_address[1]}", timeout_s=1.0))
        snap = source.collect_once()
        assert snap.endpoints == () and "Prometheus refused a query (bad_data)" in snap.alerts[0].message
    finally:
        server.shutdown()
        server.server_close()
    with HangingServer() as hanging:
        source = FleetSource(FleetSettings(prometheus_url=f"127.0.0.1:{hanging.port}", timeout_s=0.5))
        began = time.monotonic()
        snap = source.collect_once()
        assert time.monotonic() - began < 3.0
        assert "did not answer within 0.5 s" in snap.alerts[0].message


def test_queries_documented_are_the_ones_sent():
    doc = (ROOT / "docs" / "prometheus" / "README.md").read_text()
    printed = subprocess.run([sys.executable, "-m", "lpxtop", "fleet", "--print-queries", "--match", MATCH],
                             capture_output=True, text=True, timeout=30, cwd=ROOT).stdout
    assert printed.strip() and printed.strip() in doc, "regenerate docs/prometheus/README.md's query list"


def test_fleet_source_refuses_the_controls_that_steer_probing():
    source = FleetSource(FleetSettings(prometheus_url="http://127.0.0.1:9"))
    capabilities = source.capabilities
    assert capabilities.readonly and capabilities.controls is None
    for action in ("pause", "reset", "interval", "signal"):
        assert "fleet view" in capabilities.refusals[action]
    assert "theme" not in capabilities.refusals
