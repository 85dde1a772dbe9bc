"""How late the generator's loop runs, sampled through a step's measured window.

`LoopLag` (lpxtop/engine/probe/clientlimit.py) gives the worst lateness while a watch is open; each load request
keeps its own (`client_lag_ms` in the requests file). Over a whole step that worst case is a poor judge: with
200 requests in flight one 60 ms stall marks every one of them, while the timestamps the step reports are
late only if a read came during the stall. So the step is judged on the distribution instead: a timer every
`tick_s` records how late it fired, and the p99 of those is how late a read arriving at a random moment would
be stamped, at worst one time in a hundred. It is an upper bound: when the whole machine is short of CPU the
server is late too, and a read stamped late against the wall clock is not late against the bytes' sending
(seen at concurrency 200 on a shared, loaded 2-core box: tick lateness p99 41 ms, max 55 ms, while the TTFT
error against the simulator's record was p99 5.1 ms, max 5.1 ms over 400 requests).
"""

from __future__ import annotations

import asyncio
import time
from array import array

TICK_S = 0.025
MAX_SAMPLES = 200_000  # 83 minutes of ticks: a step's window is bounded by far less


class TickLag:
    """Start on the loop to watch; `stop()` returns the lateness of every tick (ms)."""

    def __init__(self, tick_s: float = TICK_S) -> None:
        self.tick_s = tick_s
        self.lags_ms = array("d")
        self._handle: asyncio.TimerHandle | None = None
        self._due_ns = 0

    def start(self) -> None:
        self._schedule()

    def stop(self) -> array:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        return self.lags_ms

    @property
    def running(self) -> bool:
        return self._handle is not None

    def _schedule(self) -> None:
        self._due_ns = time.perf_counter_ns() + int(self.tick_s * 1e9)
        self._handle = asyncio.get_running_loop().call_later(self.tick_s, self._tick)

    def _tick(self) -> None:
        if len(self.lags_ms) < MAX_SAMPLES:
            self.lags_ms.append(max(0, time.perf_counter_ns() - self._due_ns) / 1e6)
        self._schedule()
