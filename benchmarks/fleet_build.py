"""How long the fleet view takes to turn one refresh's answers into its table (a Snapshot), by fleet size.

Prometheus' answers are synthetic (tests/support/fleet_readings.py: every per-row query answered for each row,
a quarter as many servers scraped without lpxtop); no network, only `lpxtop.fleet.source.build_snapshot`,
the step the dashboard's poller runs once a refresh (5 s by default). Each size is built `--repeat`
times and the best is printed, with the time per row: flat when the build is linear.

    .venv/bin/python benchmarks/fleet_build.py                 # 250, 500, 1000, 2000 rows
    .venv/bin/python benchmarks/fleet_build.py --rows 2000 --repeat 5
"""

from __future__ import annotations

import argparse
import time

from lpxtop.fleet.source import FleetSettings, build_snapshot
from tests.support.fleet_readings import synthetic_reading


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="250,500,1000,2000", help="fleet sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    settings = FleetSettings(prometheus_url="http://127.0.0.1:9090")
    print(f"{'rows':>6} {'series':>8} {'build s':>9} {'µs/row':>8}")
    for rows in (int(r) for r in args.rows.split(",")):
        reading = synthetic_reading(rows)
        series = sum(len(a.series) for a in reading.answers.values())
        best = float("inf")
        for _ in range(args.repeat):
            began = time.perf_counter()
            snapshot = build_snapshot(settings, reading, started_at=0.0, seq=1, last_good=None)
            best = min(best, time.perf_counter() - began)
        assert len(snapshot.endpoints) >= rows
        print(f"{rows:>6} {series:>8} {best:>9.3f} {best / rows * 1e6:>8.0f}")


if __name__ == "__main__":
    main()
