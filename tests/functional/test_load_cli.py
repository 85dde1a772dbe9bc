"""`lpxtop load` as a user runs it: a real process against the simulated server, its exit status, its
files, and Ctrl-C in the middle of a step."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.paths import REPO
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(60)
FAST_SIM = SimConfig(max_num_seqs=2, itl_ms=4.0, ttft_ms=10.0, jitter=0.0, seed=4)
RELAXED = ["--client-lag-limit", "1000", "--client-cpu-wait-limit", "1"]  # a busy shared box: see tests/support/load_runs.py


def lpxtop(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "lpxtop", "load", *argv], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def test_headless_run_writes_json_csv_and_requests_that_agree_and_fail_on_slo_exits_3(tmp_path):
    with start_sim_in_thread(FAST_SIM) as sim:
        proc = lpxtop(sim.url, "--concurrency", "1,4", "--duration", "0.8", "--warmup", "0.2", "--output-tokens", "12",
                      "--ignore-eos", "--slo", "ttft_p95<=1ms", "--fail-on-slo", "--no-ui", "--json", "-",
                      "--csv", str(tmp_path / "steps.csv"), "--requests-jsonl", str(tmp_path / "req.jsonl"), *RELAXED)
        out, err = proc.communicate(timeout=45)
    assert proc.returncode == 3, err  # the run finished; --fail-on-slo turns the missed SLO into 3
    report = json.loads(out)  # stdout holds the JSON alone: the table and the sentence go to stderr
    assert report["schema"] == "lpxtop-load/1" and report["outcome"] == "done" and report["partial"] is False
    assert report["target"]["model"] == "sim-llama-8b" and report["target"]["server_kind"] == "vllm"
    assert [s["concurrency"] for s in report["steps"]] == [1, 4]
    assert all(s["slo_met"] is False for s in report["steps"])
    assert report["capacity"] == {**report["capacity"], "concurrency": None}
    assert "capacity: none" in err and "step 2 done" in err
    rows = list(csv.DictReader((tmp_path / "steps.csv").open()))
    lines = [json.loads(x) for x in (tmp_path / "req.jsonl").read_text().splitlines()]
    for step, row in zip(report["steps"], rows):
        counted = [x for x in lines if x["step"] == step["index"] and x["counted"]]
        assert step["completed"] == int(row["completed"]) == len(counted)
        assert float(row["median_ttft_ms"]) == step["median_ttft_ms"]
        assert float(row["output_throughput"]) == step["output_throughput"]
        assert step["total_output_tokens"] == sum(x["output_tokens"] for x in counted) == 12 * len(counted)
    assert {x["phase"] for x in lines} >= {"warmup", "measured"}


def test_a_target_that_is_down_exits_1_and_says_so(tmp_path):
    port = free_port()
    proc = lpxtop(f"127.0.0.1:{port}", "--concurrency", "1", "--no-ui", "--json", str(tmp_path / "r.json"))
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "refused" in err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["outcome"] == "target_down" and report["steps"] == [] and "refused" in report["error"]


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_mid_step_stops_at_once_and_leaves_a_valid_partial_report(tmp_path, sig, code):
    """Ctrl-C, and SIGTERM as systemd, CI runners and `timeout` send it, alike."""
    path = tmp_path / "r.json"
    with start_sim_in_thread(FAST_SIM) as sim:
        proc = lpxtop(sim.url, "--concurrency", "1,2", "--duration", "1", "--warmup", "0.2", "--output-tokens", "12",
                      "--slo", "ttft_p95<=5s", "--no-ui", "--json", str(path), *RELAXED)
        # wait (bounded) until the second step measures, then interrupt it
        deadline = time.monotonic() + 40
        seen = []
        assert proc.stderr is not None
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            if "step 2: 2 concurrent, measuring" in line:
                break
        assert any("step 2: 2 concurrent, measuring" in s for s in seen), seen
        time.sleep(0.3)
        sent_at = time.monotonic()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=20)
        stopped_in = time.monotonic() - sent_at
    assert proc.returncode == code, err
    assert stopped_in < 3.0  # at once: in-flight requests are cancelled, not waited for
    report = json.loads(path.read_text())
    assert report["outcome"] == "stopped" and report["partial"] is True
    first, second = report["steps"]
    assert first["status"] == "done" and first["slo_met"] is True and first["completed"] > 0
    assert second["status"] == "partial" and second["duration"] < 1.0
    assert report["capacity"]["concurrency"] == 1  # a partial step is never the capacity


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX pseudo-terminals")
@pytest.mark.parametrize("key, code", [(b"\x03", 130)], ids=["ctrl-c"])  # q: the Pilot tests
def test_the_dashboard_on_a_terminal_stops_at_once_and_writes_the_report(tmp_path, key, code):
    from tests.support.pty_terminal import Terminal

    path = tmp_path / "r.json"
    with start_sim_in_thread(FAST_SIM) as sim:
        term = Terminal("load", sim.url, "--concurrency", "1,2", "--duration", "1", "--warmup", "0.2", "--refresh", "0.2",
                        "--output-tokens", "12", "--json", str(path), *RELAXED)
        try:
            term.wait_for("2 concurrent · measuring", timeout_s=40)  # the second step's window is open
            sent_at = time.monotonic()
            term.type(key, pause_s=0)
            assert term.proc.wait(20) == code
            assert time.monotonic() - sent_at < 5.0
        finally:
            term.close()
    report = json.loads(path.read_text())
    assert report["outcome"] == "stopped"
    assert [s["status"] for s in report["steps"]] == ["done", "partial"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX pseudo-terminals")
def test_sigterm_ends_the_dashboard_as_q_does_and_the_report_is_written(tmp_path):
    from tests.support.pty_terminal import Terminal

    path = tmp_path / "r.json"
    with start_sim_in_thread(FAST_SIM) as sim:
        term = Terminal("load", sim.url, "--concurrency", "1", "--duration", "20", "--warmup", "0.2", "--refresh",
                        "0.2", "--output-tokens", "12", "--json", str(path), *RELAXED)
        try:
            term.wait_for("measuring", timeout_s=40)
            term.proc.send_signal(signal.SIGTERM)
            assert term.proc.wait(20) == 143
        finally:
            term.close()
    report = json.loads(path.read_text())
    assert report["outcome"] == "stopped" and [s["status"] for s in report["steps"]] == ["partial"]


def test_every_run_is_recorded_by_default_with_a_mark_per_step(tmp_path):
    """A headless run writes a recording in the state directory, says where, and puts it in the JSON: the
    server, GPU and host readings through the test, a `load_step` mark per step holding what the report
    says of it (at the step's first request), the run's start and end; no probes (the load's requests are
    not engine probes: --requests-jsonl has them). Replay jumps from step to step."""
    from lpxtop.record.export import export
    from lpxtop.record.reading import Recording
    from lpxtop.record.replay import ReplaySource

    state = tmp_path / "state"
    with start_sim_in_thread(FAST_SIM) as sim:
        proc = subprocess.run(
            [sys.executable, "-m", "lpxtop", "load", sim.url, "--concurrency", "1,2", "--duration", "0.6",
             "--warmup", "0.2", "--output-tokens", "8", "--no-ui", "--json", str(tmp_path / "r.json"), *RELAXED],
            cwd=REPO, capture_output=True, text=True, timeout=45, env={**os.environ, "XDG_STATE_HOME": str(state)})
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    path = Path(report["recording"])
    assert path.parent == state / "lpxtop" and path.name.startswith("load-") and path.exists()
    assert f"recorded to {path}" in proc.stdout
    with Recording(path) as recording:
        marks = recording.marks()
        out = io.StringIO()
        counts = export(recording, out)
    steps = [m for m in marks if m.kind == "load_step"]
    assert [m.payload["concurrency"] for m in steps] == [1, 2]
    for mark, step in zip(steps, report["steps"]):
        assert mark.t == step["started_at"]
        for key in ("completed", "failed", "median_ttft_ms", "p99_itl_ms", "output_throughput", "server"):
            assert mark.payload[key] == step[key], key
        assert mark.label.startswith(f"load_step: step {step['index'] + 1}: {step['concurrency']} concurrent, done")
    assert [m.payload["event"] for m in marks if m.kind == "load"] == ["start", "end"]
    assert counts.get("server", 0) >= 2 and counts.get("host", 0) >= 1 and counts.get("gpu", 0) >= 1
    assert counts["load_step"] == 2 and counts["load"] == 2 and "probe" not in counts
    source = ReplaySource(path, playing=False)
    try:
        assert source.timeline.next_mark(1, ("load_step",)).t == steps[0].t
        assert source.timeline.next_mark(1, ("load_step",)).t == steps[1].t
        view = source.snapshot().endpoints[0]
        assert view.name == "load" and view.server is not None and view.server.kind == "vllm"
    finally:
        source.close()


def test_a_step_mark_after_the_recordings_last_reading_is_still_a_place_replay_jumps_to(tmp_path):
    """A load step's mark is placed at its first request; on a busy machine the engine's last reading (every
    second) can come before the last step began, and replay must still find the mark (`n`)."""
    from lpxtop.cli.load import build_load_engine
    from lpxtop.record.recorder import Recorder
    from lpxtop.record.replay import ReplaySource
    from tests.support.load_runs import plan_for

    path = tmp_path / "run.lpxrec"
    with start_sim_in_thread(FAST_SIM) as sim:
        plan = plan_for(sim.url)
        engine = build_load_engine(plan, ui=False, scrape=True, readings=True)
        recorder = Recorder.start_for(engine, path, endpoints=[plan.endpoint])
        with engine:
            time.sleep(1.3)
    after_the_last_reading = time.time() + 2.0
    recorder.mark("load_step", {"label": "step 2"}, after_the_last_reading)
    recorder.close()
    source = ReplaySource(path, playing=False)
    try:
        assert source.end < after_the_last_reading or source.timeline.end >= after_the_last_reading
        found = source.timeline.next_mark(1, ("load_step",))
        assert found is not None and found.t == after_the_last_reading
        assert source.timeline.position() == after_the_last_reading
    finally:
        source.close()


def test_no_record_writes_no_recording(tmp_path):
    state = tmp_path / "state"
    with start_sim_in_thread(FAST_SIM) as sim:
        proc = subprocess.run(
            [sys.executable, "-m", "lpxtop", "load", sim.url, "--concurrency", "1", "--duration", "0.3",
             "--warmup", "0", "--output-tokens", "4", "--no-ui", "--no-record", "--json", "-", *RELAXED],
            cwd=REPO, capture_output=True, text=True, timeout=45, env={**os.environ, "XDG_STATE_HOME": str(state)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["recording"] is None
    assert not (state / "lpxtop").exists() and "recorded to" not in proc.stderr


def test_record_flags_that_cannot_work_are_usage_errors_before_any_load(tmp_path):
    for flags, said in ((["--record-file", str(tmp_path / "nowhere" / "r.lpxrec")], "no directory"),
                        (["--max-size", "lots"], "recording:")):
        proc = subprocess.run([sys.executable, "-m", "lpxtop", "load", f"127.0.0.1:{free_port()}", "--concurrency", "1",
                               "--no-ui", *flags], cwd=REPO, capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2 and said in proc.stderr, proc.stderr
