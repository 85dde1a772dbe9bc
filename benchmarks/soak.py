#!/usr/bin/env python3
"""Does lpxtop stay up, and stay the same size, while every server it watches misbehaves for an hour?

Ten endpoints, each a loopback port whose occupant changes every --flap-s seconds (the ports out of
step with each other), in this rotation:

  sim        a healthy `lpxtop sim` process (light background load)
  faults     the same sim with one fault at a time, rotating: HTTP 500, 429 with Retry-After, a stall
             mid-stream longer than lpxtop's read timeout, an error event, a cut stream, bad JSON,
             headers late, an empty answer
  killed     the sim SIGKILLed: nothing listens (connection refused)
  squatter   another process holds the port: it accepts, reads, and never answers (a hang, cut only by
             lpxtop's own timeouts); then a new sim takes the port again (a server restart: counters
             start from zero)

lpxtop's real engine (probes, /metrics scrapes, host and port checks; no UI) runs in a child process
that reports every --report-s: its RSS, asyncio tasks, open file descriptors, threads, and for each
endpoint the probes sent and whether its probe loop is alive. The parent prints one line per report
and, at the end, checks:

  RSS          growth <= 5 MB from the end of the warm-up (5 minutes, or a third of a shorter run)
  tasks, fds   flat: the most seen in the last half after warm-up at most the most seen in the first
               half plus a small slack (probes and scrapes in flight come and go; a leak keeps growing)
  probe loops  none lost: every loop alive at every report, and every endpoint probed in every period

    .venv/bin/python benchmarks/soak.py --minutes 60          # the real soak
    .venv/bin/python benchmarks/soak.py --minutes 3 --flap-s 10   # a short look that it works

Exit status 0 when every check passes, 1 otherwise. Everything listens on and talks to 127.0.0.1 only,
and every process it starts is stopped on the way out (Ctrl-C included). Figures on a machine shared
with other work are noisy: the lead reruns the hour on a quiet one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.sim_processes import stop_process

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

RSS_GROWTH_LIMIT_MB = 5.0
FLAT_SLACK = 4  # tasks or fds that may come and go on top of the early maximum (probes, scrapes in flight)
# An endpoint probes at least this often: the schedule's longest gap (10 means of 2 s), the longest
# probe (the 5-s timeout set below), and some room for a loaded machine.
LIVENESS_S = 40.0
FAULTS: tuple[dict, ...] = (
    {"fail_rate": 1.0},
    {"rate_limit": True},
    {"stall_after_tokens": 2, "stall_s": 8.0},
    {"error_event_after_tokens": 3},
    {"cut_after_tokens": 2},
    {"bad_json": True},
    {"slow_headers_s": 4.0},
    {"empty": True},
)
PHASES = ("sim", "faults", "killed", "squatter")
SQUATTER = """
import socket, sys, threading, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
print("listening", flush=True)
held = []
while True:
    conn, _ = s.accept()
    held.append(conn)  # read nothing back, answer nothing: a hang
    if len(held) > 512:
        held.pop(0).close()
