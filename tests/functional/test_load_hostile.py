"""The load generator's accounting when the server, the machine or the user are hostile: a server that hangs
after its headers while the generator's loop is late, an open loop far past its slots, lpxtop's own file
descriptors running out, `/metrics` holding +Inf and NaN, a report path that cannot be written, SIGTERM.
Real processes and sockets on loopback throughout."""

from __future__ import annotations

import json
import time

import pytest

from lpxtop.load.slo import parse_slo
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.load_runs import plan_for, run_plan

pytestmark = pytest.mark.timeout(90)


def test_a_closed_loop_whose_loop_runs_late_while_the_server_hangs_after_headers_still_counts_every_worker():
    # The server sends its headers and then nothing. The warm-up requests end with first_token_timeout past
    # the window's end, while the window is held open until each worker has sent a counted request; the
    # generator's loop is late just then (a listener holds it 80 ms on each warm-up failure, as a busy
    # machine would). Every worker must still send its counted request: the step is never "done" and empty.
    cfg = SimConfig(max_num_seqs=8, itl_ms=2.0, ttft_ms=5.0, jitter=0.0, seed=21)
    with start_sim_in_thread(cfg) as sim:
        def hang_after_headers(kind: str, payload: dict, wall_time: float) -> None:
            if kind == "load_step_start":  # after the pre-flight warm-up, which must succeed
                sim.server.set_faults(stall_after_tokens=0, stall_s=30.0)

        plan = plan_for(sim.url, levels=(2.0,), duration_s=0.1, warmup_s=0.2,
                        endpoint={"first_token_timeout_s": 0.5, "timeout_s": 1.0})
        seen: list[str] = []

        def late_loop(index: int, record) -> None:
            seen.append(record.phase)
            if record.phase == "warmup":
                time.sleep(0.08)  # on the generator's loop: it runs late

        run = run_plan(plan, on_mark=hang_after_headers, timeout_s=30, request_listener=late_loop)
    (step,) = run.state.steps
    assert "warmup" in seen
    assert step.requests >= 2, (step.status, step.requests, seen)
    assert dict(step.errors) == {"first_token_timeout": step.failed}
    assert step.status in ("done", "timed_out") and step.completed == 0


def test_an_open_loop_far_past_its_slots_counts_what_it_sent_and_says_the_rate_was_not_offered():
    # --rate 1e9 with 4 slots: the arrival timeline can never be kept; what leaves, leaves when a slot frees.
    cfg = SimConfig(max_num_seqs=8, itl_ms=2.0, ttft_ms=5.0, batch_factor=0.0, jitter=0.0, seed=22)
    with start_sim_in_thread(cfg) as sim:
        plan = plan_for(sim.url, mode="rate", levels=(1e9,), max_concurrency=4, output_tokens=8, duration_s=0.5,
                        warmup_s=0.1, slo=parse_slo("error_rate<=1%"))
        run = run_plan(plan, timeout_s=30)
    (step,) = run.state.steps
    assert step.completed >= 4 and step.failed == 0, (step.completed, step.errors, step.status)
    assert step.arrivals_delayed >= step.completed - 4
    assert step.saturated is not None
    assert [r.metric for r in step.slo if not r.met] == []
    assert json.loads(json.dumps(step.to_json()))["arrivals_delayed"] == step.arrivals_delayed


def test_lpxtops_own_descriptor_limit_is_its_own_error_and_the_step_is_client_limited(tmp_path):
    # lpxtop run with 64 file descriptors and 100 requests to keep in flight: the connections it cannot open
    # are its own limit (client_fd_limit), not the server refusing (refused), and the step says so.
    import resource
    import subprocess
    import sys

    from tests.support.paths import REPO

    def limit_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    out = tmp_path / "r.json"
    cfg = SimConfig(max_num_seqs=256, itl_ms=20.0, ttft_ms=5.0, batch_factor=0.0, jitter=0.0, seed=23)
    with start_sim_in_thread(cfg) as sim:
        proc = subprocess.run(
            [sys.executable, "-m", "lpxtop", "load", sim.url, "--concurrency", "100", "--duration", "0.5",
             "--warmup", "0.2", "--output-tokens", "8", "--no-ui", "--no-record", "--json", str(out),
             "--client-lag-limit", "1000", "--client-cpu-wait-limit", "1"],
            cwd=REPO, capture_output=True, text=True, timeout=60, preexec_fn=limit_descriptors)
    assert proc.returncode == 0, proc.stderr
    (step,) = json.loads(out.read_text())["steps"]
    assert "refused" not in step["errors"], step["errors"]
    assert step["errors"].get("client_fd_limit", 0) > 0 and step["completed"] > 0
    assert step["client"]["client_limited"] is True
    assert "file descriptors" in step["client"]["reason"] and "ulimit -n" in step["client"]["reason"]
    assert "client-limited (lpxtop short of CPU or file descriptors)" in proc.stderr


def strict_json(text: str):
    """json.loads that refuses Infinity, -Infinity and NaN, as jq, Go and browsers do."""
    def refuse(name: str):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def hostile_metrics_page() -> str:
    """A real vLLM /metrics capture with the gauges and counters a load step reads set to +Inf and NaN."""
    from pathlib import Path

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "metrics" / "vllm-0.32.0-cpu-local-capture-after-load.txt"
    out = []
    for line in fixture.read_text().splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name in ("vllm:num_requests_waiting", "vllm:time_to_first_token_seconds_sum",
                    "vllm:request_queue_time_seconds_sum", "vllm:num_preemptions_total"):
            line = line.rsplit(" ", 1)[0] + " +Inf"
        elif name in ("vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries_total",
                      "vllm:generation_tokens_total"):
            line = line.rsplit(" ", 1)[0] + " NaN"
        out.append(line)
    return "\n".join(out) + "\n"


