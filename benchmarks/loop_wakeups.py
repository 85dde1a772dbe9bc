#!/usr/bin/env python3
"""What one wake-up of a waiting thread costs, against the work it wakes up for.

A monitor spends most of its life waiting, so on a machine where waking is dear every timer that fires
only to look at the clock shows in its CPU. This script measures, in this process, the CPU time
(`time.thread_time`) per wake-up of:

  time.sleep              a thread sleeping TICK_S at a time
  epoll                   a raw epoll wait of TICK_S with nothing to read
  asyncio timer           a loop whose only work is a timer re-armed every TICK_S (what a lateness watch's
                          tick was: engine/probe/clientlimit.py before lpxtop/loopthread.py `LagSelector`)
  asyncio timer, no wait  the same timer with a zero delay: the callback's own cost, no wake-up
  LagSelector's timing    what timing one wait adds while a lateness watch is open (no wake-up of its own)

usage: python benchmarks/loop_wakeups.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import select
import sys
import time

from lpxtop.loopthread import LagSelector

TICK_S = 0.025


def per_sleep(seconds: float) -> float:
    count = max(1, int(seconds / TICK_S))
    began = time.thread_time()
    for _ in range(count):
        time.sleep(TICK_S)
    return (time.thread_time() - began) / count


def per_epoll(seconds: float) -> float:
    count = max(1, int(seconds / TICK_S))
    ep = select.epoll()
    try:
        began = time.thread_time()
        for _ in range(count):
            ep.poll(TICK_S)
        return (time.thread_time() - began) / count
    finally:
        ep.close()


def per_timer(seconds: float, delay: float) -> float:
    async def run() -> float:
        loop = asyncio.get_running_loop()
        fired = [0]

        def tick() -> None:
            fired[0] += 1
            loop.call_later(delay, tick)

        loop.call_later(delay, tick)
        began = time.thread_time()
        await asyncio.sleep(seconds)
        return (time.thread_time() - began) / max(1, fired[0])

    return asyncio.run(run())


def timing_per_wait(count: int = 20_000) -> float:
    """What LagSelector adds to one wait of the loop while a listener listens (a wait that finds nothing and
    returns at once: no wake-up), against the same selector with nobody listening."""

    def cost(listening: bool) -> float:
        selector = LagSelector()
        if listening:
            selector.listeners.append(lambda late_ns: None)
        try:
            began = time.thread_time()
            for _ in range(count):
                selector.select(0)
            return (time.thread_time() - began) / count
        finally:
            selector.close()

    return min(cost(True) for _ in range(3)) - min(cost(False) for _ in range(3))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per row (default 3)")
    args = parser.parse_args()
    rows = [
        ("time.sleep", per_sleep(args.seconds)),
        ("epoll", per_epoll(args.seconds)),
        ("asyncio timer", per_timer(args.seconds, TICK_S)),
        ("asyncio timer, no wait", per_timer(0.3, 0.0)),
        ("LagSelector's timing", timing_per_wait()),
    ]
    print(f"CPU per wake-up, a wait of {TICK_S * 1e3:g} ms each (thread CPU time; the last row per wait):")
    for name, cost in rows:
        print(f"  {name:<24} {cost * 1e6:8.1f} us")
    print(f"a timer every {TICK_S * 1e3:g} ms costs {rows[2][1] / TICK_S * 100:.2f} % of one core while it ticks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
