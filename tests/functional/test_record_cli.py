"""Recording as users run it: `once --record`, `lpxtop record` killed with SIGKILL, `replay --compare`,
`export`, secrets kept out of the file, and a recording that cannot be written."""

from __future__ import annotations

import http.server
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest

from lpxtop.cli.entry import main
from lpxtop.model.probe import Percentiles
from lpxtop.record.compare import compare_files, render_comparison
from lpxtop.record.export import export
from lpxtop.record.reading import Recording
from lpxtop.sim.config import SimConfig
from lpxtop.sim.records import token_times_ns
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.paths import REPO
from tests.support.sim import p
from tests.support.waiting import wait_for

TOLERANCE_MS = 3.0  # as the probe fidelity tests: judged by the median, a busy 2-core box moves single probes


def jsonl(path: Path, **kw) -> list[dict]:
    import io

    out = io.StringIO()
    with Recording(path) as recording:
        export(recording, out, **kw)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def run_once_recorded(capsys, url: str, path: Path, samples: int) -> dict:
    code = main(["once", url, "--samples", str(samples), "--json", "--max-tokens", "12", "--record", str(path)])
    assert code == 0
    return json.loads(capsys.readouterr().out)


def check_against_sim(probes: list[dict], server) -> None:
    """Each exported probe's TTFT and ITL against what the simulator recorded sending it."""
    ttft_err, itl_err = [], []
    for probe in probes:
        record = server.record_for(probe["response_id"])
        assert record is not None, probe["response_id"]
        truth = token_times_ns(record.events)
        ttft_err.append(probe["ttft_ms"] - (truth[0] - probe["start_ns"]) / 1e6)
        true_gaps = [(b - a) / 1e6 for a, b in zip(truth, truth[1:])]
        assert len(true_gaps) == len(probe["itl_ms"])
        itl_err += [m - t for m, t in zip(probe["itl_ms"], true_gaps)]
    assert abs(p(ttft_err, 0.5)) < TOLERANCE_MS and abs(p(itl_err, 0.5)) < TOLERANCE_MS, (ttft_err, itl_err)
    assert min(ttft_err) > -0.5, "a token cannot arrive before the server sent it"


def test_once_record_exports_what_once_reported_and_compare_says_which_run_was_slower(capsys, tmp_path):
    fast, slow = tmp_path / "fast.lpxrec", tmp_path / "slow.lpxrec"
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=10, itl_ms=3, seed=1)) as sim:
        report = run_once_recorded(capsys, sim.url, fast, 6)
        probes = [row for row in jsonl(fast) if row["type"] == "probe"]
        check_against_sim(probes, sim.server)
    (endpoint,) = report["endpoints"]
    assert len(probes) == endpoint["probes"]["sent"] == 6
    for key in ("type", "endpoint", "time", "ok", "error", "ttft_ms", "e2e_ms", "itl_ms", "output_tokens"):
        assert key in probes[0]
    assert all(row["ok"] and row["error"] is None and row["output_tokens"] == 12 for row in probes)
    # the percentiles of the exported probes are the ones `once --json` printed: those during which lpxtop
    # itself was not late (a loaded box flags some), or all of them when every one was
    counted = [row for row in probes if not row["client_limited"]] or probes
    ttft = Percentiles.of([row["ttft_ms"] for row in counted])
    itl = Percentiles.of([gap for row in counted for gap in row["itl_ms"]])
    assert ttft.to_json() == endpoint["latency_ms"]["ttft"] and itl.to_json() == endpoint["latency_ms"]["itl"]

    with start_sim_in_thread(SimConfig(model="m", ttft_ms=50, itl_ms=9, seed=2)) as sim:
        run_once_recorded(capsys, sim.url, slow, 4)
    comparison = compare_files(fast, slow)
    (pair,) = comparison.endpoints  # the two sims had different ports: paired as the only endpoints
    for measure in ("TTFT p50", "ITL p50", "E2E p95"):
        change = pair.change(measure)
        assert change.delta > 0 and change.verdict == "worse", change
    assert pair.change("tok/s p50").verdict == "worse" and pair.change("tok/s p50").delta < 0
    assert "TTFT p50 ms" in render_comparison(comparison)
    assert main(["replay", str(fast), "--compare", str(slow), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["endpoints"][0]["a_probes"] == 6 and printed["endpoints"][0]["b_probes"] == 4


@pytest.mark.slow
def test_record_20_s_matches_the_simulators_record(tmp_path):
    path = tmp_path / "r.lpxrec"
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=20, itl_ms=6, seed=3)) as sim:
        result = subprocess.run([sys.executable, "-m", "lpxtop", "record", sim.url, "--out", str(path),
                                 "--duration", "20s", "--interval", "0.5"],
                                capture_output=True, text=True, timeout=90, cwd=REPO)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == str(path)
        probes = [row for row in jsonl(path, what=["probes"])]
        assert len(probes) >= 30
        check_against_sim(probes, sim.server)


