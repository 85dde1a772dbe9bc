#!/usr/bin/env python3
"""How late is lpxtop itself while a probe runs, and what does watching for it cost?

The engine flags a probe `client_limited` when, while it ran, its loop ran a timer late by more than
CLIENT_LAG_LIMIT_NS or its thread spent more than CLIENT_CPU_WAIT_SHARE of the probe's time waiting
for a CPU (engine/probe/clientlimit.py `client_was_late`). This script measures both per probe, so the limits can be
chosen from figures, in three conditions:

  quiet      the headless engine watching 4 simulated servers (own processes, background load)
  gil        the same, with a thread in this process that holds the interpreter lock 5 ms in every 10
  cpu        the same, with this process and a spinning process pinned to one CPU

and prints, per condition, the per-probe worst loop lag, total CPU wait (p50/p95/p99/max, ms) and
CPU wait as a share of the probe's time, and how many probes the current limits flag. Then it prices the lag watch: ticks per second seen in
the quiet run times the CPU of one tick (measured here), as % of one core.

    .venv/bin/python benchmarks/client_limit.py [--seconds 20]

Figures taken while other work loads the machine are noise for "quiet": take them on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.sim_processes import Sims, stop_process
from lpxtop import cli
from lpxtop.cli.assemble import build_engine
from lpxtop.config import endpoints_from_urls
from lpxtop.engine.probe import clientlimit
from lpxtop.engine.probe.clientlimit import LAG_TICK_S, LoopLag

WARM_UP_S = 3.0


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def run_condition(urls: list[str], seconds: float, disturb: str) -> tuple[list[tuple[str, int, int | None, int]], int]:
    """Run the engine for `seconds` under `disturb`; returns its lateness records and its lag ticks."""
    stop = threading.Event()
    spinner = None
    if disturb == "gil":
        def hold() -> None:
            while not stop.is_set():
                end = time.perf_counter() + 0.005
                while time.perf_counter() < end:
                    sum(range(2000))  # a C call: the lock is released only between such calls
                time.sleep(0.005)

        threading.Thread(target=hold, daemon=True).start()
    elif disturb == "cpu":
        cpu = sorted(os.sched_getaffinity(0))[0]
        os.sched_setaffinity(0, {cpu})
        spinner = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
    ticks = [0]
    original = LoopLag._tick

    def counting_tick(self: LoopLag) -> None:
        ticks[0] += 1
        original(self)

    LoopLag._tick = counting_tick  # type: ignore[method-assign]
    engine = build_engine(endpoints_from_urls(urls), scrape_metrics=True)
    try:
        engine.start()
        time.sleep(WARM_UP_S)
        engine.lateness.clear()  # start-up (imports, first connections) is not the steady state
        ticks[0] = 0
        time.sleep(seconds)
    finally:
        engine.stop()
        LoopLag._tick = original  # type: ignore[method-assign]
        stop.set()
        if spinner is not None:
            stop_process(spinner)
            os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    return list(engine.lateness), ticks[0]


def tick_cost_us() -> float:
    """CPU of one lag tick with one watch open: a loop that does nothing but tick, per tick."""
    async def spin() -> tuple[float, int]:
        lag = LoopLag(tick_s=0.0)
        count = [0]
        original = lag._tick

        def tick() -> None:
            count[0] += 1
            original()

        lag._tick = tick  # type: ignore[method-assign]
        watch = lag.watch()
        began = time.thread_time()
        await asyncio.sleep(0.5)
        used = time.thread_time() - began
        watch.close()
        return used, count[0]

    used, count = asyncio.run(spin())
    return used / max(1, count) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds per condition (default 20)")
    args = parser.parse_args()
    sys.setswitchinterval(cli.SWITCH_INTERVAL_S)  # as the dashboard and once set it
    print(f"limits: loop lag > {clientlimit.CLIENT_LAG_LIMIT_NS / 1e6:g} ms, or CPU wait > "
          f"{clientlimit.CLIENT_CPU_WAIT_SHARE:.0%} of the probe (and > {clientlimit.CLIENT_CPU_WAIT_MIN_NS / 1e6:g} ms); "
          f"lag tick every {LAG_TICK_S * 1000:g} ms while a probe runs")
    with tempfile.TemporaryDirectory() as tmp:
        sims = Sims(Path(tmp))
        try:
            sims.start(4, "2,12,60")
            ticks_quiet = 0
            print(f"{'condition':<9} {'probes':>6}  {'lag p50/p95/p99/max ms':>26}  {'wait p50/p95/p99/max ms':>26}  "
                  f"{'wait share p50/p95/max':>24}  flagged")
            for disturb in ("quiet", "gil", "cpu"):
                records, ticks = run_condition(sims.urls, args.seconds, disturb)
                if disturb == "quiet":
                    ticks_quiet = ticks
                lags = [lag / 1e6 for _, lag, _, _ in records]
                waits = [w / 1e6 for _, _, w, _ in records if w is not None]
                shares = [100 * w / took for _, _, w, took in records if w is not None and took > 0]
                flagged = sum(clientlimit.client_was_late(lag, w, took) for _, lag, w, took in records)

                def row(values: list[float], qs=(0.5, 0.95, 0.99, 1.0)) -> str:
                    return "/".join(f"{quantile(values, q):.2f}" for q in qs) if values else "--"

                print(f"{disturb:<9} {len(records):>6}  {row(lags):>26}  {row(waits):>26}  "
                      f"{row(shares, (0.5, 0.95, 1.0)) + ' %':>24}  {flagged}/{len(records)}")
        finally:
            sims.stop()
    cost = tick_cost_us()
    per_s = ticks_quiet / args.seconds
    print(f"lag watch: {per_s:.1f} ticks/s in the quiet run x {cost:.1f} us per tick = "
          f"{per_s * cost / 1e4:.3f} % of one core")
    print(f"load average now: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
