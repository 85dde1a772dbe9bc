"""Was lpxtop itself late? The ways lpxtop's own delays can land in a timing it reports.

A timestamp is taken when the engine's loop gets to a read. These can make that later than the bytes'
arrival, and none is the server's time:

- **the loop was busy** (another response being decoded, a burst of reads, a slow listener):
  `LoopLag` reports, while someone watches, how long events waited for the loop's callbacks to end and
  how late the loop ran a timer. On lpxtop's loops the selector times the loop between two waits
  (lpxtop/loopthread.py `LagSelector`); on any other loop a timer ticks every LAG_TICK_S to be measured;
- **a garbage collection** in any thread holds the interpreter lock: `LoopLag` hears of each one that lasts
  a millisecond or more while a watch is open (`gc.callbacks`);
- **the thread waited for a CPU** (the watched server saturates the machine): Linux counts the time a
  thread spent runnable but not running in `/proc/thread-self/schedstat` (second field, ns);
  `ThreadCpuWait` reads it.

Another thread of lpxtop's running Python gives the interpreter lock up within the switch interval (1 ms:
lpxtop/cli/common.py `SWITCH_INTERVAL_S`), below every limit here. What is not seen: one C call on another
thread that holds the lock longer than the limit while the loop waits with nothing else to do (the
dashboard makes none: the trace receiver, whose JSON bodies would, runs in a process of its own,
engine/traces/process.py; a timer that measured it would wake the loop every tick, the dashboard's
largest cost before, lpxtop/loopthread.py `LagSelector`).

A probe (or a load-test step) that saw any beyond a small bound is marked `client_limited`. All are cheap
while a watch is open (a probe in flight): the selector's timing is two clock reads per wait of the loop
and a system call more after a stretch of callbacks of 1 ms or more, with no wake-up of its own; schedstat
is one `pread` of an already open file (a few µs). `LatenessWatch` is what the engine runs around each chat
probe and agent step; `client_was_late` is the bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

from lpxtop.loopthread import LagSelector, lag_selector

SCHEDSTAT = "/proc/thread-self/schedstat"
LAG_TICK_S = 0.025
_T = TypeVar("_T")

# A probe is client_limited when, while it ran, the engine's loop was late by more than CLIENT_LAG_LIMIT_NS
# (see LoopLag), or its thread spent more than CLIENT_CPU_WAIT_SHARE of the probe's time (and at least
# CLIENT_CPU_WAIT_MIN_NS, as much as the lag limit) waiting for a CPU. benchmarks/client_limit.py on the
# 2-core VM (4 simulated servers, 40 s per condition, 1-ms switch interval, the machine shared with other
# work at a load average of ~4), with the timer that watched then: undisturbed, the worst lag per probe was
# 1.7 ms at p50 and 6.1 ms at p99 (epoll's 1-ms timeout rounding and the switch interval are most of the
# floor), the CPU wait 0.7 % of a probe's time at p50 and 2.3 % at most; with a thread holding the
# interpreter lock 5 ms in 10, lags of 5.8 / 12.9 ms (p50 / p95); pinned to one CPU beside a spinner, waits
# of 7 / 26 %. With the selector (a quiet VM): undisturbed 1.2 / 4.5 ms (p50 / p99), 1 probe of 46 over the
# limit; pinned beside a spinner 7 of 61 flagged, as with the timer (docs/performance.md has both side by side).
# The wait is a sum over the probe's wake-ups, so it is judged as a share of the probe's time (a 1-s
# probe on a busy host sums 30 ms of small waits); a single long wait makes the loop's timer late too.
CLIENT_LAG_LIMIT_NS = 5_000_000
CLIENT_CPU_WAIT_SHARE = 0.05
CLIENT_CPU_WAIT_MIN_NS = 5_000_000  # as the lag: lateness of at least 5 ms by either measure
LATENESS_KEPT = 1000  # (endpoint, loop lag, CPU wait) of the last probes, for benchmarks and tests


class ThreadCpuWait:
    """The run-queue wait of the thread that created it, in ns since that thread started.

    Open it on the thread to watch (the file names the opening thread); `read()` may then be called
    from that thread only. Returns None where the kernel does not provide it (not Linux, no schedstat).
    """

    def __init__(self) -> None:
        self._fd: int | None = None
        with contextlib.suppress(OSError):
            self._fd = os.open(SCHEDSTAT, os.O_RDONLY)
        if self.read() is None:
            self.close()

    @property
    def available(self) -> bool:
        return self._fd is not None

    def read(self) -> int | None:
        fd = self._fd
        if fd is None:
            return None
        try:
            return int(os.pread(fd, 128, 0).split()[1])
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        self.close()


class LagWatch:
    """One open watch: the most the loop's timer was late while it was open (ns)."""

    __slots__ = ("max_lag_ns", "_monitor")

    def __init__(self, monitor: LoopLag) -> None:
        self.max_lag_ns = 0
        self._monitor = monitor

    def close(self) -> int:
        """Stop watching; returns the worst lateness seen (ns)."""
        self._monitor._close(self)
        return self.max_lag_ns


