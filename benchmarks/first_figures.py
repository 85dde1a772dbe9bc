"""How soon `lpxtop URL` shows its first frame, and its first figures, in a real terminal.

A user starts `lpxtop http://127.0.0.1:PORT/v1` against a server that answers and waits for numbers. This
script starts `python -m lpxtop sim` on a free loopback port, then, `--runs` times (10), starts the
dashboard in a detached tmux terminal of its own (a private socket, `--cols`x`--rows`, 120x40) and
polls `tmux capture-pane` every few milliseconds (a bounded poll) for

  - the first frame: the endpoints table's title on screen;
  - the first figures: a number in the endpoint's row (its TTFT p50), where `--` stood before;

each timed from the moment the dashboard's process was asked to start, with the CPU time the process
had used by then (steadier than the wall clock when other work shares the machine). It prints every
run and the median, min and max of each. `--cwd DIR` runs the lpxtop of another checkout (`python -m lpxtop` puts the
current directory first on its path), e.g. a worktree of main for a before/after.

usage: python benchmarks/first_figures.py [--runs 10] [--cols 120 --rows 40] [--cwd DIR] [--baseline DIR] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

POLL_S = 0.02  # each poll starts a tmux client: every 20 ms is fine-grained enough for a 1 s target
RUN_TIMEOUT_S = 20.0
SIM_START_TIMEOUT_S = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise SystemExit(f"the simulator did not listen on 127.0.0.1:{port} within {timeout_s:g} s")


class Tmux:
    """A tmux server on a socket of our own, so nobody else's sessions are touched."""

    def __init__(self) -> None:
        self.socket = f"lpxtop-first-{os.getpid()}"
        # a session that lives as long as the benchmark, so the server does not exit between runs
        self.run("new-session", "-d", "-s", "keeper", "-x", "20", "-y", "5", "sleep 3600")

    def run(self, *args: str, check: bool = True) -> str:
        out = subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args], capture_output=True, text=True,
                             timeout=10, check=check)
        return out.stdout

    def capture(self, name: str) -> str:
        return self.run("capture-pane", "-p", "-t", name, check=False)

    def shutdown(self) -> None:
        self.run("kill-server", check=False)
        with contextlib.suppress(OSError):  # tmux may leave its socket file behind
            (Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / self.socket).unlink()


def figures_pattern(name: str) -> re.Pattern[str]:
    """A number after the endpoint's name in its row (the server kind column may come between)."""
    return re.compile(rf"{re.escape(name)}\s+(?:[A-Za-z][\w.-]*\s+)?\d")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (0 if it is gone): less swayed by a busy machine than
    the wall clock, so it compares two checkouts even when other work shares the CPUs."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def one_run(tmux: Tmux, session: str, command: str, cwd: str, name: str, cols: int, rows: int) -> tuple[float, ...]:
    """(first frame s, first figures s, CPU s at the first frame, CPU s at the first figures) of one start."""
    figures = figures_pattern(name)
    frame_s = figures_s = None
    frame_cpu = figures_cpu = 0.0
    t0 = time.perf_counter()
    tmux.run("new-session", "-d", "-s", session, "-x", str(cols), "-y", str(rows), "-c", cwd, command)
    pid = int(tmux.run("list-panes", "-t", session, "-F", "#{pane_pid}").split()[0])
    try:
        while time.perf_counter() - t0 < RUN_TIMEOUT_S:
            screen = tmux.capture(session)
            now = time.perf_counter() - t0
            if frame_s is None and "Endpoints" in screen:
                frame_s, frame_cpu = now, cpu_s(pid)
            if frame_s is not None and figures.search(screen):
                figures_s, figures_cpu = now, cpu_s(pid)
                break
            time.sleep(POLL_S)
    finally:
        tmux.run("kill-session", "-t", session, check=False)
    if frame_s is None or figures_s is None:
        raise SystemExit(f"{session}: no {'frame' if frame_s is None else 'figures'} within {RUN_TIMEOUT_S:g} s; "
                         f"the screen:\n{screen}")
    return frame_s, figures_s, frame_cpu, figures_cpu


KEYS = ("first_frame_s", "first_figures_s", "cpu_at_first_frame_s", "cpu_at_first_figures_s")


def summarize(results: list[tuple[float, ...]]) -> dict:
    out: dict = {}
    for i, key in enumerate(KEYS):
        values = [r[i] for r in results]
        out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return {**out, "each": results}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--cols", type=int, default=120)
    parser.add_argument("--rows", type=int, default=40)
    parser.add_argument("--cwd", default=str(Path(__file__).resolve().parents[1]),
                        help="the checkout whose lpxtop runs (default: this one)")
    parser.add_argument("--baseline", metavar="DIR",
                        help="another checkout (a worktree of main) measured in the same session, run for run "
                        "alternating with --cwd, so both see the same machine; ratios printed")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    port = free_port()
    name = f"127.0.0.1:{port}"
    python = sys.executable
    sim = subprocess.Popen([python, "-m", "lpxtop", "sim", "--port", str(port)], cwd=args.cwd,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tmux = Tmux()
    checkouts = {"this": args.cwd, **({"baseline": args.baseline} if args.baseline else {})}
    results: dict[str, list[tuple[float, ...]]] = {label: [] for label in checkouts}
    try:
        wait_listening(port, SIM_START_TIMEOUT_S)
        # as installed: bytecode cached (pip compiles it; an environment with PYTHONDONTWRITEBYTECODE would
        # compile every module at every start, which no user's install does)
        env = "env -u NO_COLOR -u PYTHONDONTWRITEBYTECODE TERM=xterm-256color"
        command = f"exec {env} {shlex.quote(python)} -m lpxtop http://{name}/v1 --no-discover"
        for label, cwd in checkouts.items():  # a first run each, not counted: bytecode caches, page cache
            one_run(tmux, f"warmup-{label}", command, cwd, name, args.cols, args.rows)
        for index in range(args.runs):
            for label, cwd in checkouts.items():
                run = one_run(tmux, f"run{index}-{label}", command, cwd, name, args.cols, args.rows)
                results[label].append(run)
                if not args.json:
                    print(f"run {index + 1:2d} {label:8s}: first frame {run[0]:.3f} s, first figures {run[1]:.3f} s "
                          f"(CPU {run[2]:.2f} s, {run[3]:.2f} s)", flush=True)
    finally:
        tmux.shutdown()
        sim.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            sim.wait(10)
        if sim.poll() is None:
            sim.kill()
    summary = {"runs": args.runs, "terminal": f"{args.cols}x{args.rows}", "load_avg_1m": os.getloadavg()[0],
               "checkouts": checkouts, **{label: summarize(r) for label, r in results.items()}}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    for label in checkouts:
        for key, what in zip(KEYS, ("first frame  ", "first figures", "CPU at frame ", "CPU at figures")):
            s = summary[label][key]
            ratio = ""
            if label == "this" and "baseline" in summary:
                ratio = f"; {s['median'] / summary['baseline'][key]['median']:.2f}x the baseline's"
            print(f"{label:8s} {what}: median {s['median']:.3f} s (min {s['min']:.3f}, max {s['max']:.3f}){ratio}")
    print(f"{args.runs} runs each, {summary['terminal']}, load average {summary['load_avg_1m']:.2f} (1 min) on "
          f"{os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
