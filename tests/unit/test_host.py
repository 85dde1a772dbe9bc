"""HostCollector on this real machine, and Linux PSI parsing from hand-written lines."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from lpxtop.engine.system.host import HostCollector, parse_pressure, read_memory_pressure


@pytest.fixture
def child():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        yield p
    finally:
        p.terminate()
        p.wait(timeout=5)


def test_parse_pressure_lines():
    text = (
        "some avg10=12.34 avg60=5.00 avg300=1.25 total=123456\n"
        "full avg10=3.50 avg60=1.00 avg300=0.10 total=2345\n"
    )
    assert parse_pressure(text) == 12.34
    assert parse_pressure(text, "full") == 3.5
    assert parse_pressure(text, "some", "avg300") == 1.25
    assert parse_pressure("") is None
    assert parse_pressure("some avg10=oops avg60=1\n") is None
    assert parse_pressure("full avg10=1.00\n") is None  # no "some" line


def test_read_memory_pressure_file(tmp_path: Path):
    f = tmp_path / "memory"
    f.write_text(
        "some avg10=0.75 avg60=0.20 avg300=0.05 total=99\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    assert read_memory_pressure(f) == 0.75
    assert read_memory_pressure(tmp_path / "absent") is None


def test_host_values_are_plausible(tmp_path: Path):
    psi = tmp_path / "memory"
    psi.write_text("some avg10=22.50 avg60=10.00 avg300=2.00 total=1\n")
    hc = HostCollector(pressure_path=psi)
    time.sleep(0.05)
    snap = hc.collect()
    assert snap.mem_total_bytes and snap.mem_total_bytes > 0
    assert 0 < snap.mem_used_bytes <= snap.mem_total_bytes
    assert 0 < snap.mem_available_bytes <= snap.mem_total_bytes
    assert 0.0 < snap.mem_available_pct <= 100.0
    assert snap.swap_total_bytes is not None and snap.swap_used_bytes is not None
    assert snap.cpu_pct is None or 0.0 <= snap.cpu_pct <= 100.0
    assert snap.load_avg is not None and len(snap.load_avg) == 3 and min(snap.load_avg) >= 0
    assert snap.cpu_count == os.cpu_count()
    assert snap.mem_pressure_avg10 == 22.5
    assert snap.processes == ()
    j = snap.to_json()
    for key in (
        "cpu_pct",
        "mem_used_bytes",
        "mem_total_bytes",
        "mem_available_bytes",
        "swap_used_bytes",
        "swap_total_bytes",
        "load_avg",
        "mem_pressure_avg10",
        "processes",
    ):
        assert key in j


def test_real_pressure_file_when_present():
    value = read_memory_pressure()
    if Path("/proc/pressure/memory").exists():
        assert value is None or value >= 0.0  # None when the kernel booted with psi=0
    else:
        assert value is None


def test_endpoint_server_processes_with_children(child):
    me = os.getpid()
    hc = HostCollector()
    first = hc.collect({me: "local", child.pid: "other"})
    # ordered by endpoint name
    assert [(p.endpoint, p.pid) for p in first.processes] == [("local", me), ("other", child.pid)]
    mine = first.processes[0]
    assert mine.status == "ok" and mine.cpu_pct is None  # first reading only primes the CPU baseline
    assert mine.children >= 1  # the sleeping child
    assert mine.name and "python" in mine.name.lower()
    assert mine.rss_bytes > first.processes[1].rss_bytes > 0  # ours includes the child's
    time.sleep(0.05)
    second = hc.collect({me: "local"})
    (mine,) = second.processes
    assert mine.cpu_pct is not None and mine.cpu_pct >= 0.0
    assert mine.to_json()["endpoint"] == "local"


def test_children_from_a_process_scan_count_the_same_as_psutils_own(child):
    from lpxtop.engine.system.processes import ProcessScanner, children_map

    me = os.getpid()
    kids = children_map(ProcessScanner().scan())
    assert child.pid in kids[me]
    (by_scan,) = HostCollector().collect({me: "local"}, kids).processes
    (by_psutil,) = HostCollector().collect({me: "local"}).processes
    assert by_scan.children == by_psutil.children >= 1
    assert by_scan.rss_bytes > psutil.Process(child.pid).memory_info().rss


def test_gone_server_process():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(timeout=10)
    (row,) = HostCollector().collect({p.pid: "dead"}).processes
    assert (row.status, row.rss_bytes, row.cpu_pct) == ("gone", None, None)
