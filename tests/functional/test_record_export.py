"""`lpxtop export` on the committed format-1 recording: JSONL, CSV, time ranges, and OpenMetrics that
Prometheus' own `promtool tsdb create-blocks-from openmetrics` accepts."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess

import pytest

from lpxtop.cli.entry import main
from lpxtop.record.export import export
from lpxtop.record.reading import Recording
from tests.support.paths import FIXTURES

V1 = FIXTURES / "recordings" / "v1-sim.lpxrec"


def run_export(**kw) -> str:
    out = io.StringIO()
    with Recording(V1) as recording:
        export(recording, out, **kw)
    return out.getvalue()


def test_jsonl_holds_every_kind_in_time_order():
    rows = [json.loads(line) for line in run_export().splitlines()]
    kinds = {row["type"] for row in rows}
    assert {"probe", "server", "gpu", "host", "alert", "load_step", "mark", "control"} <= kinds
    for name in ("vllm-sim-a", "vllm-sim-b"):
        sent = [row["time"] for row in rows if row["type"] == "probe" and row["endpoint"] == name]
        assert sent == sorted(sent) and len(sent) >= 8
    recorded = [row["recorded_at"] for row in rows if row["type"] == "probe"]
    assert recorded == sorted(recorded)
    probe = next(row for row in rows if row["type"] == "probe" and row["ok"])
    assert list(probe)[:9] == ["type", "endpoint", "time", "ok", "error", "ttft_ms", "e2e_ms", "itl_ms",
                               "output_tokens"]
    assert probe["itl_ms"] == [b - a for a, b in zip(probe["token_event_ms"], probe["token_event_ms"][1:])]
    failed = [row for row in rows if row["type"] == "probe" and not row["ok"]]
    assert failed and all(row["error"] and row["ttft_ms"] is None for row in failed)  # the flaky server
    step = next(row for row in rows if row["type"] == "load_step")
    assert step["concurrency"] == 4
    assert any(row["type"] == "mark" and row["kind"] == "bookmark" and row["note"] == "the surge, 3 s in"
               for row in rows)


def test_csv_one_kind_and_a_time_range(tmp_path):
    with Recording(V1) as recording:
        first, last = recording.time_range()
    out = tmp_path / "server.csv"
    assert main(["export", str(V1), "-f", "csv", "--what", "server", "--from", "+2s", "--to=-2s",
                 "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert rows and all(first + 2 <= float(r["time"]) <= last - 2 for r in rows)
    assert {"endpoint", "requests_running", "kv_cache_usage", "server_ttft_ms"} <= set(rows[0])
    probes = list(csv.DictReader(io.StringIO(run_export(fmt="csv"))))
    assert len(probes[0]["itl_ms"].split()) == 15  # 16 tokens: 15 gaps, space-separated


def test_openmetrics_is_accepted_by_promtool(tmp_path):
    text = run_export(fmt="openmetrics")
    assert text.endswith("# EOF\n")
    assert "# TYPE lpxtop_probe_ttft_seconds gauge" in text and 'endpoint="vllm-sim-a"' in text
    families = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(families) == len(set(families))  # each family once, its samples together
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("LPXTOP_REQUIRE_PROMETHEUS") == "1":
            pytest.fail("promtool is required (LPXTOP_REQUIRE_PROMETHEUS=1) but not on PATH")
        pytest.skip("promtool not installed (Debian: apt install prometheus); the format checks above ran")
    source = tmp_path / "export.om"
    source.write_text(text)
    result = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(tmp_path / "tsdb")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr + result.stdout
    listing = subprocess.run([promtool, "tsdb", "list", str(tmp_path / "tsdb")], capture_output=True, text=True,
                             timeout=60)
    assert listing.returncode == 0 and len(listing.stdout.splitlines()) >= 2, listing.stdout