def test_kill_9_loses_at_most_the_last_two_seconds(tmp_path):
    path = tmp_path / "killed.lpxrec"
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=2, seed=4)) as sim:
        proc = subprocess.Popen([sys.executable, "-m", "lpxtop", "record", sim.url, "--out", str(path),
                                 "--interval", "0.25", "--max-tokens", "6", "-q"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
        try:
            deadline = time.monotonic() + 30
            span, stored = None, 0
            # probes leave at random gaps, so 2 s of file may hold fewer than 6: wait for both
            while time.monotonic() < deadline:
                time.sleep(0.25)
                if path.exists():
                    try:
                        with Recording(path) as rec:
                            span = rec.time_range()
                        stored = len(jsonl(path, what=["probes"]))
                    except Exception:  # noqa: BLE001 - the file may be between its creation and its tables
                        span = None
                    if span is not None and span[1] - span[0] >= 2.0 and stored >= 6:
                        break
            assert span is not None, proc.stderr.read() if proc.poll() is not None else "no data in time"
            time.sleep(0.2)
            killed_at, killed_perf = time.time(), time.perf_counter_ns()
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert Path(f"{path}-wal").exists()  # killed: SQLite had no chance to fold the log in
        with Recording(path) as rec:
            first, last = rec.time_range()
            events = list(rec.events())
            assert rec.damage_summary() is None
        assert killed_at - last <= 2.0 + 0.5, killed_at - last  # commits once a second; slack for a busy box
        probes = jsonl(path, what=["probes"])
        ids = {row["response_id"] for row in probes}
        # every request the server finished more than the bound before the kill is in the file
        done_before = [r for r in sim.server.records if r.outcome == "ok"
                       and r.t_done_ns is not None and r.t_done_ns < killed_perf - 2.5e9]
        assert done_before and all(r.response_id in ids for r in done_before)
    assert len(events) > len(probes) >= 6
    assert main(["export", str(path), "--format", "csv", "--out", str(tmp_path / "p.csv")]) == 0


class _EchoingServer(http.server.BaseHTTPRequestHandler):
    """Answers every request 500 with the credentials it was sent, bare, in the error message."""

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        key = (self.headers.get("authorization") or "").removeprefix("Bearer ")
        body = json.dumps({"error": {"message": f"invalid key {key}; team {self.headers.get('x-team')}"}}).encode()
        self.send_response(500)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


def test_secrets_never_reach_the_file(capsys, monkeypatch, tmp_path):
    key, team = "sk-record-test-key-31337", "team-secret-value-4242"
    monkeypatch.setenv("LPXTOP_RECORD_TEST_KEY", key)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _EchoingServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = tmp_path / "lpxtop.toml"
    config.write_text(f'[[endpoint]]\nname = "hostile"\nurl = "http://127.0.0.1:{server.server_port}/v1"\n'
                      f'model = "m"\napi_key_env = "LPXTOP_RECORD_TEST_KEY"\nheaders = {{ "X-Team" = "{team}" }}\n')
    path = tmp_path / "s.lpxrec"
    try:
        code = main(["once", "--config", str(config), "--samples", "2", "--json", "--record", str(path)])
    finally:
        server.shutdown()
    assert code == 1  # the endpoint is down (500s)
    capsys.readouterr()
    texts = [Path(f"{path}{suffix}").read_bytes() for suffix in ("", "-wal") if Path(f"{path}{suffix}").exists()]
    db = sqlite3.connect(path)
    for table in ("chunks", "keyframes"):
        for codec, data in db.execute(f"SELECT codec, data FROM {table}"):
            texts.append(zlib.decompress(data) if codec == "z" else data)
    texts += [str(list(db.execute(f"SELECT * FROM {t}"))).encode() for t in ("marks", "meta", "layouts")]
    db.close()
    rows = jsonl(path)
    texts.append(json.dumps(rows).encode())
    assert any(row["type"] == "probe" and row["error"] == "http_5xx" for row in rows)
    assert any(b"X-Team" in t for t in texts)  # the header's name is kept, its value is not
    for text in texts:
        assert key.encode() not in text and team.encode() not in text




@pytest.mark.parametrize("trouble", ["unwritable path", "disk full"])
def test_a_recording_that_cannot_be_written_stops_with_an_alert_and_monitoring_goes_on(trouble, tmp_path,
                                                                                        monkeypatch):
    from lpxtop.cli.assemble import build_engine
    from lpxtop.config import normalize_url
    from lpxtop.model.endpoint import EndpointConfig
    from lpxtop.record import recorder as recorder_module
    from lpxtop.record.recorder import Recorder

    monkeypatch.setattr(recorder_module, "COMMIT_EVERY_S", 0.2)  # the same path, sooner
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=1)) as sim:
        endpoints = [EndpointConfig(name="sim", url=normalize_url(sim.url), interval_s=0.25, max_tokens=4)]
        engine = build_engine(endpoints, scrape_metrics=False)
        if trouble == "unwritable path":
            blocker = tmp_path / "a-file"
            blocker.write_text("not a directory")
            recorder = Recorder.start_for(engine, blocker / "r.lpxrec", endpoints=endpoints)
            assert recorder.failure is not None and "cannot create" in recorder.failure
        else:
            recorder = Recorder.start_for(engine, tmp_path / "r.lpxrec", endpoints=endpoints)
        with engine:
            if trouble == "disk full":
                wait_for(lambda: recorder.commits >= 1)
                db = recorder._writer._db
                pages = db.execute("PRAGMA page_count").fetchone()[0]
                db.execute(f"PRAGMA max_page_count = {pages}")  # SQLite now answers SQLITE_FULL
                recorder.bookmark("x" * 20_000)  # needs new pages at the next commit
                wait_for(lambda: recorder.failure is not None)
                assert "disk is full" in recorder.failure
            alert = wait_for(lambda: next((a for a in engine.snapshot().alerts if a.kind == "recording"), None))
            sent = engine.snapshot().endpoints[0].probes_sent
            wait_for(lambda: engine.snapshot().endpoints[0].probes_ok >= sent + 2)  # probing goes on
        recorder.close()
    assert alert.message.startswith("recording stopped:") and "Monitoring goes on" in alert.message
    assert recorder.status_line().startswith("REC stopped")


