"""Signalling processes: the terminate action on a real child, and every refusal path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from lpxtop.engine.system.actions import (
    READONLY_REFUSAL,
    ActionResult,
    check_signal_allowed,
    confirmation,
    send_signal,
)
from tests.support.ports import SLEEPER, running_children

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def children(tmp_path):
    with running_children(tmp_path) as kids:
        yield kids


def test_terminate_a_child(children):
    child = children.python(SLEEPER)
    assert check_signal_allowed(child.pid) is None
    result = send_signal(child.pid, signal.SIGTERM, readonly=False)
    assert result.ok, result.message
    assert result.message.startswith(f"sent SIGTERM to PID {child.pid} (")
    assert child.wait(timeout=10) == -signal.SIGTERM


def test_confirmation_shows_pid_user_and_command(children):
    child = children.python(SLEEPER)
    conf = confirmation(child.pid, signal.SIGKILL)
    assert conf.refusal is None
    assert conf.pid == child.pid and conf.signal_name == "SIGKILL"
    assert conf.user == "root"  # the suite runs as root here
    assert conf.cmdline == f"{sys.executable} -c {SLEEPER}"
    assert conf.started_at == pytest.approx(psutil.Process(child.pid).create_time(), abs=0.01)
    assert conf.text.splitlines()[:3] == [
        f"Send SIGKILL to PID {child.pid}?",
        "user:    root",
        # The code's newlines are shown escaped: a dialog line stays one line.
        f"command: {sys.executable} -c import time\\ntime.sleep(60)\\n",
    ]
    assert child.poll() is None  # showing the dialog sends nothing


def test_readonly_refuses_everything(children):
    child = children.python(SLEEPER)
    assert send_signal(child.pid, signal.SIGTERM, readonly=True) == ActionResult(False, READONLY_REFUSAL)
    assert child.poll() is None


@pytest.mark.parametrize("pid", [0, -1, -os.getpgrp()])
def test_process_groups_are_refused(pid):
    # os.kill(0 or negative) signals whole process groups (-1: every process we may signal).
    reason = check_signal_allowed(pid)
    assert reason is not None and "process groups" in reason
    assert not send_signal(pid, signal.SIGTERM, readonly=False).ok


def test_init_is_refused():
    assert check_signal_allowed(1) == "PID 1 is the init process: lpxtop never signals it"
    result = send_signal(1, signal.SIGTERM, readonly=False)
    assert not result.ok and "init" in result.message
    assert confirmation(1).refusal == "PID 1 is the init process: lpxtop never signals it"


def test_lpxtop_itself_and_its_parents_are_refused():
    assert check_signal_allowed(os.getpid()) == f"PID {os.getpid()} is protected: it is lpxtop itself"
    parent = os.getppid()
    if parent > 1:
        reason = check_signal_allowed(parent)
        assert reason is not None and f"an ancestor of PID {os.getpid()}" in reason
    assert not send_signal(os.getpid(), signal.SIGTERM, readonly=False).ok


def test_other_users_processes_are_refused_unless_root(children, monkeypatch):
    child = children.python(SLEEPER)  # owned by root, like every process here
    # The suite runs as root; a normal user is simulated at the lowest layer, the effective uid.
    monkeypatch.setattr(os, "geteuid", lambda: 4242)
    reason = check_signal_allowed(child.pid)
    assert reason == (
        f"PID {child.pid} belongs to root: lpxtop only signals your own processes (run as root to stop it)"
    )
    result = send_signal(child.pid, signal.SIGTERM, readonly=False)
    assert result == ActionResult(False, reason)
    assert child.poll() is None


def test_exited_zombie_and_reused_pids_are_refused(children):
    child = children.python(SLEEPER)
    shown = confirmation(child.pid).started_at
    assert shown is not None
    # The dialog showed another process than the one now behind this PID: nothing is sent.
    result = send_signal(child.pid, signal.SIGTERM, readonly=False, started_at=shown - 100.0)
    assert not result.ok and "now a different process" in result.message
    assert child.poll() is None

    quick = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        assert _wait_zombie(quick.pid)
        assert "zombie" in check_signal_allowed(quick.pid)
    finally:
        quick.wait(timeout=10)
    assert check_signal_allowed(quick.pid) == f"no process with PID {quick.pid} (it has already exited)"


def _wait_zombie(pid: int) -> bool:
    """Until our unreaped child has exited (it stays a zombie until we wait for it); bounded."""
    for _ in range(200):
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return False
        time.sleep(0.05)
    return False


def test_bad_signal_is_refused(children):
    child = children.python(SLEEPER)
    result = send_signal(child.pid, 9999, readonly=False)
    assert not result.ok and "not a signal" in result.message
    assert confirmation(child.pid, 9999).refusal == "9999 is not a signal"
    assert child.poll() is None