def test_a_server_whose_metrics_hold_inf_and_nan_still_gets_valid_json_everywhere(tmp_path):
    import os
    import subprocess
    import sys
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tests.support.paths import REPO

    page = hostile_metrics_page().encode()

    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args) -> None:
            pass

    metrics = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=metrics.serve_forever, daemon=True).start()
    state = tmp_path / "state"
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    try:
        cfg = SimConfig(max_num_seqs=4, itl_ms=2.0, ttft_ms=5.0, jitter=0.0, seed=24)
        with start_sim_in_thread(cfg) as sim:
            proc = subprocess.run(
                [sys.executable, "-m", "lpxtop", "load", sim.url, "--concurrency", "2", "--duration", "1.5",
                 "--warmup", "0.2", "--output-tokens", "8", "--no-ui", "--json", str(tmp_path / "r.json"),
                 "--requests-jsonl", str(tmp_path / "req.jsonl"), "--csv", str(tmp_path / "s.csv"),
                 "--metrics-url", f"http://127.0.0.1:{metrics.server_address[1]}/metrics",
                 "--client-lag-limit", "1000", "--client-cpu-wait-limit", "1"],
                cwd=REPO, capture_output=True, text=True, timeout=60, env=env)
    finally:
        metrics.shutdown()
    assert proc.returncode == 0, proc.stderr
    report = strict_json((tmp_path / "r.json").read_text())
    (step,) = report["steps"]
    server = step["server"]
    assert server["kind"] == "vllm" and server["scrapes"] >= 2
    for key in ("peak_requests_waiting", "peak_requests_running", "peak_kv_cache_usage", "mean_ttft_ms",
                "mean_queue_ms", "preemptions", "generation_tokens"):
        assert server[key] is None, key  # not known: never Infinity or NaN
    for line in (tmp_path / "req.jsonl").read_text().splitlines():
        strict_json(line)
    assert "inf" not in (tmp_path / "s.csv").read_text().lower()
    exported = subprocess.run([sys.executable, "-m", "lpxtop", "export", report["recording"], "--what", "load"],
                              cwd=REPO, capture_output=True, text=True, timeout=60)
    assert exported.returncode == 0, exported.stderr
    rows = [strict_json(line) for line in exported.stdout.splitlines()]
    assert [r["type"] for r in rows].count("load_step") == 1


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e300", "-1"])
def test_a_warmup_that_is_no_length_is_a_usage_error_before_any_load(value):
    import subprocess
    import sys

    from tests.support.paths import REPO

    cfg = SimConfig(max_num_seqs=4, itl_ms=2.0, ttft_ms=5.0, jitter=0.0, seed=25)
    with start_sim_in_thread(cfg) as sim:
        proc = subprocess.run([sys.executable, "-m", "lpxtop", "load", sim.url, "--concurrency", "1",
                               f"--warmup={value}", "--duration", "0.5", "--no-ui", "--no-record"],
                              cwd=REPO, capture_output=True, text=True, timeout=30)
        received = len(sim.server.records)
    assert proc.returncode == 2 and "--warmup" in proc.stderr
    assert received == 0


@pytest.mark.parametrize("where", ["a directory", "/proc"])
def test_a_report_path_that_cannot_be_written_is_a_usage_error_before_any_load(tmp_path, where):
    import subprocess
    import sys

    from tests.support.paths import REPO

    path = str(tmp_path) if where == "a directory" else "/proc/lpxtop-report.json"
    cfg = SimConfig(max_num_seqs=4, itl_ms=2.0, ttft_ms=5.0, jitter=0.0, seed=26)
    with start_sim_in_thread(cfg) as sim:
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "lpxtop", "load", sim.url, "--concurrency", "1",
                               "--warmup", "0.2", "--duration", "5", "--no-ui", "--no-record", "--json", path],
                              cwd=REPO, capture_output=True, text=True, timeout=30)
        took = time.monotonic() - started
        received = len(sim.server.records)
    assert proc.returncode == 2 and f"cannot write {path}" in proc.stderr, proc.stderr
    assert received == 0 and took < 5.0  # before the test, not after it


def test_a_report_that_cannot_be_written_at_the_end_still_prints_the_table(tmp_path):
    # the directory passed the check before the test, and is gone by its end (a full disk reads the same)
    import shutil
    import subprocess
    import sys

    from tests.support.paths import REPO

    out_dir = tmp_path / "reports"
    out_dir.mkdir()
    cfg = SimConfig(max_num_seqs=4, itl_ms=2.0, ttft_ms=5.0, jitter=0.0, seed=27)
    with start_sim_in_thread(cfg) as sim:
        proc = subprocess.Popen([sys.executable, "-m", "lpxtop", "load", sim.url, "--concurrency", "1",
                                 "--warmup", "0.2", "--duration", "1", "--output-tokens", "8", "--no-ui",
                                 "--no-record", "--json", str(out_dir / "r.json"), "--client-lag-limit", "1000",
                                 "--client-cpu-wait-limit", "1"],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line or "measuring" in line:
                break
        shutil.rmtree(out_dir)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "cannot write the report" in err
    assert "1 concurrent" in out and "TTFT p50" in out  # the table, printed before the file was tried