def test_record_refuses_an_existing_file_and_export_explains_bad_choices(capsys, tmp_path):
    existing = tmp_path / "x.lpxrec"
    existing.write_text("mine")
    assert main(["record", "127.0.0.1:9", "--out", str(existing), "--duration", "1s"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert existing.read_text() == "mine"
    assert main(["replay", str(existing)]) == 2
    assert "not an lpxtop recording" in capsys.readouterr().err
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "recordings" / "v1-sim.lpxrec"
    assert main(["export", str(fixture), "--what", "probes,latency"]) == 2
    assert "unknown 'latency'" in capsys.readouterr().err
    assert main(["export", str(fixture), "--format", "csv", "--what", "probes,gpu"]) == 2
    assert "one --what" in capsys.readouterr().err
    assert main(["export", str(fixture), "--from", "25:99"]) == 2
    assert "is not a time of day" in capsys.readouterr().err
    assert main(["export", str(fixture), "--to", "soon"]) == 2
    assert "expected a time of day" in capsys.readouterr().err


def test_record_subcommand_stops_on_sigterm_and_prints_the_file(tmp_path):
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=1)) as sim:
        proc = subprocess.Popen([sys.executable, "-m", "lpxtop", "record", sim.url, "--interval", "0.25"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
        try:
            wait_for(lambda: list((tmp_path / "state" / "lpxtop").glob("*.lpxrec")), timeout=20)
            time.sleep(0.8)
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err
    path = Path(out.strip())
    assert path.parent == tmp_path / "state" / "lpxtop" and path.name.endswith(".lpxrec")
    assert "recording 1 endpoint(s)" in err and "kept 48 h" in err
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0  # closed cleanly
    with Recording(path) as rec:
        assert any(type(e.record).__name__ == "SampleEvent" for e in rec.events())
