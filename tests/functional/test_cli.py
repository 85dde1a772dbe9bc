"""The `lpxtop` command as a user runs it: once --json, exit codes, help, config errors, secrets."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lpxtop import __version__
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.cli import lpxtop
from tests.support.ports import free_port


@pytest.fixture(scope="module")
def sims():
    with start_sim_in_thread(SimConfig(model="sim-a", ttft_ms=5, itl_ms=1)) as a, \
         start_sim_in_thread(SimConfig(model="sim-b", ttft_ms=5, itl_ms=1)) as b:
        yield a, b


def test_once_json_follows_schema_1(sims):
    a, b = sims
    result = lpxtop("once", a.url, f"127.0.0.1:{b.port}", "--samples", "2", "--json", "--max-tokens", "8")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema"] == 1 and doc["lpxtop"] == __version__ and isinstance(doc["host"], str)
    assert doc["time"].endswith("Z")
    assert [e["model"] for e in doc["endpoints"]] == ["sim-a", "sim-b"]
    for e in doc["endpoints"]:
        assert e["status"] == "up" and e["server_kind"] == "vllm"
        probes = e["probes"]
        assert probes == {"sent": 2, "ok": 2, "failed": 0, "errors": {}, "client_limited": probes["client_limited"],
                          "pool_wait_ms": probes["pool_wait_ms"], "redirected_to": None}
        assert set(probes["pool_wait_ms"]) == {"p50", "p95", "p99", "mean", "max"}  # lpxtop's own, not in TTFT
        for key in ("ttft", "itl", "tpot", "e2e"):
            assert set(e["latency_ms"][key]) == {"p50", "p95", "p99", "mean", "max"}
        assert e["output_tokens"]["p50"] == 8
        assert {"requests_running", "requests_waiting", "kv_cache_usage", "preemptions_total"} <= set(e["server"])
        assert e["last_error"] is None
    assert doc["gpu_status"].startswith("unavailable: ") and doc["gpus"] == []
    assert {"cpu_pct", "mem_used_bytes", "mem_total_bytes"} <= set(doc["host_metrics"])
    assert isinstance(doc["ports"], list) and isinstance(doc["alerts"], list)


def test_once_table_and_down_endpoint_exit_1(sims):
    a, _ = sims
    down = f"127.0.0.1:{free_port()}"
    result = lpxtop("once", a.url, down, "--samples", "1", "--no-metrics")
    assert result.returncode == 1
    assert "ENDPOINT" in result.stdout and "down" in result.stdout and "refused" in result.stdout


def test_once_never_imports_textual(sims):
    a, _ = sims
    code = (f"import sys; from lpxtop.cli.entry import main; rc = main(['once', {a.url!r}, '--samples', '1', '--json']); "
            "sys.exit(3 if any(m.startswith('textual') for m in sys.modules) else rc)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_api_key_is_used_but_never_printed():
    secret = "sk-live-" + "q9" * 12
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=2, itl_ms=1, api_key=secret)) as sim:
        good = lpxtop("once", sim.url, "--samples", "1", "--json", "--api-key-env", "LPXTOP_SECRET",
                      env={"LPXTOP_SECRET": secret, "LPXTOP_LOG": "DEBUG"})
        bad = lpxtop("once", sim.url, "--samples", "1", "--json", "--model", "m", env={"LPXTOP_LOG": "DEBUG"})
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["endpoints"][0]["status"] == "up"
    assert json.loads(bad.stdout)["endpoints"][0]["last_error"].startswith("http_401")
    for result in (good, bad):
        assert secret not in result.stdout + result.stderr


@pytest.mark.parametrize("args", [["once", "--samples", "0", "127.0.0.1:1"], ["--interval", "-1"], ["once", "ftp://x:1"],
                                  ["once", "--kv-saturation", "2", "127.0.0.1:1"]])
def test_usage_errors_exit_2(args):
    result = lpxtop(*args)
    assert result.returncode == 2
    assert result.stderr


def test_config_error_exit_2_names_line_and_key(tmp_path):
    path = tmp_path / "lpxtop.toml"
    path.write_text('[[endpoint]]\nurl = "127.0.0.1:8000"\nmax_tokns = 4\n')
    result = lpxtop("once", "--config", str(path))
    assert result.returncode == 2
    assert f"{path}:3" in result.stderr and "max_tokns" in result.stderr


def test_bad_alerts_table_exit_2(tmp_path):
    path = tmp_path / "lpxtop.toml"
    path.write_text('[[endpoint]]\nurl = "127.0.0.1:1"\n[alerts]\ngpu_mem_warnig_pct = 80\n')
    result = lpxtop("once", "--config", str(path))
    assert result.returncode == 2 and "gpu_mem_warnig_pct" in result.stderr


def test_alert_flag_reaches_the_rules(sims):
    a, _ = sims
    # This machine surely has less than 99.9 % of its memory available: the host-memory rule must fire.
    result = lpxtop("once", a.url, "--samples", "1", "--json", "--host-mem-min", "99.9")
    assert result.returncode == 0, result.stderr
    kinds = [alert["kind"] for alert in json.loads(result.stdout)["alerts"]]
    assert "host_memory" in kinds
    default = lpxtop("once", a.url, "--samples", "1", "--json")
    assert "host_memory" not in [alert["kind"] for alert in json.loads(default.stdout)["alerts"]]


def test_config_file_endpoints(tmp_path, sims):
    a, _ = sims
    path = tmp_path / "lpxtop.toml"
    path.write_text(f'[[endpoint]]\nname = "first"\nurl = "{a.url}"\nmax_tokens = 5\n')
    result = lpxtop("once", "--config", str(path), "--samples", "1", "--json")
    assert result.returncode == 0, result.stderr
    (e,) = json.loads(result.stdout)["endpoints"]
    assert e["name"] == "first" and e["output_tokens"]["p50"] == 5


@pytest.mark.parametrize("command", [[], ["once"], ["demo"], ["sim"], ["record"], ["replay"], ["export"]])
def test_help_explains_every_flag(command):
    result = lpxtop(*command, "--help")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    flags = [ln.split()[0] for ln in lines if ln.strip().startswith("--") and len(ln.split()) > 0]
    assert flags, result.stdout
    # every option line has help text (on the same line or the next one)
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("-") and "  " not in stripped:
            assert i + 1 < len(lines) and lines[i + 1].startswith(" " * 10), f"no help for {stripped}"


def test_version():
    from lpxtop.record.store import FORMAT_VERSION

    result = lpxtop("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"lpxtop {__version__} (recording format {FORMAT_VERSION})"


def test_sim_subcommand_serves(tmp_path):
    import httpx

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "lpxtop", "sim", "--port", str(port), "--model", "solo"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}/v1" in line
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).json()
        assert models["data"][0]["id"] == "solo"
    finally:
        proc.terminate()
        proc.wait(10)
