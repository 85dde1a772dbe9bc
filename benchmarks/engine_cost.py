"""Where the engine's own CPU goes: probes, /metrics scrapes, and the rest (host, ports, GPU, the loop).

Runs the headless engine (no UI) in this process against 4 simulated servers in their own processes,
30 s per configuration, and prints this process's CPU as % of one core for:

  default                      probes every 2 s + /metrics every 2 s
  no /metrics                  probes only
  probes every 60 s            /metrics only (and the rest)
  probes 60 s, no /metrics     the rest

usage: python benchmarks/engine_cost.py [--seconds 30]
"""

from __future__ import annotations

import argparse
import time

import psutil

from benchmarks.sim_processes import sim_processes
from lpxtop.cli.assemble import build_engine
from lpxtop.config import endpoints_from_urls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    with sim_processes(4, model=lambda i: f"m{i}") as sims:
        urls = sims.urls
        me = psutil.Process()
        runs = (
            ("default", {}),
            ("no /metrics", {"scrape_metrics": False}),
            ("probes every 60 s", {"interval": 60.0}),
            ("probes 60 s, no /metrics", {"interval": 60.0, "scrape_metrics": False}),
        )
        print(f"engine CPU, % of one core, {args.seconds:g} s each, 4 endpoints")
        for label, options in runs:
            options = dict(options)
            interval = options.pop("interval", None)
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
