#!/usr/bin/env python3
"""How late is lpxtop itself while a probe runs, and what does watching for it cost?

The engine flags a probe `client_limited` when, while it ran, its loop was late by more than
CLIENT_LAG_LIMIT_NS (events that waited for its callbacks, a timer run late, a garbage collection) or its
thread spent more than CLIENT_CPU_WAIT_SHARE of the probe's time waiting for a CPU
(engine/probe/clientlimit.py `client_was_late`). This script measures both per probe, so the limits can be
chosen from figures, in three conditions:

  quiet      the headless engine watching 4 simulated servers (own processes, background load)
  gil        the same, with a thread in this process that holds the interpreter lock 5 ms in every 10
             (one C call at a time: a thread running Python gives the lock up within the switch interval)
  cpu        the same, with this process and a spinning process pinned to one CPU

and prints, per condition, the per-probe worst loop lag, total CPU wait (p50/p95/p99/max, ms) and
CPU wait as a share of the probe's time, and how many probes the current limits flag. Then it prices the lag watch: the loop's
waits per second while watched in the quiet run times what timing one wait costs (benchmarks/loop_wakeups.py;
the watch wakes the loop for nothing: lpxtop/loopthread.py `LagSelector`), as % of one core.

    .venv/bin/python benchmarks/client_limit.py [--seconds 20]

Figures taken while other work loads the machine are noise for "quiet": take them on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.loop_wakeups import timing_per_wait
from benchmarks.sim_processes import Sims, stop_process
from lpxtop.cli.assemble import build_engine
from lpxtop.cli.common import SWITCH_INTERVAL_S
from lpxtop.config import endpoints_from_urls
from lpxtop.engine.probe import clientlimit
from lpxtop.loopthread import LagSelector

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
    """Run the engine for `seconds` under `disturb`; returns its lateness records and the loop's watched waits."""
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
    waits = [0]
    original = LagSelector.select

    def counting_select(self: LagSelector, timeout: float | None = None) -> list:
        if self.listeners:
            waits[0] += 1
        return original(self, timeout)

    LagSelector.select = counting_select  # type: ignore[method-assign]
    engine = build_engine(endpoints_from_urls(urls), scrape_metrics=True)
    try:
        engine.start()
        time.sleep(WARM_UP_S)
        engine.lateness.clear()  # start-up (imports, first connections) is not the steady state
        waits[0] = 0
        time.sleep(seconds)
    finally:
        engine.stop()
        LagSelector.select = original  # type: ignore[method-assign]
        stop.set()
        if spinner is not None:
            stop_process(spinner)
            os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    return list(engine.lateness), waits[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds per condition (default 20)")
    args = parser.parse_args()
    sys.setswitchinterval(SWITCH_INTERVAL_S)  # as the dashboard and once set it
    print(f"limits: loop lag > {clientlimit.CLIENT_LAG_LIMIT_NS / 1e6:g} ms, or CPU wait > "
          f"{clientlimit.CLIENT_CPU_WAIT_SHARE:.0%} of the probe (and > {clientlimit.CLIENT_CPU_WAIT_MIN_NS / 1e6:g} ms)")
    with tempfile.TemporaryDirectory() as tmp:
        sims = Sims(Path(tmp))
        try:
            sims.start(4, "2,12,60")
            waits_quiet = 0
            print(f"{'condition':<9} {'probes':>6}  {'lag p50/p95/p99/max ms':>26}  {'wait p50/p95/p99/max ms':>26}  "
                  f"{'wait share p50/p95/max':>24}  flagged")
            for disturb in ("quiet", "gil", "cpu"):
                records, waits = run_condition(sims.urls, args.seconds, disturb)
                if disturb == "quiet":
                    waits_quiet = waits
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
    cost = timing_per_wait() * 1e6
    per_s = waits_quiet / args.seconds
    print(f"lag watch: {per_s:.1f} watched waits/s in the quiet run x {cost:.2f} us per wait = "
          f"{per_s * cost / 1e4:.4f} % of one core (no wake-up of its own)")
    print(f"load average now: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