"""


# ---- the checks (also used by the short version in the main suite) ----

def check(reports: Sequence[dict], warmup_s: float, *, rss_limit_mb: float = RSS_GROWTH_LIMIT_MB,
          slack: int = FLAT_SLACK, liveness_s: float = LIVENESS_S) -> list[str]:
    """The failed checks (empty when all pass) over the child's reports, each a dict with `t`, `rss_mb`,
    `tasks`, `fds`, `loops_alive`, `endpoints` and `sent` (probes sent per endpoint). Every endpoint
    must have probed within every `liveness_s` (the longest gap the schedule allows plus the longest
    probe)."""
    failures: list[str] = []
    after = [r for r in reports if r["t"] >= warmup_s]
    if len(after) < 3:
        return [f"too few reports after the warm-up ({len(after)}): run longer"]
    base = after[0]
    growth = max(r["rss_mb"] for r in after) - base["rss_mb"]
    if growth > rss_limit_mb:
        failures.append(f"RSS grew {growth:.1f} MB after the warm-up (limit {rss_limit_mb:g} MB)")
    half = len(after) // 2
    for key in ("tasks", "fds"):
        early = max(r[key] for r in after[:half])
        late = max(r[key] for r in after[half:])
        if late > early + slack:
            failures.append(f"{key} not flat: at most {early} in the first half after warm-up, {late} in the second")
    for r in reports:
        if r["loops_alive"] < r["endpoints"]:
            failures.append(f"t={r['t']:.0f} s: {r['endpoints'] - r['loops_alive']} probe loop(s) lost")
            break
    for r in after:
        earlier = [p for p in after if p["t"] <= r["t"] - liveness_s]
        if not earlier:
            continue
        previous = earlier[-1]
        idle = [name for name, n in r["sent"].items() if n <= previous["sent"].get(name, 0)]
        if idle:
            failures.append(f"t={r['t']:.0f} s: no probe for {r['t'] - previous['t']:.0f} s from {', '.join(sorted(idle))}")
            break
    return failures


# ---- the child: lpxtop's engine, reporting ----

def engine_report(engine, began: float) -> dict:
    """One report of a running Engine (any thread): size, tasks, fds, threads, probe loops."""
    import psutil

    async def tasks() -> int:
        return len(asyncio.all_tasks())

    loop_thread = engine._loop_thread
    count = loop_thread.run(tasks(), 10) if loop_thread is not None else -1
    states = list(engine._states.values())
    alive = sum(1 for s in states if s.tasks and not s.tasks[0].done())
    views = {v.name: v for v in engine.snapshot().endpoints}
    fd_dir = "/proc/self/fd"
    return {
        "t": round(time.monotonic() - began, 1),
        "rss_mb": round(psutil.Process().memory_info().rss / 2**20, 2),
        "tasks": count,
        "fds": len(os.listdir(fd_dir)) if os.path.isdir(fd_dir) else -1,
        "threads": threading.active_count(),
        "endpoints": len(states),
        "loops_alive": alive,
        "sent": {name: v.probes_sent for name, v in views.items()},
        "status": {name: v.status for name, v in views.items()},
    }


def child_main(urls: list[str], report_s: float, seconds: float) -> int:
    from lpxtop.cli.assemble import build_engine
    from lpxtop.config import endpoints_from_urls

    sys.setswitchinterval(0.001)
    endpoints = endpoints_from_urls(urls, timeout_s=5.0, first_token_timeout_s=3.0, connect_timeout_s=2.0)
    engine = build_engine(endpoints, scrape_metrics=True)
    began = time.monotonic()
    engine.start()
    try:
        while time.monotonic() - began < seconds:
            time.sleep(report_s - (time.monotonic() - began) % report_s)
            print(json.dumps(engine_report(engine, began)), flush=True)
    finally:
        engine.stop()
    return 0


# ---- the parent: the flapping ports ----

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Slot:
    """One port and whoever holds it now."""

    def __init__(self, index: int, workdir: Path, python: str) -> None:
        self.index = index
        self.port = free_port()
        self.workdir = workdir
        self.python = python
        self.proc: subprocess.Popen | None = None
        self.kind = "none"
        self.faults = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _post_faults(self, faults: dict) -> None:
        body = json.dumps(faults).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/sim/faults", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with contextlib.suppress(OSError):
            urllib.request.urlopen(request, timeout=5).read()

    def _start(self, argv: list[str], ready: Callable[[str], bool], kind: str) -> None:
        self.stop()
        log = open(self.workdir / f"slot{self.index}.log", "ab")  # noqa: SIM115 - kept open by the child
        self.proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                     start_new_session=True, text=True)
        log.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline() if self.proc.stdout else ""
            if ready(line):
                self.kind = kind
                return
            if self.proc.poll() is not None:
                break
        self.kind = f"{kind} (did not start)"

    def become(self, phase: str) -> None:
        if phase in ("sim", "faults"):
            if self.kind != "sim":
                self._start([self.python, "-m", "lpxtop", "sim", "--port", str(self.port), "--model",
                             f"soak-{self.index}", "--background-load", "0,2,60", "--seed", str(self.index)],
                            lambda line: "serving" in line, "sim")
            if phase == "faults":
                self._post_faults({"fail_rate": 0.0, **FAULTS[self.faults % len(FAULTS)]})
                self.faults += 1
            else:
                with contextlib.suppress(OSError):
                    urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{self.port}/sim/reset",
                                                                  data=b"", method="POST"), timeout=5).read()
        elif phase == "killed":
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()  # SIGKILL: no goodbye on the open connections
                self.proc.wait(5)
            self.kind = "killed"
        elif phase == "squatter":
            self._start([self.python, "-c", SQUATTER, str(self.port)], lambda line: "listening" in line, "squatter")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None


def run(minutes: float, endpoints: int, flap_s: float, report_s: float, python: str) -> int:
    seconds = minutes * 60
    warmup_s = min(300.0, seconds / 3)
    with tempfile.TemporaryDirectory(prefix="lpxtop-soak-") as tmp:
        slots = [Slot(i, Path(tmp), python) for i in range(endpoints)]
        child = None
        try:
            for slot in slots:
                slot.become("sim")
            print(f"soak: {endpoints} endpoints flapping every {flap_s:g} s for {minutes:g} min; warm-up "
                  f"{warmup_s:.0f} s; a report every {report_s:g} s", flush=True)
            child = subprocess.Popen([python, __file__, "--child", "--report-s", str(report_s), "--seconds",
                                      str(seconds), *(s.url for s in slots)], stdout=subprocess.PIPE, text=True,
                                     cwd=REPO)
            reports: list[dict] = []
            lines: list[str] = []
            reader = threading.Thread(target=lambda: lines.extend(iter(child.stdout.readline, "")), daemon=True)
            reader.start()
            began = time.monotonic()
            step = 0
            print(f"{'t s':>6} {'RSS MB':>7} {'tasks':>5} {'fds':>4} {'thr':>4} {'loops':>6} {'probes':>7}  "
                  "up/degraded/down  ports now", flush=True)
            while child.poll() is None:
                now = time.monotonic() - began
                # every flap_s / endpoints seconds, the next port moves on to its next phase
                while step * flap_s / endpoints <= now:
                    slot = slots[step % endpoints]
                    slot.become(PHASES[(step // endpoints + slot.index) % len(PHASES)])
                    step += 1
                while lines:
                    r = json.loads(lines.pop(0))
                    reports.append(r)
                    statuses = list(r["status"].values())
                    counts = "/".join(str(statuses.count(s)) for s in ("up", "degraded", "down"))
                    kinds = ",".join(sorted({s.kind.split(" ")[0] for s in slots}))
                    print(f"{r['t']:>6.0f} {r['rss_mb']:>7.1f} {r['tasks']:>5} {r['fds']:>4} {r['threads']:>4} "
                          f"{r['loops_alive']:>3}/{r['endpoints']:<2} {sum(r['sent'].values()):>7}  {counts:>16}  "
                          f"{kinds}", flush=True)
                time.sleep(0.2)
            reader.join(5)
            for line in lines:
                reports.append(json.loads(line))
        finally:
            if child is not None:
                stop_process(child)
            for slot in slots:
                slot.stop()
    failures = check(reports, warmup_s)
    if reports:
        after = [r for r in reports if r["t"] >= warmup_s] or reports
        print(f"RSS {after[0]['rss_mb']:.1f} MB after warm-up, {max(r['rss_mb'] for r in after):.1f} MB at most; "
              f"tasks {min(r['tasks'] for r in after)}-{max(r['tasks'] for r in after)}, "
              f"fds {min(r['fds'] for r in after)}-{max(r['fds'] for r in after)}; "
              f"{sum(reports[-1]['sent'].values())} probes")
    for failure in failures:
        print(f"FAIL: {failure}")
    print("soak: all checks passed" if not failures else f"soak: {len(failures)} check(s) failed")
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=60.0, help="how long (default 60)")
    parser.add_argument("--endpoints", type=int, default=10, help="flapping endpoints (default 10)")
    parser.add_argument("--flap-s", type=float, default=30.0, help="seconds each port keeps one occupant (default 30)")
    parser.add_argument("--report-s", type=float, default=30.0, help="seconds between reports (default 30)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("urls", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args.urls, args.report_s, args.seconds)
    return run(args.minutes, args.endpoints, args.flap_s, args.report_s, sys.executable)


if __name__ == "__main__":
    sys.exit(main())
