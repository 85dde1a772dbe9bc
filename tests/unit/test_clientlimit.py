"""lpxtop's own lateness: the loop's timer lag while watched, and the thread's wait for a CPU."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest

from lpxtop.engine.probe.clientlimit import LoopLag, ThreadCpuWait


async def test_a_blocked_loop_shows_as_lag_only_in_open_watches():
    lag = LoopLag(tick_s=0.005)
    quiet = lag.watch()
    await asyncio.sleep(0.05)
    assert quiet.close() < 20e6  # a free loop fires its timer on time (loose: a loaded CI box)
    blocked = lag.watch()
    await asyncio.sleep(0.002)
    time.sleep(0.06)  # the loop is held, as by a long parse on it
    await asyncio.sleep(0.01)
    assert blocked.close() >= 40e6
    assert lag._handle is None  # no watch open: no timer left ticking


async def test_a_watch_closed_before_the_late_tick_fires_still_counts_the_lateness():
    lag = LoopLag(tick_s=0.005)
    w = lag.watch()
    time.sleep(0.03)  # held past the tick's time, then closed in the same pass of the loop
    assert w.close() >= 20e6


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/schedstat"), reason="needs Linux schedstat")
def test_cpu_wait_grows_when_the_thread_competes_for_one_cpu():
    # In a child pinned to one CPU, a busy thread makes the measuring thread wait for that CPU.
    code = """
import os, threading, time
from lpxtop.engine.probe.clientlimit import ThreadCpuWait
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
w = ThreadCpuWait()
assert w.available
before = w.read()
stop = time.monotonic() + 0.5
def spin():
    while time.monotonic() < stop:
        pass
procs = [os.fork() for _ in range(1)]
if procs[0] == 0:
    spin(); os._exit(0)
end = time.monotonic() + 0.4
while time.monotonic() < end:
    pass  # both want the one CPU: each waits for the other's slices
os.waitpid(procs[0], 0)
print((w.read() - before) / 1e6)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) > 50.0  # ms of waiting for the CPU (about half of 0.4 s)


def test_cpu_wait_is_none_where_the_kernel_does_not_say(monkeypatch):
    import lpxtop.engine.probe.clientlimit as cl

    monkeypatch.setattr(cl, "SCHEDSTAT", "/nonexistent/schedstat")
    w = ThreadCpuWait()
    assert not w.available and w.read() is None