class LoopLag:
    """How late the event loop was, measured only while at least one watch is open; every open watch records
    the worst.

    Create and use on the loop's own thread. On a loop of lpxtop's (lpxtop/loopthread.py `new_event_loop`)
    its selector says how long events waited for the loop's callbacks to end and how late the loop ran a
    timer, without a wake-up of its own. On any other loop a timer ticks every `tick_s` while watched: with
    the loop free it fires within ~0.1 ms of its time; anything that holds the loop (or the interpreter
    lock) longer shows as lateness. On both, a garbage collection of 1 ms or more counts whole.
    """

    def __init__(self, tick_s: float = LAG_TICK_S) -> None:
        self.tick_s = tick_s
        self._watches: set[LagWatch] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._selector: LagSelector | None = None
        self._due_ns = 0

    def watch(self) -> LagWatch:
        w = LagWatch(self)
        if not self._watches:
            _watch_collections(self)
            selector = lag_selector(asyncio.get_running_loop())
            if selector is not None:
                self._selector = selector
                selector.listeners.append(self._record)
            else:
                self._schedule()
        self._watches.add(w)
        return w

    def _close(self, w: LagWatch) -> None:
        if self._handle is not None:
            self._late(time.perf_counter_ns())  # the lateness so far of a tick that has not fired yet counts too
        self._watches.discard(w)
        if not self._watches:
            _COLLECTION_WATCHERS.discard(self)
            if self._handle is not None:
                self._handle.cancel()
                self._handle = None
            if self._selector is not None:
                with contextlib.suppress(ValueError):
                    self._selector.listeners.remove(self._record)
                self._selector = None

    def _schedule(self) -> None:
        self._due_ns = time.perf_counter_ns() + int(self.tick_s * 1e9)
        self._handle = asyncio.get_running_loop().call_later(self.tick_s, self._tick)

    def _late(self, now_ns: int) -> None:
        self._record(now_ns - self._due_ns)

    def _record(self, lag_ns: int) -> None:
        if lag_ns > 0:
            for w in self._watches:
                if lag_ns > w.max_lag_ns:
                    w.max_lag_ns = lag_ns

    def _tick(self) -> None:
        self._late(time.perf_counter_ns())
        self._handle = None
        if self._watches:
            self._schedule()


# LoopLags with a watch open, told of each garbage collection of GC_REPORTED_NS or more (in any thread: it
# holds the interpreter lock, so no loop runs meanwhile)
_COLLECTION_WATCHERS: weakref.WeakSet[LoopLag] = weakref.WeakSet()
GC_REPORTED_NS = 1_000_000
_collection_began_ns = 0


def _on_collection(phase: str, info: dict[str, int]) -> None:
    global _collection_began_ns
    if phase == "start":
        _collection_began_ns = time.perf_counter_ns()
        return
    took_ns = time.perf_counter_ns() - _collection_began_ns
    if took_ns >= GC_REPORTED_NS and _COLLECTION_WATCHERS:
        for lag in tuple(_COLLECTION_WATCHERS):
            with contextlib.suppress(RuntimeError):  # its watches changing in the thread the collection stopped
                lag._record(took_ns)


def _watch_collections(lag: LoopLag) -> None:
    if _on_collection not in gc.callbacks:
        gc.callbacks.append(_on_collection)
    _COLLECTION_WATCHERS.add(lag)


def client_was_late(lag_ns: int, wait_ns: int | None, took_ns: int) -> bool:
    """Whether lpxtop's own lateness while a probe ran may have moved its figures (see the limits above)."""
    if lag_ns > CLIENT_LAG_LIMIT_NS:
        return True
    return wait_ns is not None and wait_ns > max(CLIENT_CPU_WAIT_MIN_NS, CLIENT_CPU_WAIT_SHARE * took_ns)


class LatenessWatch:
    """The engine's own lateness around each probe: the loop's timer lag and the thread's CPU wait.

    `open()` on the loop's thread (schedstat names the opening thread) before the first probe, `close()`
    after the last. `records` keeps (endpoint, worst loop lag, CPU wait, probe duration) in ns of the
    last probes, for benchmarks and tests.
    """

    def __init__(self, kept: int = LATENESS_KEPT) -> None:
        self.records: deque[tuple[str, int, int | None, int]] = deque(maxlen=kept)
        self._lag: LoopLag | None = None
        self._cpu_wait: ThreadCpuWait | None = None

    def open(self) -> None:
        self._lag = LoopLag()
        self._cpu_wait = ThreadCpuWait()

    def close(self) -> None:
        if self._cpu_wait is not None:
            self._cpu_wait.close()
        self._lag = self._cpu_wait = None

    async def run(self, name: str, work: Callable[[], Awaitable[_T]]) -> tuple[_T, bool]:
        """`work()`'s result, and whether lpxtop itself was late while it ran (the loop's timer lag, the
        thread's CPU wait: `client_was_late`). Chat probes and agent steps are watched alike."""
        lag_ns, wait_ns = 0, None
        watch = self._lag.watch() if self._lag is not None else None
        cpu_wait = self._cpu_wait
        waited_before = cpu_wait.read() if cpu_wait is not None else None
        began_ns = time.perf_counter_ns()
        try:
            result = await work()
        finally:
            if watch is not None:
                lag_ns = watch.close()
            waited_after = cpu_wait.read() if cpu_wait is not None else None
            if waited_before is not None and waited_after is not None:
                wait_ns = waited_after - waited_before
        took_ns = time.perf_counter_ns() - began_ns
        self.records.append((name, lag_ns, wait_ns, took_ns))
        return result, client_was_late(lag_ns, wait_ns, took_ns)
