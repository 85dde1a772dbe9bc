"""The process table read straight from /proc equals psutil's reading of it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from lpxtop.engine.system.processes import ProcessScanner

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")


@pytest.fixture
def child():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "--api-key", "sk-secret"])
    try:
        yield p
    finally:
        p.terminate()
        p.wait(timeout=5)


def test_direct_scan_equals_psutils(child):
    direct, by_psutil = ProcessScanner(), ProcessScanner()
    by_psutil._direct = False
    assert direct._direct
    for _ in range(3):  # a process may come or go between the two scans: try again
        a, b = direct.scan(), by_psutil.scan()
        both = set(a) & set(b)
        if all(a[p] == b[p] for p in both if p in (os.getpid(), child.pid, 1)):
            break
    assert {os.getpid(), child.pid, 1} <= both
    for pid in (os.getpid(), child.pid, 1):
        assert a[pid] == b[pid], pid
    mine = a[child.pid]
    assert mine.ppid == os.getpid() and mine.status in ("running", "sleeping")
    assert mine.argv[-2:] == ("--api-key", "sk-secret") and "sk-secret" not in mine.cmdline
    assert len(set(a) ^ set(b)) <= 5  # only what started or ended in between


def test_a_command_name_with_spaces_and_parentheses(tmp_path: Path):
    """comm is free text: the fields after it are found from the last ')'."""
    me = psutil.Process()
    real = Path(f"/proc/{me.pid}/stat").read_bytes()
    fields = real[real.rindex(b")") + 2 :]
    fake = tmp_path / str(me.pid)
    fake.mkdir()
    (fake / "stat").write_bytes(f"{me.pid} (a) b (c)) ".encode() + fields)
    (tmp_path / "self").mkdir()  # not a PID: skipped
    (tmp_path / "999999999").mkdir()  # no stat file: skipped
    table = ProcessScanner(str(tmp_path)).scan()
    assert list(table) == [me.pid]
    assert table[me.pid].ppid == me.ppid()
    assert table[me.pid].started_at == pytest.approx(me.create_time())


def test_a_reused_pid_is_read_again(tmp_path: Path):
    me = psutil.Process()
    fake = tmp_path / str(me.pid)
    fake.mkdir()
    real = Path(f"/proc/{me.pid}/stat").read_bytes()
    (fake / "stat").write_bytes(real)
    scanner = ProcessScanner(str(tmp_path))
    first = scanner.scan()[me.pid]
    head, _, rest = real.rpartition(b")")
    parts = rest.split(b" ")
    parts[20] = str(int(parts[20]) + 1000).encode()  # another start time: another process
    (fake / "stat").write_bytes(head + b")" + b" ".join(parts))
    assert len(scanner._static) == 1
    again = scanner.scan()[me.pid]
    assert again == first and list(scanner._static)[0][1] == int(parts[20])
