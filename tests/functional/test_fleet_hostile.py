"""The fleet view against a hostile Prometheus (a fake one on loopback, tests/support/fakeprom.py):
label values and error messages carrying terminal control sequences (OSC 0 sets the window title, OSC 52
writes the clipboard), a proxy that echoes the bearer token, and numbers at the edges of a float. Nothing
of it reaches the terminal, stderr or JSON unscrubbed, the token is never shown, `--json` is valid JSON,
and the dashboard's poller never stops."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lpxtop.fleet.promql import FleetQueries
from lpxtop.fleet.source import FleetSettings, FleetSource
from tests.support.fakeprom import FakePrometheus, error, vector
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parents[2]
TOKEN = "prom-T0ken-4f9a2c77e1"
TITLE = "\x1b]0;PWNED-TITLE\x07"  # OSC 0: the terminal's window title
CLIPBOARD = "\x1b]52;c;UFdORUQtQ0xJUA==\x1b\\"  # OSC 52: write "PWNED-CLIP" to the clipboard
ESC_RED = "\x1b[31m"
ROW = {"host": f"web{TITLE}1", "endpoint": f"chat{CLIPBOARD}"}
HOSTILE_ROWS = vector(({**ROW, "model": f"m{TITLE}", "server_kind": "vllm", "instance": "10.0.0.1:9464"}, "1"))
QUERIES = len(FleetQueries().instant())  # one refresh asks each once
ECHO = f"{ESC_RED}upstream said{CLIPBOARD} Authorization: Bearer {TOKEN}; token={TOKEN} {TITLE}"


def fleet(url: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lpxtop", "fleet", "--prometheus", url, "--prometheus-token-env",
                           "PROM_TOKEN", "--timeout", "2", *extra], capture_output=True, text=True, timeout=40,
                          cwd=ROOT, env={**os.environ, "PROM_TOKEN": TOKEN})


def strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*strings(k), *strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def strict_json(text: str):
    """json.loads that refuses what RFC 8259 does not allow (NaN, Infinity)."""
    def refuse(name: str):
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


def assert_clean(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\x9d" not in text, repr(text[:400])
    assert "PWNED" not in text and "UFdORUQ" not in text, repr(text[:400])
    assert TOKEN not in text


def test_json_and_stderr_carry_no_escape_and_no_token_when_labels_and_errors_do():
    answers = {"rows": HOSTILE_ROWS, "up_now": vector((ROW, "1")), "probes": error(ECHO),
               "alerts": vector(({"host": f"web{TITLE}", "kind": f"oom{CLIPBOARD}", "severity": "critical"}, "1"))}
    with FakePrometheus(answers) as prom:
        result = fleet(prom.url, "--json")
    assert all(h.get("Authorization") == f"Bearer {TOKEN}" for h in prom.headers)  # the token was sent
    assert result.returncode in (0, 1), result.stderr
    doc = strict_json(result.stdout)
    for text in (result.stdout, result.stderr, *strings(doc)):
        assert_clean(text)
    (view,) = doc["endpoints"]
    assert view["host"] == "web1" and view["name"] == "chat"  # the escapes went, the text stayed
    assert "Bearer ***" in doc["prometheus"]["status"] and "upstream said" in doc["prometheus"]["status"]


def test_when_prometheus_refuses_the_message_on_stderr_is_scrubbed_and_the_token_masked():
    with FakePrometheus({"rows": error(ECHO, kind=f"bad{TITLE}")}) as prom:
        result = fleet(prom.url, "--json")
    assert result.returncode == 3
    assert "Prometheus refused a query" in result.stderr and "Bearer ***" in result.stderr
    for text in (result.stdout, result.stderr, *strings(strict_json(result.stdout))):
        assert_clean(text)


def test_a_prometheus_url_with_credentials_is_a_usage_error_that_does_not_echo_them():
    result = subprocess.run([sys.executable, "-m", "lpxtop", "fleet", "--prometheus",
                             f"http://admin:{TOKEN}@127.0.0.1:9/", "--json"], capture_output=True, text=True,
                            timeout=30, cwd=ROOT)
    assert result.returncode == 2 and "--prometheus-token-env" in result.stderr
    assert TOKEN not in result.stderr + result.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX pseudo-terminals")
def test_the_dashboard_on_a_terminal_receives_no_escape_from_prometheus_labels():
    from tests.support.pty_terminal import Terminal

    answers = {"rows": HOSTILE_ROWS, "up_now": vector((ROW, "1")), "probes": error(ECHO),
               "gpu_used": vector(({"host": f"web{TITLE}1", "gpu": "gpu0", "uuid": "GPU-1",
                                    "name": f"H100{CLIPBOARD}"}, "1e9"))}
    with FakePrometheus(answers) as prom:
        os.environ["PROM_TOKEN"] = TOKEN
        try:
            term = Terminal("fleet", "--prometheus", prom.url, "--prometheus-token-env", "PROM_TOKEN",
                            "--refresh", "0.5", "--timeout", "2")
        finally:
            del os.environ["PROM_TOKEN"]
        try:
            term.wait_for("web1", timeout_s=30)  # the row, its host's escapes gone
            term.wait_for("queries failed", timeout_s=30)  # the alerts bar with the query that failed
            drawn = len(term.output)
            wait_for(lambda: len(prom.headers) >= 3 * QUERIES and len(term.output) > drawn, timeout=30)  # refreshed
            term.type(b"q", pause_s=0)
            term.proc.wait(15)
            raw = term.output_after_exit()
        finally:
            term.close()
    assert len(prom.headers) >= 2
    assert b"PWNED" not in raw and b"UFdORUQ" not in raw and b"\x1b]52;" not in raw
    assert TOKEN.encode() not in raw


def test_numbers_at_the_edges_of_a_float_give_valid_json_not_a_traceback():
    """1e308 MiB of GPU memory is inf bytes (int(inf) raised OverflowError); a TPOT of 1e-320 s is an
    infinite decode rate (written as `Infinity`, which is not JSON)."""
    row = {"host": "h", "endpoint": "e"}
    answers = {
        "rows": vector(({**row, "model": "m", "server_kind": "vllm", "instance": "10.0.0.1:9464"}, "1")),
        "up_now": vector((row, "1")), "probes": vector((row, "1e308")),
        "tpot_p50": vector((row, "1e-320")), "tpot_p05": vector((row, "1e-320")),
        "tpot_p01": vector((row, "5e-324")), "tpot_min": vector((row, "5e-324")),
        "tpot_mean": vector((row, "1e-320")),
        **{f"ttft_{q}": vector((row, "1e308")) for q in ("p50", "p95", "p99", "max")},
        "dcgm_used_mib": vector(({"Hostname": "gpuhost", "gpu": "0", "UUID": "GPU-X", "modelName": "H100"}, "1e308")),
        "dcgm_free_mib": vector(({"Hostname": "gpuhost", "gpu": "0", "UUID": "GPU-X", "modelName": "H100"}, "1e308")),
        "gpu_processes": vector(({**row, "gpu": "gpu0", "pid": "9" * 5000, "process": "x"}, "1e308")),
        "gpu_used": vector(({"host": "h", "gpu": "gpu" + "9" * 5000, "uuid": "GPU-Y", "name": "A"}, "1e308")),
    }
    with FakePrometheus(answers) as prom:
        result = fleet(prom.url, "--json")
    assert "Traceback" not in result.stderr and result.returncode in (0, 1), result.stderr
    doc = strict_json(result.stdout)
    (view,) = doc["endpoints"]
    assert view["host"] == "h"
    dcgm = [g for g in doc["gpus"] if g["uuid"] == "GPU-X"]
    assert dcgm and dcgm[0]["mem_used_bytes"] is None and dcgm[0]["mem_total_bytes"] is None


def test_the_pollers_view_goes_on_with_numbers_at_the_edges_of_a_float():
    answers = {"dcgm_used_mib": vector(({"Hostname": "g", "gpu": "0", "UUID": "GPU-X", "modelName": "H"}, "1e308")),
               "rows": vector(({"host": "h", "endpoint": "e", "instance": "10.0.0.1:9464"}, "1")),
               "up_now": vector(({"host": "h", "endpoint": "e"}, "1"))}
    with FakePrometheus(answers) as prom:
        source = FleetSource(FleetSettings(prometheus_url=prom.url, refresh_s=0.2, timeout_s=2.0))
        source.start()
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and source.snapshot().seq < 3:
                time.sleep(0.05)
            snap = source.snapshot()
        finally:
            source.stop()
    assert snap.seq >= 3, "the poller stopped"
    assert [v.host for v in snap.endpoints] == ["h"] and not [a for a in snap.alerts if a.severity == "critical"]


def test_an_answer_the_view_cannot_use_is_a_status_line_and_polling_goes_on(monkeypatch):
    """Whatever goes wrong turning an answer into the table (here: a fault injected once into the build)
    becomes a line in the alerts bar with the last good rows kept; the next refresh recovers."""
    from lpxtop.fleet import source as source_module

    real = source_module.endpoint_views
    calls = {"n": 0}

    def flaky(reading, window):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OverflowError("cannot convert float infinity to integer")
        return real(reading, window)

    monkeypatch.setattr(source_module, "endpoint_views", flaky)
    answers = {"rows": vector(({"host": "h", "endpoint": "e", "instance": "10.0.0.1:9464"}, "1")),
               "up_now": vector(({"host": "h", "endpoint": "e"}, "1"))}
    seen = []
    with FakePrometheus(answers) as prom:
        source = FleetSource(FleetSettings(prometheus_url=prom.url, refresh_s=0.2, timeout_s=2.0))
        source.start()
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and source.snapshot().seq < 4:
                seen.append(source.snapshot())
                time.sleep(0.02)
            last = source.snapshot()
        finally:
            source.stop()
    assert last.seq >= 4, "the poller stopped"
    failed = [s for s in seen if any("could not use Prometheus' answer (OverflowError" in a.message
                                     for a in s.alerts)]
    assert failed and all([v.host for v in s.endpoints] == ["h"] for s in failed)  # the last good rows stay
    assert not [a for a in last.alerts if a.severity == "critical"] and [v.host for v in last.endpoints] == ["h"]
