"""How far lpxtop's TTFT and ITL are from the truth, with and without the dashboard running.

The simulated server records, for every event, the perf_counter_ns() just before it wrote the bytes.
lpxtop's engine (its own thread and loop) measures the same events at arrival. This script runs the
engine against the simulator for a while, matches each probe to the simulator's record by response id,
and prints measured-minus-true TTFT and ITL (p50, p99, max, in ms):

  - engine alone (headless, as `lpxtop once` and exporters use it);
  - engine + the Textual dashboard rendering in the same process (headless terminal, 160x48,
    repainting at 2 Hz), started as `lpxtop` starts it, which is the real case;
  - the same without lpxtop's measures against interpreter-lock and garbage-collector stalls (engine
    started before the first frame, default 5 ms switch interval, no gc.freeze), for comparison.

usage: python benchmarks/fidelity.py [--seconds 20] [--interval 0.25] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import socket
import subprocess
import sys
import time
import urllib.request

from lpxtop.engine.runner import Engine, EngineSettings
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.probe import quantile_sorted
from lpxtop.sim.records import token_times_ns


def fetch_events(base_url: str, response_id: str) -> list | None:
    """The sim's record of what it sent for one response: (t_ns, kind, n_tokens) events."""
    try:
        with urllib.request.urlopen(f"{base_url}/sim/records/{response_id}", timeout=5) as response:
            return json.loads(response.read())["events"]
    except (OSError, ValueError, KeyError):  # urllib's HTTPError (a 404) is an OSError
        return None


def errors(samples, base_url: str) -> tuple[list[float], list[float], int]:
    ttft, itl, skipped = [], [], 0
    for s in samples:
        events = fetch_events(base_url, s.response_id) if s.ok and s.response_id else None
        if events is None:
            skipped += 1
            continue
        truth = token_times_ns(events)
        if len(truth) != len(s.token_event_ms):
            skipped += 1
            continue
        ttft.append(s.ttft_ms - (truth[0] - s.start_ns) / 1e6)
        gaps = [(b - a) / 1e6 for a, b in zip(truth, truth[1:])]
        itl += [m - t for m, t in zip(s.itl_ms, gaps)]
    return ttft, itl, skipped


def summary(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    ordered = sorted(abs(v) for v in values)
    return {"n": len(values), "p50": quantile_sorted(ordered, 0.5), "p99": quantile_sorted(ordered, 0.99),
            "max": ordered[-1]}


@contextlib.contextmanager
def sim_process():
    """The simulated server in its own process (as a real server would be), on a free loopback port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "lpxtop", "sim", "--port", str(port), "--model", "bench", "--ttft-ms", "30",
         "--itl-ms", "8", "--background-load", "1,6,20", "--seed", "3"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(base_url + "/health", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        yield base_url
    finally:
        proc.terminate()
        proc.wait(10)


def make_engine(url: str, interval: float) -> Engine:
    return Engine([EndpointConfig(name="sim", url=url, interval_s=interval, max_tokens=32)],
                  EngineSettings(max_samples=100_000, window_s=3600))


def run_headless(url: str, seconds: float, interval: float):
    engine = make_engine(url, interval)
    with engine:
        time.sleep(seconds)
    return engine.snapshot().endpoints[0].samples


def run_with_dashboard(url: str, seconds: float, interval: float, *, as_cli: bool = True):
    """The dashboard in the same process as the engine. as_cli: start the engine the way `lpxtop` does
    (after the first frame, with a collected and frozen heap and a 1 ms switch interval); otherwise start
    it before the app with the interpreter's defaults, to show what those measures buy."""
    from lpxtop.cli.common import SWITCH_INTERVAL_S
    from lpxtop.cli.dashboard import start_measuring
    from lpxtop.ui.app import create_app

    engine = make_engine(url, interval)
    default_switch = sys.getswitchinterval()
    if as_cli:
        app = create_app(engine, refresh_s=0.5, on_ready=lambda: start_measuring(engine))
        sys.setswitchinterval(SWITCH_INTERVAL_S)
    else:
        app = create_app(engine, refresh_s=0.5)
        engine.start()

    async def drive():
        async with app.run_test(size=(160, 48)) as pilot:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                await pilot.pause(0.5)

    try:
        asyncio.run(drive())
    finally:
        engine.stop()
        sys.setswitchinterval(default_switch)
        gc.unfreeze()
    return engine.snapshot().endpoints[0].samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=0.25)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {}
    with sim_process() as base_url:
        runs = (
            ("engine only", run_headless),
            ("engine + dashboard", run_with_dashboard),
            ("  without measures", lambda *a: run_with_dashboard(*a, as_cli=False)),
        )
        for label, runner in runs:
            samples = runner(base_url + "/v1", args.seconds, args.interval)
            ttft, itl, skipped = errors(samples, base_url)
            results[label] = {"probes": len(samples), "unmatched": skipped, "ttft_error_ms": summary(ttft),
                              "itl_error_ms": summary(itl)}
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"|measured - true| in ms, {args.seconds:g} s per run, a probe every {args.interval:g} s, "
          "simulator in its own process")
    print(f"{'run':<20} {'probes':>6} {'TTFT p50':>9} {'TTFT p99':>9} {'TTFT max':>9} "
          f"{'ITL p50':>8} {'ITL p99':>8} {'ITL max':>8}")
    for label, r in results.items():
        t, i = r["ttft_error_ms"], r["itl_error_ms"]
        if not t.get("n"):
            print(f"{label:<20} {r['probes']:>6}  no matched probes")
            continue
        print(f"{label:<20} {r['probes']:>6} {t['p50']:>9.3f} {t['p99']:>9.3f} {t['max']:>9.3f} "
              f"{i['p50']:>8.3f} {i['p99']:>8.3f} {i['max']:>8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
