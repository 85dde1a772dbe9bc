"""Disk failures of a recording, as users meet them: a full disk at the moment the file is created (for
`lpxtop record`, `once --record` and `lpxtop load`, which records by default), the recording's directory
deleted while it runs, and two recorders started on one file at once. Each time monitoring goes on, the
recording stops with a clear line, no traceback, and nothing is said to be stored that is not."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from lpxtop.record.reading import Recording
from lpxtop.record.store import RecordingError, RecordingExists, StoreWriter
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.fulldisk import full_disk
from tests.support.paths import REPO, remove_tree_being_written
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(90)
SIM = SimConfig(model="m", ttft_ms=5, itl_ms=1, max_num_seqs=4, jitter=0.0, seed=2)
RELAXED = ["--client-lag-limit", "1000", "--client-cpu-wait-limit", "1"]  # a busy shared box: see tests/support/load_runs.py


def run(argv: list[str], disk, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lpxtop", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"}, **disk.popen_kwargs())




@pytest.mark.parametrize("command", ["record", "once --record", "load"])
def test_a_full_disk_when_the_recording_is_created_stops_only_the_recording(command, tmp_path):
    with full_disk(tmp_path) as disk, start_sim_in_thread(SIM) as sim:
        target = disk.path / "r.lpxrec"
        if command == "record":
            proc = run(["record", sim.url, "--out", str(target), "--duration", "2s", "--interval", "0.25"], disk)
        elif command == "once --record":
            proc = run(["once", sim.url, "--samples", "2", "--max-tokens", "4", "--json", "--record", str(target)], disk)
        else:
            proc = run(["load", sim.url, "--concurrency", "1", "--duration", "0.5", "--warmup", "0", "--output-tokens",
                        "4", "--no-ui", "--json", "-", "--record-file", str(target), *RELAXED], disk)
        left = sorted(p.name for p in disk.path.iterdir())
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "recording stopped" in proc.stderr and disk.says_full in proc.stderr, proc.stderr
    assert "r.lpxrec" not in left, "an empty file left behind makes the next try say 'already exists'"
    if command == "record":
        assert proc.returncode == 1 and proc.stdout == ""  # no path printed: there is no recording
    elif command == "once --record":
        assert proc.returncode == 0, proc.stderr  # the report, as without --record
        report = json.loads(proc.stdout)
        assert report["endpoints"][0]["probes"]["ok"] == 2
        (alert,) = [a for a in report["alerts"] if a["kind"] == "recording"]
        assert alert["message"].startswith("recording stopped:") and "Monitoring goes on" in alert["message"]
    else:
        assert proc.returncode == 0, proc.stderr  # the test ran and reported
        report = json.loads(proc.stdout)
        assert report["recording"] is None and report["steps"][0]["completed"] >= 1


def _committed(path: Path) -> bool:
    """Whether the recording another process writes holds a committed reading yet."""
    try:
        with Recording(path) as rec:
            return rec.time_range() is not None
    except Exception:  # noqa: BLE001 - the file may be between its creation and its tables
        return False


def test_a_recording_whose_directory_is_deleted_mid_run_is_not_reported_stored(tmp_path):
    directory = tmp_path / "recs"
    target = directory / "r.lpxrec"
    with start_sim_in_thread(SIM) as sim:
        proc = subprocess.Popen([sys.executable, "-m", "lpxtop", "record", sim.url, "--out", str(target),
                                 "--interval", "0.25", "--no-metrics"], cwd=REPO, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_for(lambda: _committed(target), timeout=20)  # a commit in the file
            remove_tree_being_written(directory)
            out, err = proc.communicate(timeout=20)  # it stops by itself within about a second
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 1, err
    assert "deleted or replaced while recording" in err and "events in" not in err and "stored" not in err, err
    assert out == "" and "Traceback" not in err


def test_two_recorders_on_one_file_at_the_same_moment_one_wins_the_other_is_told(tmp_path):
    """Many rounds of two threads released by one barrier onto the same new path: each round exactly one
    creates the file, the other gets RecordingExists; the winner's file is a readable recording."""
    for round_ in range(30):
        path = tmp_path / f"r{round_}.lpxrec"
        barrier = threading.Barrier(2)
        outcomes: list[object] = []

        def open_it(path=path, barrier=barrier, outcomes=outcomes) -> None:
            barrier.wait()
            try:
                writer = StoreWriter(path, {"round": 1})
            except RecordingError as exc:
                outcomes.append(exc)
                return
            outcomes.append(writer)

        threads = [threading.Thread(target=open_it) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        winners = [o for o in outcomes if isinstance(o, StoreWriter)]
        losers = [o for o in outcomes if isinstance(o, RecordingExists)]
        assert len(winners) == 1 and len(losers) == 1, outcomes
        assert "already exists" in str(losers[0])
        winners[0].close()
        with Recording(path) as recording:
            assert recording.store.meta["round"] == 1


def test_two_record_commands_on_one_out_path_one_records_the_other_is_a_usage_error(tmp_path):
    target = tmp_path / "same.lpxrec"
    with start_sim_in_thread(SIM) as sim:
        argv = [sys.executable, "-m", "lpxtop", "record", sim.url, "--out", str(target), "--duration", "2s",
                "--interval", "0.25", "--no-metrics"]
        procs = [subprocess.Popen(argv, cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(2)]
        results = []
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
            results.append((proc.returncode, out, err))
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    (loser,) = [r for r in results if r[0] == 2]
    assert "already exists" in loser[2] and "Traceback" not in loser[2]
    (winner,) = [r for r in results if r[0] == 0]
    assert Path(winner[1].strip()) == target
    with Recording(target) as recording:
        assert any(type(e.record).__name__ == "SampleEvent" for e in recording.events())


@pytest.mark.skipif(sys.platform != "linux", reason="SIGTERM semantics checked on Linux")
def test_record_stops_with_sigterm_after_the_directory_vanished_without_a_traceback(tmp_path):
    directory = tmp_path / "recs"
    target = directory / "r.lpxrec"
    with start_sim_in_thread(SIM) as sim:
        proc = subprocess.Popen([sys.executable, "-m", "lpxtop", "record", sim.url, "--out", str(target),
                                 "--interval", "0.25", "--no-metrics"], cwd=REPO, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_for(lambda: target.exists(), timeout=20)
            remove_tree_being_written(directory)  # perhaps before the first commit: close() must see it too
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 1 and out == "", (out, err)
    assert "deleted or replaced" in err and "Traceback" not in err
