"""lpxtop's own lateness: the loop's timer lag while watched, and the thread's wait for a CPU."""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from lpxtop.engine.probe.clientlimit import LoopLag, ThreadCpuWait
from lpxtop.loopthread import lag_selector, run_loop


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


# On lpxtop's own loops (lpxtop/loopthread.py) the selector times the loop: no timer ticks to be measured.


def test_on_lpxtop_s_loop_a_read_held_back_by_a_busy_loop_counts_and_no_timer_ticks():
    async def main() -> tuple[int, int, bool, int]:
        loop = asyncio.get_running_loop()
        lag = LoopLag(tick_s=0.005)
        a, b = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=a)  # read as the HTTP client reads: by the selector
        try:
            watch = lag.watch()
            listening = lag_selector(loop).listeners == [lag._record] and lag._handle is None
            b.send(b"x")  # a read arrives while the loop's callbacks still run ...
            time.sleep(0.06)  # ... for 60 ms (a long parse on the loop)
            await reader.read(1)
            held = watch.close()
            quiet = lag.watch()
            time.sleep(0.06)  # busy again, but nothing arrives meanwhile: nothing waited
            await asyncio.sleep(0.01)
            return held, quiet.close(), listening, len(lag_selector(loop).listeners)
        finally:
            writer.close()
            b.close()

    held, quiet, listening, left = run_loop(main())
    assert listening
    assert held >= 50e6
    assert quiet < 20e6  # a timer that ran on time (loose: a loaded CI box)
    assert left == 0  # no watch open: nobody listens


def test_on_lpxtop_s_loop_a_timer_run_late_counts():
    """A thread holding the interpreter lock in one C call keeps the loop from running its timer."""
    done = threading.Event()

    def hold() -> None:
        for _ in range(8):  # holds of ~0.1-0.3 s with a millisecond between: the loop's 10-ms waits fall in them
            sum(range(10_000_000))  # one C call: the lock is not given up until it returns
            time.sleep(0.001)
        done.set()

    async def main() -> int:
        lag = LoopLag()
        watch = lag.watch()
        holder = threading.Thread(target=hold)
        holder.start()
        for _ in range(400):
            await asyncio.sleep(0.01)
            if done.is_set():
                break
        late = watch.close()
        holder.join()
        return late

    assert run_loop(main()) >= 50e6


def test_a_garbage_collection_while_watched_counts_whole():
    async def main() -> tuple[int, float]:
        lag = LoopLag()
        heap = [[i] for i in range(300_000)]  # a collection that has something to walk through
        watch = lag.watch()
        began = time.perf_counter()
        gc.collect()
        took = time.perf_counter() - began
        del heap
        return watch.close(), took

    late, took = run_loop(main())
    assert took >= 0.002  # the collection was long enough to be told (1 ms or more)
    assert late >= 0.9 * took * 1e9


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
