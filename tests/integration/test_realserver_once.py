"""`lpxtop once --json` against real vLLM and llama.cpp servers, run as a user would (a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.realservers import import_lpxtop

pytestmark = [pytest.mark.realserver, pytest.mark.timeout(600)]

ONCE_TIMEOUT_S = 240
ONCE_RUNS = 3
PERCENTILE_KEYS = {"p50", "p95", "p99", "mean", "max"}
ENDPOINT_KEYS = {
    "name", "url", "model", "server_kind", "status", "probes", "latency_ms",
    "output_tokens_per_s", "output_tokens", "server", "last_error",
}
TOP_KEYS = {"schema", "lpxtop", "host", "time", "endpoints", "gpus", "gpu_status", "ports", "alerts"}


def run_once(tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    """Run `python -m lpxtop once --json ARGS` with no user config; (exit code, parsed stdout, stderr)."""
    import_lpxtop("lpxtop.cli.entry", "main")
    # LPXTOP_LOG=INFO: stderr then says what each failed scrape answered, for the messages below
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "NO_COLOR": "1", "LPXTOP_LOG": "INFO"}
    done = subprocess.run(
        [sys.executable, "-m", "lpxtop", "once", "--json", *args],
        capture_output=True,
        text=True,
        timeout=ONCE_TIMEOUT_S,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    try:
        report = json.loads(done.stdout)
    except ValueError:
        pytest.fail(f"not JSON (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done.returncode, report, done.stderr


def by_port(report: dict, port: int) -> dict:
    found = [e for e in report["endpoints"] if f":{port}" in e["url"]]
    assert len(found) == 1, f"one endpoint on port {port} expected: {[e['url'] for e in report['endpoints']]}"
    return found[0]


def test_once_json_reports_both_real_servers(vllm_server, llama_server, tmp_path: Path) -> None:
    # The random-weight model served by vLLM ends ~1.3% of answers before their first token (end-of-sequence
    # drawn first), which lpxtop rightly counts as an `empty` probe and shows as "degraded". A run whose
    # only errors are those is repeated, so the checks below stay exact.
    for _ in range(ONCE_RUNS):
        code, report, stderr = run_once(tmp_path, vllm_server.api_url, llama_server.api_url, "--samples", "3")
        errors = {kind for e in report.get("endpoints", []) for kind in e.get("probes", {}).get("errors", {})}
        if errors != {"empty"}:
            break
    assert code == 0, f"exit {code}: {stderr[-2000:]}\n{json.dumps(report)[:3000]}"
    assert report.keys() >= TOP_KEYS, TOP_KEYS - report.keys()
    assert report["schema"] == 1
    assert isinstance(report["host"], str) and report["host"]
    assert report["time"].endswith("Z")
    assert report["gpus"] == []  # no NVIDIA GPU on this machine
    assert report["gpu_status"].startswith("unavailable"), report["gpu_status"]
    assert len(report["endpoints"]) == 2
    for server, kind in ((vllm_server, "vllm"), (llama_server, "llamacpp")):
        e = by_port(report, server.port)
        assert e.keys() >= ENDPOINT_KEYS, ENDPOINT_KEYS - e.keys()
        assert e["server_kind"] == kind, e
        assert e["status"] == "up", e
        assert e["probes"]["sent"] >= 3 and e["probes"]["ok"] >= 3, e["probes"]
        assert e["probes"]["failed"] == 0 and e["probes"]["errors"] == {}, e["probes"]
        assert e["last_error"] is None
        latency = e["latency_ms"]
        assert set(latency) == {"ttft", "itl", "tpot", "e2e"}
        assert set(latency["ttft"]) == PERCENTILE_KEYS
        assert latency["ttft"]["p50"] > 0
        assert latency["e2e"]["p50"] >= latency["ttft"]["p50"]
        assert e["output_tokens"]["max"] >= 1
        assert e["server"] is not None, e
        assert e["server"]["status"] == "ok", f"{json.dumps(e['server'])}\n{stderr[-3000:]}"
        assert e["server"]["requests_running"] is not None, json.dumps(e["server"])
        assert e["server"]["requests_waiting"] is not None, json.dumps(e["server"])
    assert by_port(report, vllm_server.port)["server"]["kv_cache_usage"] is not None
    # llama.cpp removed its KV-cache gauge: shown as "--", never 0.
    assert by_port(report, llama_server.port)["server"]["kv_cache_usage"] is None


def test_once_json_down_url_exits_1(llama_server, tmp_path: Path) -> None:
    down = free_port()  # nothing listens there
    code, report, stderr = run_once(
        tmp_path, f"http://127.0.0.1:{down}/v1", llama_server.api_url, "--samples", "1"
    )
    assert code == 1, f"exit {code}: {stderr[-2000:]}"
    assert by_port(report, down)["status"] == "down"
    assert by_port(report, down)["probes"]["ok"] == 0
    assert (by_port(report, down)["last_error"] or "").startswith("refused"), by_port(report, down)
    assert by_port(report, llama_server.port)["status"] == "up"
