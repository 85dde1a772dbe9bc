#!/usr/bin/env python3
"""What recording costs: bytes per hour on disk, and the CPU the recorder adds to lpxtop.

Four simulated servers (`lpxtop sim`, one process each, with background load) are watched at default
settings (a 16-token probe every 2 s each, /metrics every 2 s, host and ports every 5 s) by two
children started together, so both see the same machine:

  engine     the engine alone (`build_engine`), as `lpxtop once`'s engine or the dashboard's without UI
  recording  the same engine with the recorder attached, as `lpxtop record` runs it

With `--gpu sim` (the default) both also read the demo's simulated GPU once a second, as on a box with
one GPU; `--gpu none` leaves GPU readings out (a box without a driver records no GPU events).

Figures:
  - bytes/hour: the growth of the pages that hold data (SQLite's page count less its free pages, the
    write-ahead log's pages included) between the end of the warm-up and the end, scaled to an hour;
    the compressed payload it holds (`Recorder.stored_bytes`); and the largest the write-ahead log
    file grew (it is folded into the file and reused, so it does not grow with the recording);
  - recorder CPU: the writer thread's own CPU time (`time.thread_time()` in the thread), which holds the
    encoding, compression, SQLite and retention, plus the listener's share on the engine's loop,
    estimated from the events it took and its cost per call (timed here in a loop);
  - process CPU of both children over the same seconds: their difference also holds the machine's
    noise, so read it as a check, not as the figure.

Run from the repository root with the project's Python:
    .venv/bin/python benchmarks/record_cost.py [--seconds 120] [--warmup 15] [--gpu sim|none] [--json]

Targets (docs/recording.md): <= 5 MB per hour for 4 endpoints at default settings, <= 0.3 % of a core added.
On a shared machine the CPU figures move between runs; take final figures on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.sim_processes import REPO, sim_processes, stop_process

TARGET_MB_PER_HOUR = 5.0
TARGET_CPU_PCT = 0.3
CLK_TCK = os.sysconf("SC_CLK_TCK")

CHILD = """\
import json, os, sys, time, threading
from lpxtop.cli.assemble import build_engine
from lpxtop.config import endpoints_from_urls
mode, gpu_mode, path, seconds, warmup = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
urls = sys.argv[6:]
endpoints = endpoints_from_urls(urls)
gpu = None
if gpu_mode == "sim":
    from lpxtop.engine.gpu.simulated import SimulatedGpuCollector
    gpu = SimulatedGpuCollector(kv_usage=lambda: 0.4)
engine = build_engine(endpoints, gpu=gpu)
recorder = None
if mode == "recording":
    from lpxtop.record.recorder import Recorder
    recorder = Recorder.start_for(engine, path, endpoints=endpoints, strict=True)
engine.start()
def size():
    total = 0
    for suffix in ("", "-wal"):
        try:
            total += os.path.getsize(path + suffix)
        except OSError:
            pass
    return total
def in_use():
    # pages holding data (the write-ahead log's included, free pages not), as a reader sees the file now
    import sqlite3
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        pages, free, size = (db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "freelist_count", "page_size"))
        db.close()
        return (pages - free) * size
    except Exception:
        return 0
def writer_cpu():
    # the writer thread's own time.thread_time(), kept by the recorder after each pass
    return recorder.writer_cpu_s if recorder else 0.0
wal_max = [0]
def watch_wal():
    while True:
        try:
            wal_max[0] = max(wal_max[0], os.path.getsize(path + "-wal"))
        except OSError:
            pass
        time.sleep(1.0)
threading.Thread(target=watch_wal, daemon=True).start()
time.sleep(warmup)
mark = {"t": time.monotonic(), "size": size(), "in_use": in_use(), "writer": writer_cpu(),
        "events": recorder.events_written if recorder else 0, "stored": recorder.stored_bytes if recorder else 0}
print("WARM", flush=True)
time.sleep(seconds)
end = {"t": time.monotonic(), "size": size(), "in_use": in_use(), "writer": writer_cpu(),
       "events": recorder.events_written if recorder else 0, "stored": recorder.stored_bytes if recorder else 0}
engine.stop()
if recorder:
    recorder.close()
print("RESULT " + json.dumps({"mark": mark, "end": end, "final_size": size(), "wal_max": wal_max[0],
                              "final_stored": recorder.stored_bytes if recorder else 0}), flush=True)
