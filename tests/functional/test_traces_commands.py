"""`--traces-listen` through the commands, against the simulator's spans over loopback: `once` joins its
probes (and an agent step's calls, by parent span) and its chain agrees with the simulator's own record;
`load` splits each step's TTFT; `record` keeps the joined segments and replay shows them; the exporter
serves the chain histograms; the demo runs a receiver of its own. Each command runs its receiver in a
process of its own, as users run it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from lpxtop.model.probe import Percentiles
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.cli import run_cli
from tests.support.ports import free_port
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
AGREE_MS = 2.0
CHAIN_KEYS = {"source", "probes_joined", "probes_unjoined", "probes_pending", "unjoined_reasons", "server_ttft_ms",
              "queue_ms", "prefill_ms", "decode_ms", "outside_ms", "to_server_ms", "all_requests"}
P_KEYS = {"p50", "p95", "p99", "mean", "max"}


def traced_sim(listen: int, **kw) -> SimConfig:
    settings = {"model": "m", "ttft_ms": 20.0, "itl_ms": 3.0, "max_num_seqs": 2, "jitter": 0.0,
                "otlp_traces_endpoint": f"http://127.0.0.1:{listen}/v1/traces", "otlp_schedule_delay_s": 0.1, **kw}
    return SimConfig(**settings)


def test_once_joins_every_probe_and_its_chain_agrees_with_the_simulators_record(capsys):
    listen = free_port()
    # virtual users on 2 slots: the probes queue now and then, so the queue is not all zeros
    config = traced_sim(listen, background_load=(2, 3, 60.0), background_max_tokens=(8, 16),
                        background_prompt_tokens=(8, 16))
    with start_sim_in_thread(config) as sim:
        result = run_cli(capsys, "once", sim.url, "-n", "10", "--interval", "100ms", "--max-tokens", "8",
                         "--traces-listen", f"127.0.0.1:{listen}", "--json", "--no-metrics")
        records = {r.trace_id: r for r in sim.server.records if r.trace_id}
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    (endpoint,) = data["endpoints"]
    chain = endpoint["chain"]
    assert set(chain) == CHAIN_KEYS and set(chain["all_requests"]) == {"count", "queue_ms", "prefill_ms", "decode_ms"}
    assert chain["source"] == "otlp" and chain["probes_joined"] == endpoint["probes"]["ok"] == 10
    assert chain["probes_unjoined"] == 0 and chain["probes_pending"] == 0 and chain["unjoined_reasons"] == {}
    for key in ("server_ttft_ms", "queue_ms", "prefill_ms", "decode_ms", "to_server_ms"):
        assert set(chain[key]) == P_KEYS, key
    # the probes' own records in the simulator (10 of them; the virtual users' carry no trace id)
    assert len(records) == 10
    for key, field in (("queue_ms", "server_queue_ms"), ("prefill_ms", "server_prefill_ms"),
                       ("server_ttft_ms", "server_ttft_ms"), ("decode_ms", "server_decode_ms")):
        truth = Percentiles.of([getattr(r, field) for r in records.values()])
        assert abs(chain[key]["p50"] - truth.p50) < AGREE_MS, (key, chain[key], truth)
    assert chain["all_requests"]["count"] > 10  # the virtual users' requests are the server's population
    traces = data["traces"]
    assert traces["listening"] == f"127.0.0.1:{listen}" and traces["requests_joined"] == 10
    assert traces["dropped"] == {} and traces["error"] is None
    gap = endpoint["server"]
    assert gap is None  # --no-metrics: the gap needs no histogram any more ...
    assert "server spans: 10 of 10 probes joined" in result.stderr or "10 of 10 requests joined" in result.stderr


def test_once_gap_is_the_joined_spans_exact_figure(capsys):
    listen = free_port()
    with start_sim_in_thread(traced_sim(listen)) as sim:
        result = run_cli(capsys, "once", sim.url, "-n", "4", "--interval", "100ms", "--max-tokens", "4",
                         "--traces-listen", f"127.0.0.1:{listen}", "--json")
    data = json.loads(result.stdout)
    endpoint = data["endpoints"][0]
    gap = endpoint["server"]["ttft_gap_ms"]
    assert gap["method"] == "joined_spans" and gap["estimate"] is False and gap["range"][0] == gap["range"][1]
    assert gap["value"] == pytest.approx(endpoint["chain"]["outside_ms"]["mean"], abs=1e-3)


def test_once_without_a_receiver_has_a_null_chain(capsys):
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5.0, itl_ms=1.0)) as sim:
        result = run_cli(capsys, "once", sim.url, "-n", "1", "--json", "--no-metrics")
    data = json.loads(result.stdout)
    assert data["endpoints"][0]["chain"] is None and data["traces"] is None


def test_once_with_the_receivers_port_taken_says_why_and_still_reports(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        busy = taken.getsockname()[1]
        with start_sim_in_thread(SimConfig(model="m", ttft_ms=5.0, itl_ms=1.0)) as sim:
            result = run_cli(capsys, "once", sim.url, "-n", "2", "--json", "--no-metrics", "--traces-listen",
                             f"127.0.0.1:{busy}")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["endpoints"][0]["chain"] is None
    assert f"cannot listen on 127.0.0.1:{busy}" in data["traces"]["error"]
    assert any(a["kind"] == "traces" for a in data["alerts"])


def test_once_joins_each_agent_call_to_its_own_span_in_the_steps_trace(capsys):
    listen = free_port()
    with start_sim_in_thread(traced_sim(listen)) as sim:
        result = run_cli(capsys, "once", sim.url, "-n", "3", "--interval", "100ms", "--probe", "agent",
                         "--include-client-limited", "--traces-listen", f"127.0.0.1:{listen}", "--json")
        records = [r for r in sim.server.records if r.trace_id]
    data = json.loads(result.stdout)
    agent = data["endpoints"][0]["agent"]
    assert agent["steps_ok"] == 3, agent
    assert len(records) == 6 and len({r.trace_id for r in records}) == 3  # one trace per step, two calls each
    assert data["traces"]["requests_joined"] == 6 and data["traces"]["requests_unjoined"] == 0
    spans = agent["breakdown_spans_ms"]
    assert agent["breakdown_spans_steps"] == 3 and set(spans) == {"queue", "prefill", "decode", "tool", "outside"}
    truth = sum(r.server_prefill_ms for r in records) / 3  # both calls' prefill, per step
    assert spans["prefill"] == pytest.approx(truth, abs=0.01)


def lpxtop(*argv: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "lpxtop", *argv], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, **kw)


def test_load_splits_each_steps_ttft_into_queue_prefill_and_outside(tmp_path):
    listen = free_port()
    out = tmp_path / "report.json"
    with start_sim_in_thread(traced_sim(listen, max_num_seqs=1)) as sim:
        proc = lpxtop("load", sim.url, "--concurrency", "1,3", "--duration", "2s", "--warmup", "500ms",
                      "--output-tokens", "8", "--no-ui", "--no-record", "--json", str(out),
                      "--traces-listen", f"127.0.0.1:{listen}")
        out_text, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-2000:]
    report = json.loads(out.read_text())
    one, three = report["steps"]
    for step in (one, three):
        chain = step["chain"]
        assert set(chain) == CHAIN_KEYS
        assert chain["probes_joined"] >= step["completed"] > 0 and chain["probes_unjoined"] == 0, chain
        for q in ("p50", "p95"):
            split = step["ttft_split"][q]
            parts = split["queue_ms"] + split["prefill_ms"] + split["server_other_ms"] + split["outside_ms"]
            assert parts == pytest.approx(split["ttft_ms"], abs=0.01)
        assert chain["all_requests"]["count"] >= step["completed"]
    # three streams on one slot: the TTFT's growth is the queue's
    assert three["ttft_split"]["p95"]["queue_ms"] > one["ttft_split"]["p95"]["queue_ms"] + 5.0
    assert "p95 q/p/out" in out_text  # the table printed at the end


def test_record_keeps_the_joined_segments_and_replay_shows_them(tmp_path, capsys):
    from lpxtop.record.replay import ReplaySource

    listen = free_port()
    path = tmp_path / "run.lpxrec"
    with start_sim_in_thread(traced_sim(listen)) as sim:
        result = run_cli(capsys, "record", sim.url, "--interval", "200ms", "--duration", "4s", "--out", str(path),
                         "--traces-listen", f"127.0.0.1:{listen}", "--no-metrics")
    assert result.returncode == 0, result.stderr
    source = ReplaySource(path, at=None, playing=False)
    try:
        timeline = source.timeline
        timeline.seek(timeline.end)
        view = source.snapshot().endpoints[0]
    finally:
        source.close()
    assert view.chain is not None and view.chain.probes_joined >= 3, view.chain
    assert view.chain.queue_ms is not None and view.ttft_gap.method == "joined_spans"
    exported = run_cli(capsys, "export", str(path), "--what", "chain")
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert lines and all(line["type"] == "chain" for line in lines), exported.stderr
    joined = [line for line in lines if line["joined"]]
    assert len(joined) >= 3 and all(line["queue_ms"] is not None and line["trace_id"] for line in joined)


def metrics_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 - loopback
        return answer.read().decode()


def test_exporter_serves_the_chain_histograms():
    listen, metrics = free_port(), free_port()
    with start_sim_in_thread(traced_sim(listen)) as sim:
        proc = lpxtop("exporter", sim.url, "--interval", "200ms", "--listen", f"127.0.0.1:{metrics}",
                      "--traces-listen", f"127.0.0.1:{listen}")
        try:
            def chain_counted() -> str | None:
                try:
                    text = metrics_text(f"http://127.0.0.1:{metrics}/metrics")
                except OSError:
                    return None
                lines = [line for line in text.splitlines() if line.startswith("lpxtop_chain_queue_seconds_count")]
                # the gap from the spans also wants joined probes that lpxtop did not flag as late (their
                # time outside the engine is not measured), which a busy machine can hold back a while
                gap = 'lpxtop_ttft_gap_seconds{' in text and 'method="joined_spans"' in text
                return text if lines and float(lines[0].rsplit(" ", 1)[1]) >= 2 and gap else None

            text = wait_for(chain_counted, timeout=60.0, step=0.5)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=30)
    for family in ("lpxtop_chain_queue_seconds", "lpxtop_chain_prefill_seconds", "lpxtop_chain_outside_seconds"):
        assert f"# TYPE {family} histogram" in text and f'{family}_bucket{{' in text
    assert 'lpxtop_ttft_gap_seconds{' in text and 'method="joined_spans"' in text


def test_the_demo_runs_a_receiver_and_its_simulators_spans_join():
    from lpxtop.cli.demo import start_demo

    with start_demo(interval_s=0.3) as demo:
        engine = demo.engine
        engine.start()
        # Two joined probes make a chain; the gap from the spans also wants probes that lpxtop did not
        # flag as late, which a busy machine can hold back a while: wait for both (bounded).
        wait_for(lambda: any(v.chain is not None and v.chain.probes_joined >= 2 for v in engine.snapshot().endpoints)
                 and any(v.ttft_gap.method == "joined_spans" for v in engine.snapshot().endpoints),
                 timeout=60.0, step=0.5)
        views = {v.name: v for v in engine.snapshot().endpoints}
    assert views["vllm-sim-a"].chain is not None
    assert any(v.ttft_gap.method == "joined_spans" for v in views.values())
