"""Was lpxtop itself late? The two ways lpxtop's own delays can land in a timing it reports.

A timestamp is taken when the engine's loop gets to a read. Two things can make that later than the
bytes' arrival, and neither is the server's time:

- **the loop was busy** (another response being decoded, a burst of reads, a thread holding the
  interpreter lock): `LoopLag` measures how late a timer on the loop fires while someone is watching;
- **the thread waited for a CPU** (the watched server saturates the machine): Linux counts the time a
  thread spent runnable but not running in `/proc/thread-self/schedstat` (second field, ns);
  `ThreadCpuWait` reads it.

A probe (or a load-test step) that saw either beyond a small bound is marked `client_limited`. Both are
cheap: the lag timer ticks only while a watch is open (a probe in flight), and schedstat is one
`pread` of an already open file (a few µs).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time

SCHEDSTAT = "/proc/thread-self/schedstat"
LAG_TICK_S = 0.025


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
    """How late the event loop runs a timer, measured only while at least one watch is open.

    Create and use on the loop's own thread. A tick every `tick_s` while watched: with the loop free
    it fires within ~0.1 ms of its time; anything that holds the loop (or the interpreter lock) longer
    shows as lateness, which every open watch records.
    """

    def __init__(self, tick_s: float = LAG_TICK_S) -> None:
        self.tick_s = tick_s
        self._watches: set[LagWatch] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._due_ns = 0

    def watch(self) -> LagWatch:
        w = LagWatch(self)
        self._watches.add(w)
        if self._handle is None:
            self._schedule()
        return w

    def _close(self, w: LagWatch) -> None:
        self._late(time.perf_counter_ns())  # the lateness so far of a tick that has not fired yet counts too
        self._watches.discard(w)
        if not self._watches and self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _schedule(self) -> None:
        self._due_ns = time.perf_counter_ns() + int(self.tick_s * 1e9)
        self._handle = asyncio.get_running_loop().call_later(self.tick_s, self._tick)

    def _late(self, now_ns: int) -> None:
        lag = now_ns - self._due_ns
        if lag > 0:
            for w in self._watches:
                if lag > w.max_lag_ns:
                    w.max_lag_ns = lag

    def _tick(self) -> None:
        self._late(time.perf_counter_ns())
        self._handle = None
        if self._watches:
            self._schedule()