"""


def process_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def listener_cost_ns(calls: int = 200_000) -> float:
    """The recorder's listener on the engine's loop: one stamp and one append, per event."""
    from lpxtop.model.events import SampleEvent
    from lpxtop.model.probe import Sample
    from lpxtop.record.recorder import Recorder

    recorder = Recorder.__new__(Recorder)
    recorder._init_failed(Path("/nonexistent"), "", None)
    recorder.failure = None
    event = SampleEvent("e", Sample(endpoint="e", wall_time=0.0, start_ns=0, ok=True))
    on_event = recorder.on_event
    began = time.perf_counter_ns()
    for _ in range(calls):
        on_event(event)
        if len(recorder._pending) > 10_000:
            recorder._pending.clear()
    return (time.perf_counter_ns() - began) / calls


def run(args) -> dict:
    with sim_processes(args.endpoints, model=lambda i: f"sim-rec-{i + 1}", background_load="2,12,60") as sims, \
            tempfile.TemporaryDirectory(prefix="lpxtop-record-cost-") as tmp:
        children = {}
        for mode in ("engine", "recording"):
            path = str(Path(tmp) / f"{mode}.lpxrec")
            children[mode] = subprocess.Popen(
                [sys.executable, "-c", CHILD, mode, args.gpu, path, str(args.seconds), str(args.warmup), *sims.urls],
                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
        try:
            for proc in children.values():
                line = proc.stdout.readline()
                if not line.startswith("WARM"):
                    raise RuntimeError(f"a child failed: {line}{proc.stderr.read()[-2000:]}")
            began = {mode: process_cpu_s(proc.pid) for mode, proc in children.items()}
            t0 = time.monotonic()
            load0 = os.getloadavg()[0]
            time.sleep(args.seconds - 0.5)
            cpu = {mode: process_cpu_s(proc.pid) - began[mode] for mode, proc in children.items()}
            elapsed = time.monotonic() - t0
            results = {}
            for mode, proc in children.items():
                out, err = proc.communicate(timeout=args.seconds + 60)
                line = next((ln for ln in out.splitlines() if ln.startswith("RESULT ")), None)
                if line is None:
                    raise RuntimeError(f"{mode} child: no result: {err[-2000:]}")
                results[mode] = json.loads(line[len("RESULT "):])
        finally:
            for proc in children.values():
                stop_process(proc)
    rec = results["recording"]
    span = rec["end"]["t"] - rec["mark"]["t"]
    growth = rec["end"]["in_use"] - rec["mark"]["in_use"]
    stored = rec["end"]["stored"] - rec["mark"]["stored"]
    writer_s = rec["end"]["writer"] - rec["mark"]["writer"]
    events = rec["end"]["events"] - rec["mark"]["events"]
    listener_ns = listener_cost_ns()
    # snapshots are handed to the listener too (2 a second) besides the recorded events
    listener_pct = 100 * (events + 2 * span) * listener_ns / 1e9 / span
    return {
        "seconds": round(span, 1),
        "endpoints": args.endpoints,
        "gpu": args.gpu,
        "file_growth_mb_per_hour": round(growth / span * 3600 / 1e6, 2),
        "stored_mb_per_hour": round(stored / span * 3600 / 1e6, 2),
        "file_bytes_at_end": rec["final_size"],
        "wal_bytes_max": rec["wal_max"],
        "events_per_s": round(events / span, 2),
        "writer_thread_cpu_pct": round(100 * writer_s / span, 3),
        "listener_ns_per_event": round(listener_ns, 1),
        "listener_cpu_pct": round(listener_pct, 4),
        "recorder_cpu_pct": round(100 * writer_s / span + listener_pct, 3),
        "process_cpu_pct": {mode: round(100 * c / elapsed, 2) for mode, c in cpu.items()},
        "process_cpu_difference_pct": round(100 * (cpu["recording"] - cpu["engine"]) / elapsed, 2),
        "load_average_at_start": round(load0, 2),
    }


def render(r: dict) -> str:
    ok_size = "meets" if r["file_growth_mb_per_hour"] <= TARGET_MB_PER_HOUR else "MISSES"
    ok_cpu = "meets" if r["recorder_cpu_pct"] <= TARGET_CPU_PCT else "MISSES"
    return "\n".join([
        f"recording {r['endpoints']} endpoints at default settings, GPU {r['gpu']}, {r['seconds']} s measured "
        f"(load average {r['load_average_at_start']} at the start)",
        f"  file growth        {r['file_growth_mb_per_hour']:.2f} MB/hour  ({ok_size} the {TARGET_MB_PER_HOUR:g} MB/h "
        f"target); the write-ahead log beside it peaked at {r['wal_bytes_max'] / 1e6:.2f} MB",
        f"  compressed payload {r['stored_mb_per_hour']:.2f} MB/hour  ({r['events_per_s']} events/s)",
        f"  recorder CPU       {r['recorder_cpu_pct']:.3f} % of a core  ({ok_cpu} the {TARGET_CPU_PCT:g} % target): "
        f"writer thread {r['writer_thread_cpu_pct']:.3f} %, listener {r['listener_cpu_pct']:.4f} % "
        f"({r['listener_ns_per_event']:.0f} ns an event)",
        f"  whole processes    engine {r['process_cpu_pct']['engine']:.2f} %, engine + recorder "
        f"{r['process_cpu_pct']['recording']:.2f} %, difference {r['process_cpu_difference_pct']:+.2f} % "
        "(includes the machine's noise)",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=120.0, help="measured seconds (default 120)")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds before measuring (default 15)")
    parser.add_argument("--endpoints", type=int, default=4, help="simulated servers (default 4)")
    parser.add_argument("--gpu", choices=("sim", "none"), default="sim", help="simulated GPU, or none (default sim)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = parser.parse_args(argv)
    result = run(args)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
