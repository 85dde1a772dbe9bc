"""A probe's timestamp error while the OTLP receiver takes a flood of spans, against none.

The receiver runs either as a thread of the engine's process (TraceReceiver: its own loop, but the
interpreter lock is shared) or in its own process (TraceReceiverProcess, what lpxtop's commands run:
the engine's process only takes the read segments off a pipe). This script runs lpxtop's engine
against the simulator (its own process), matches each probe to the simulator's record and prints
measured-minus-true TTFT and ITL (|error| p50, p99, max, ms) and the engine process's CPU, for:

  - engine alone;
  - + the receiver as a thread: idle, then while another process POSTs `--rate` vLLM `llm_request`
    spans a second (default 1,000, in batches of 100 every 0.1 s, protobuf), all read and joined;
  - + the receiver as a process: idle, at `--rate`, and at 5x the rate.

usage: python benchmarks/traces_flood.py [--seconds 20] [--interval 0.25] [--rate 1000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request

from benchmarks.fidelity import errors, make_engine, sim_process, summary
from lpxtop.engine.traces import ReceiverSettings, TraceJoin, TraceReceiver, TraceReceiverProcess

BATCH = 100


def flood(url: str, rate: float, seconds: float) -> int:
    """(In a child process) POST `rate` spans a second to `url` for `seconds`; prints how many went."""
    from tests.support.traces_data import protobuf_body, vllm_span

    # a few bodies built up front and sent in turn: the flooder's own Python must not be what limits the rate
    bodies = [protobuf_body(*(vllm_span(os.urandom(16).hex()) for _ in range(BATCH))) for _ in range(20)]
    sent = 0
    period = BATCH / rate
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        body = bodies[(sent // BATCH) % len(bodies)]
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/x-protobuf"})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                response.read()
            sent += BATCH
        except OSError:
            pass
        next_at = start + (sent / BATCH + 1) * period
        time.sleep(max(0.0, next_at - time.monotonic()))
    print(sent)
    return 0


def run(url: str, seconds: float, interval: float, *, receiver: str | None, rate: float) -> dict:
    join = TraceJoin()
    kinds = {"thread": TraceReceiver, "process": TraceReceiverProcess}
    r = kinds[receiver](join, ReceiverSettings(port=0)) if receiver else None
    flooder = None
    if r is not None:
        r.start()
        if rate > 0:
            target = f"http://127.0.0.1:{r.address[1]}/v1/traces"
            flooder = subprocess.Popen([sys.executable, __file__, "--flood", target, "--rate", str(rate),
                                        "--seconds", str(seconds + 1)], stdout=subprocess.PIPE, text=True)
            time.sleep(1.0)  # the flood is under way before the first probe
    engine = make_engine(url, interval)
    cpu0 = time.process_time()
    wall0 = time.monotonic()
    try:
        with engine:
            time.sleep(seconds)
        cpu = (time.process_time() - cpu0) / (time.monotonic() - wall0) * 100.0
        samples = engine.snapshot().endpoints[0].samples
    finally:
        if flooder is not None:
            flooder.wait(seconds + 30)
        stats = r.stats() if r is not None else None
        if r is not None:
            r.stop()
    out = {"samples": samples, "cpu_percent": cpu}
    if stats is not None:
        out["spans_read"] = stats.spans_read
        out["spans_dropped"] = stats.dropped_total
        out["spans_per_s"] = stats.spans_read / (seconds + 1)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=0.25)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--switch-interval", type=float, default=None,
                        help="seconds (default: lpxtop's own, cli.SWITCH_INTERVAL_S, as the dashboard and once set it)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--flood", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flood:
        return flood(args.flood, args.rate, args.seconds)
    from lpxtop.cli.common import SWITCH_INTERVAL_S

    sys.setswitchinterval(args.switch_interval if args.switch_interval is not None else SWITCH_INTERVAL_S)
    results = {}
    with sim_process() as base_url:
        url = base_url + "/v1"
        conditions = (
            ("engine alone", None, 0.0),
            ("thread, idle", "thread", 0.0),
            (f"thread, {args.rate:g}/s", "thread", args.rate),
            ("process, idle", "process", 0.0),
            (f"process, {args.rate:g}/s", "process", args.rate),
            (f"process, {5 * args.rate:g}/s", "process", 5 * args.rate),
        )
        for label, receiver, rate in conditions:
            r = run(url, args.seconds, args.interval, receiver=receiver, rate=rate)
            ttft, itl, skipped = errors(r.pop("samples"), base_url)
            results[label] = {**r, "unmatched": skipped, "ttft_error_ms": summary(ttft),
                              "itl_error_ms": summary(itl)}
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"|measured - true| in ms, {args.seconds:g} s per run, a probe every {args.interval:g} s, "
          f"switch interval {sys.getswitchinterval() * 1000:g} ms, simulator and flooder in their own processes; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'receiver, spans':<22} {'probes':>6} {'TTFT p50':>9} {'TTFT p99':>9} {'TTFT max':>9} {'ITL p99':>8} "
          f"{'ITL max':>8} {'CPU %':>6} {'spans/s read':>13} {'dropped':>8}")
    for label, r in results.items():
        t, i = r["ttft_error_ms"], r["itl_error_ms"]
        if not t.get("n"):
            print(f"{label:<22} no matched probes")
            continue
        spans = f"{r['spans_per_s']:>13.0f} {r['spans_dropped']:>8}" if "spans_read" in r else f"{'':>13} {'':>8}"
        print(f"{label:<22} {t['n']:>6} {t['p50']:>9.3f} {t['p99']:>9.3f} {t['max']:>9.3f} {i['p99']:>8.3f} "
              f"{i['max']:>8.3f} {r['cpu_percent']:>6.1f} {spans}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
