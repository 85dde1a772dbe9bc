"""The exporter beside a real engine probing the simulated server: /metrics as Prometheus and
OpenMetrics parse it, the histograms hold what the engine measured, labels stay fixed while the
endpoint flaps, and /probe answers within the scrape timeout against a server that hangs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import httpx
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families

from lpxtop.cli.assemble import build_engine
from lpxtop.export.exporter import Exporter
from lpxtop.export.settings import ExporterSettings
from lpxtop.model.probe import ERROR_KINDS
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.ports import free_port
from tests.support.prometheus import HangingServer, binary, exported, running, scrape, series, value
from tests.support.sim import endpoint
from tests.support.waiting import wait_for

IDENTITY = ("host", "endpoint", "model", "server_kind")


def test_metrics_hold_what_the_engine_measured_and_parse_in_both_formats():
    with start_sim_in_thread(SimConfig(model="sim-x", ttft_ms=20, itl_ms=3)) as sim, exported(sim.url) as (exp, engine):
        # the server's latency histograms are read every HISTOGRAMS_EVERY_S (10 s, engine/scrape/tracker.py): the
        # first read may come before the first probe ends, so its mean can wait for the next one
        wait_for(lambda: (v := engine.snapshot().endpoints) and v[0].probes_ok >= 4 and v[0].server is not None
                 and v[0].server.ok and v[0].server.server_ttft_ms.mean is not None, timeout=25)
        before = engine.snapshot().endpoints[0]
        text = scrape(exp).text
        view = engine.snapshot().endpoints[0]
        samples = series(text)
        ident = {"host": "test-host", "endpoint": view.name, "model": "sim-x", "server_kind": "vllm"}
        # histograms: every successful probe once; ITL every gap (the engine's window holds all of them)
        count = value(samples, "lpxtop_probe_ttft_seconds_count", **ident)
        assert count is not None and before.probes_ok <= count
        # the exporter takes each probe as it ends; the engine publishes its snapshot twice a second
        wait_for(lambda: engine.snapshot().endpoints[0].probes_ok >= count, timeout=5)
        itl_count = value(samples, "lpxtop_probe_itl_seconds_count", **ident)
        assert itl_count >= 15 * (count - 1)
        assert value(samples, "lpxtop_probe_ttft_seconds_bucket", le="+Inf", **ident) == count
        assert value(samples, "lpxtop_endpoint_up", **ident) == 1.0
        assert value(samples, "lpxtop_probe_success", **ident) == 1.0
        assert value(samples, "lpxtop_endpoint_status", status="up", **ident) == 1.0
        for kind in ERROR_KINDS:  # every class from 0, so rate() works from the first error
            assert value(samples, "lpxtop_probe_errors_total", kind=kind, **ident) == 0.0
        assert value(samples, "lpxtop_server_requests_waiting", **ident) is not None
        assert value(samples, "lpxtop_endpoint_info", url=sim.url, **ident) == 1.0
        assert value(samples, "lpxtop_build_info", host="test-host") == 1.0
        # the window's percentiles are the engine's own figures
        p50 = value(samples, "lpxtop_probe_window_ttft_seconds", percentile="p50", **ident)
        assert p50 is not None and 0.015 < p50 < 0.2
        # no label that varies per request: the identity labels and the fixed dimensions only
        for (_, labels) in samples:
            assert {k for k, _ in labels} <= {*IDENTITY, "le", "kind", "status", "percentile", "url", "version",
                                              "gpu", "uuid", "name", "pid", "process", "port", "state", "severity",
                                              "method"}
        # the server's exact means, and lpxtop's own lateness counted
        assert value(samples, "lpxtop_server_ttft_mean_seconds", **ident) is not None
        assert value(samples, "lpxtop_probes_client_limited_total", **ident) is not None
        gap = [dict(ls)["method"] for (n, ls) in samples if n == "lpxtop_ttft_gap_seconds"]
        assert set(gap) <= {"probe_only", "window_means"} and len(gap) <= 1
        # OpenMetrics on request, parsed by prometheus_client's OpenMetrics parser
        om = scrape(exp, "application/openmetrics-text; version=1.0.0; charset=utf-8")
        assert om.headers["content-type"].startswith("application/openmetrics-text")
        names = {f.name for f in openmetrics_families(om.text)}
        assert {"lpxtop_probe_ttft_seconds", "lpxtop_probes", "lpxtop_endpoint"} <= names
        # promtool, Prometheus' own linter, accepts the exposition
        promtool = binary("promtool")
        result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stdout + result.stderr


def _identity_sets(text: str) -> tuple[set, set]:
    """(every sample's name and labels, the identity of every per-endpoint sample); alerts apart. The gap's
    series comes and goes with the method that found it (a fixed set of two), or none: its method is
    checked against that set and left out of the keys."""
    samples = series(text)
    methods = {dict(ls)["method"] for n, ls in samples if n == "lpxtop_ttft_gap_seconds"}
    assert methods <= {"probe_only", "window_means"}, methods
    keys = {(n, ls) for n, ls in samples
            if not n.startswith("process_") and n not in ("lpxtop_alert", "lpxtop_ttft_gap_seconds")}
    idents = {tuple(dict(ls).get(k) for k in IDENTITY) for n, ls in keys if any(k == "endpoint" for k, _ in ls)
              and n.startswith(("lpxtop_probe", "lpxtop_endpoint", "lpxtop_server", "lpxtop_ttft", "lpxtop_probes"))}
    return keys, idents


def flap(seconds: float, phase_s: float) -> None:
    """Flap an endpoint through every way it can fail (faults, and the server gone and back) for a while,
    checking after each phase that the exporter's set of series stays what it was before."""
    port = free_port()
    config = SimConfig(model="flappy", ttft_ms=5, itl_ms=1)
    sim = start_sim_in_thread(config, port=port)
    try:
        with exported(f"http://127.0.0.1:{port}/v1") as (exp, engine):
            # the latency histograms are read every HISTOGRAMS_EVERY_S (10 s, engine/scrape/tracker.py): the first
            # read may come before the first probe has ended, and the next one 10 s later
            wait_for(lambda: "lpxtop_server_ttft_p50_seconds{" in scrape(exp).text, timeout=25)
            baseline, idents = _identity_sets(scrape(exp).text)
            assert len(idents) == 1 and None not in next(iter(idents))
            phases = [{"fail_rate": 1.0}, "down", {"cut_after_tokens": 2}, {"error_event_after_tokens": 1},
                      {"bad_json": True}, {"empty": True}, {"forbidden": True}, {}]
            deadline = time.monotonic() + seconds
            rounds = 0
            while time.monotonic() < deadline and rounds < 1000:
                for phase in phases:
                    if phase == "down":
                        sim.stop()
                        time.sleep(phase_s)
                        sim = start_sim_in_thread(config, port=port)
                    else:
                        sim.server.set_faults(**{"fail_rate": 0.0, "cut_after_tokens": None,
                                                 "error_event_after_tokens": None, "bad_json": False,
                                                 "empty": False, "forbidden": False, **phase})
                        time.sleep(phase_s)
                    keys, now_idents = _identity_sets(scrape(exp).text)
                    assert now_idents == idents, f"labels changed during {phase}: {now_idents} != {idents}"
                    assert keys <= baseline, f"new series during {phase}: {sorted(keys - baseline)[:5]}"
                rounds += 1
            errors = series(scrape(exp).text)
            failed = sum(v for (n, _), v in errors.items() if n == "lpxtop_probe_errors_total")
            assert failed > 0  # the flaps were seen
            alerts = {dict(ls).get("kind") for (n, ls) in errors if n == "lpxtop_alert"}
            assert len(alerts) <= 8  # alert kinds are a bounded set
    finally:
        sim.stop()


def test_labels_stay_fixed_while_an_endpoint_flaps():
    flap(seconds=1.0, phase_s=0.25)  # one round of every phase


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_labels_stay_fixed_while_an_endpoint_flaps_for_minutes():
    flap(seconds=180.0, phase_s=2.0)


def test_probe_answers_within_the_scrape_timeout_against_a_hanging_server():
    with HangingServer() as hanging, start_sim_in_thread(SimConfig(model="sim-p", ttft_ms=5, itl_ms=1)) as sim:
        engine = build_engine([endpoint(sim.url, model="sim-p", interval_s=60.0)], scrape_metrics=False)
        exporter = Exporter(engine, ExporterSettings(listen_port=0, host_label="h"))
        with exporter, engine:
            wait_for(lambda: engine.snapshot().endpoints)
            began = time.monotonic()
            r = httpx.get(f"{exporter.url}/probe", params={"target": hanging.url, "model": "m"},
                          headers={"X-Prometheus-Scrape-Timeout-Seconds": "1.2"}, timeout=10)
            took = time.monotonic() - began
            assert r.status_code == 200 and took < 1.2, took
            samples = series(r.text)
            assert value(samples, "lpxtop_probe_success") == 0.0
            assert value(samples, "lpxtop_probe_failed", kind="first_token_timeout") == 1.0
            assert value(samples, "lpxtop_probe_timeout_seconds") == pytest.approx(0.7)
            # without a model, asking /v1/models shares the same budget
            began = time.monotonic()
            r = httpx.get(f"{exporter.url}/probe", params={"target": f"127.0.0.1:{hanging.port}"},
                          headers={"X-Prometheus-Scrape-Timeout-Seconds": "1.0"}, timeout=10)
            assert time.monotonic() - began < 1.0 and value(series(r.text), "lpxtop_probe_success") == 0.0
            # a healthy server: one full probe, and the target may be the exporter's endpoint by name
            ok = series(httpx.get(f"{exporter.url}/probe", params={"target": "sim"}, timeout=10).text)
            assert value(ok, "lpxtop_probe_success") == 1.0
            assert 0.004 < value(ok, "lpxtop_probe_first_token_seconds") < 1.0
            assert value(ok, "lpxtop_probe_response_output_tokens") == 16
            assert httpx.get(f"{exporter.url}/probe", timeout=5).status_code == 400
            assert httpx.get(f"{exporter.url}/probe", params={"target": "ftp://x"}, timeout=5).status_code == 400
            assert httpx.get(f"{exporter.url}/nothing", timeout=5).status_code == 404
            assert "lpxtop exporter" in httpx.get(exporter.url, timeout=5).text


def test_probe_sends_credentials_only_to_the_endpoint_they_belong_to(monkeypatch):
    from lpxtop.export.probe import resolve_target
    from lpxtop.model.endpoint import EndpointConfig

    own = EndpointConfig(name="vllm", url="http://127.0.0.1:8000/v1", api_key_env="KEY", headers=(("X-T", "v"),))
    assert resolve_target("vllm", None, [own]).api_key_env == "KEY"
    assert resolve_target("127.0.0.1:8000", "m", [own]) == replace(own, model="m")
    stranger = resolve_target("http://10.0.0.9:8000/v1", None, [own])
    assert stranger.api_key_env is None and stranger.headers == ()


def test_probe_can_be_turned_off_and_is_bounded_in_concurrency():
    with HangingServer() as hanging:
        engine = build_engine([])
        settings = ExporterSettings(listen_port=0, probe_enabled=False)
        with Exporter(engine, settings) as exporter:
            assert httpx.get(f"{exporter.url}/probe", params={"target": hanging.url}, timeout=5).status_code == 404
        with Exporter(build_engine([]), ExporterSettings(listen_port=0, max_concurrent_probes=1)) as exporter:
            import threading

            slow = threading.Thread(target=httpx.get, args=(f"{exporter.url}/probe",), daemon=True,
                                    kwargs={"params": {"target": hanging.url, "model": "m"}, "timeout": 10,
                                            "headers": {"X-Prometheus-Scrape-Timeout-Seconds": "1.2"}})
            slow.start()
            wait_for(lambda: hanging.accepted >= 1, timeout=5)
            busy = httpx.get(f"{exporter.url}/probe", params={"target": hanging.url, "model": "m"}, timeout=5)
            assert busy.status_code == 503
            slow.join(5)


def test_exporter_command_serves_until_sigterm(tmp_path):
    with start_sim_in_thread(SimConfig(model="sim-c", ttft_ms=5, itl_ms=1)) as sim:
        config = tmp_path / "lpxtop.toml"
        config.write_text(f'[[endpoint]]\nurl = "{sim.url}"\nname = "simc"\ninterval = 0.25\n\n'
                          '[exporter]\nhost = "from-file"\nttft_buckets = [0.001, 0.5, 1]\n')
        port = free_port()
        argv = [sys.executable, "-m", "lpxtop", "exporter", "--config", str(config), "--listen", f"127.0.0.1:{port}"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with running(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)) as proc:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert f"serving http://127.0.0.1:{port}/metrics" in line, line + (proc.stderr.read() if proc.poll() else "")
            text = wait_for(lambda: (t := httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
                            and 'lpxtop_probe_ttft_seconds_count{endpoint="simc"' in t and t, timeout=15)
            les = {dict(ls)["le"] for (n, ls) in series(text) if n == "lpxtop_probe_ttft_seconds_bucket"}
            assert les == {"0.001", "0.5", "1.0", "+Inf"}  # the file's bucket edges
            assert 'host="from-file"' in text
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(10) == 0


def test_exporter_command_reports_an_address_it_cannot_use(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "lpxtop", "exporter", "127.0.0.1:1", "--listen",
                                 f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    bad = subprocess.run([sys.executable, "-m", "lpxtop", "exporter", "127.0.0.1:1", "--listen", "nowhere"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "--listen" in bad.stderr


def test_the_dashboard_serves_the_same_with_export():
    """`lpxtop URL --export ADDR`: the dashboard's own engine, exported (the wiring, without a terminal)."""
    from lpxtop.cli.common import engine_for, load_endpoints
    from lpxtop.cli.dashboard import exporter_for
    from lpxtop.cli.entry import build_parser

    with start_sim_in_thread(SimConfig(model="sim-d", ttft_ms=5, itl_ms=1)) as sim:
        args = build_parser().parse_args([sim.url, "--export", "127.0.0.1:0", "--interval", "0.25", "--no-discover"])
        engine = engine_for(args, load_endpoints(args))
        exporter = exporter_for(args, engine, {})
        assert exporter is not None
        try:
            engine.start()
            text = wait_for(lambda: (t := scrape(exporter).text) and "lpxtop_probe_ttft_seconds_count{" in t and t,
                            timeout=15)
            assert 'model="sim-d"' in text
        finally:
            exporter.stop()
            engine.stop()
    assert exporter_for(build_parser().parse_args([]), engine, {}) is None
