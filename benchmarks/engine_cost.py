"""Where the engine's own CPU goes: probes, /metrics scrapes, and the rest (host, ports, GPU, the loop).

Runs the headless engine (no UI) in this process against 4 simulated servers in their own processes,
30 s per configuration, and prints this process's CPU as % of one core for:

  default                      probes every 2 s + /metrics every 2 s
  no /metrics                  probes only
  probes every 60 s            /metrics only (and the rest)
  probes 60 s, no /metrics     the rest

With --parts, also the default without each of the engine's periodic parts, so that the difference from
the default row is what that part costs:

  no lateness watch            no loop-lag timer (a tick every 25 ms while a probe runs) and no CPU-wait
                               reads around each probe
  snapshot every 60 s          the snapshot built every 60 s instead of twice a second
  no histogram reads           /metrics scrapes never read the latency histograms (every 10 s by default)

usage: python benchmarks/engine_cost.py [--seconds 30] [--parts] [--only LABEL,...]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable, Iterator

import psutil

from benchmarks.sim_processes import sim_processes
from lpxtop.cli.assemble import build_engine
from lpxtop.config import endpoints_from_urls
from lpxtop.engine import runner
from lpxtop.engine.probe import clientlimit
from lpxtop.engine.scrape import tracker


@contextlib.contextmanager
def patched(target: object, name: str, value: object) -> Iterator[None]:
    """`target.name` set to `value` for the block (the engine reads these module settings as it runs)."""
    old = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, old)


def no_lateness_watch() -> contextlib.AbstractContextManager:
    # open() never arms the watch: run() then neither ticks the loop-lag timer nor reads schedstat
    return patched(clientlimit.LatenessWatch, "open", lambda self: None)


@contextlib.contextmanager
def rare_snapshots() -> Iterator[None]:
    with patched(runner, "PUBLISH_EVERY_S", 60.0), patched(runner, "HEARTBEAT_S", 60.0):
        yield


def no_histograms() -> contextlib.AbstractContextManager:
    return patched(tracker, "HISTOGRAMS_EVERY_S", 1e12)


RUNS: tuple[tuple[str, dict, Callable[[], contextlib.AbstractContextManager]], ...] = (
    ("default", {}, contextlib.nullcontext),
    ("no /metrics", {"scrape_metrics": False}, contextlib.nullcontext),
    ("probes every 60 s", {"interval": 60.0}, contextlib.nullcontext),
    ("probes 60 s, no /metrics", {"interval": 60.0, "scrape_metrics": False}, contextlib.nullcontext),
)
PARTS: tuple[tuple[str, dict, Callable[[], contextlib.AbstractContextManager]], ...] = (
    ("no lateness watch", {}, no_lateness_watch),
    ("snapshot every 60 s", {}, rare_snapshots),
    ("no histogram reads", {}, no_histograms),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--parts", action="store_true", help="also the default without each periodic part")
    parser.add_argument("--only", default="", metavar="LABEL,...", help="run only these rows (by label)")
    args = parser.parse_args()
    runs = RUNS + (PARTS if args.parts else ())
    if args.only:
        wanted = {label.strip() for label in args.only.split(",")}
        runs = tuple(run for run in runs if run[0] in wanted)
    with sim_processes(4, model=lambda i: f"m{i}") as sims:
        urls = sims.urls
        me = psutil.Process()
        print(f"engine CPU, % of one core, {args.seconds:g} s each, 4 endpoints")
        for label, options, context in runs:
            options = dict(options)
            interval = options.pop("interval", None)
            with context():
                engine = build_engine(endpoints_from_urls(urls, interval_s=interval), discover=False, **options)
                engine.start()
                time.sleep(5)
                c0, t0 = sum(me.cpu_times()[:2]), time.monotonic()
                time.sleep(args.seconds)
                pct = 100 * (sum(me.cpu_times()[:2]) - c0) / (time.monotonic() - t0)
                engine.stop()
            print(f"  {label:28s} {pct:5.2f} %", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
