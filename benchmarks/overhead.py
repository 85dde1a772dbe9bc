#!/usr/bin/env python3
"""How heavy is lpxtop itself? CPU and memory of the dashboard, the headless engine and peer monitors.

A monitor that itself loads the inference host is a bad monitor, so this script starts simulated
servers (`lpxtop sim`, one process each, with background load), points each tool at them with its
default settings, lets it warm up, then samples the tool's process tree every second:
`cpu_times()` (user + system, reaped children included) and `memory_info().rss` (summed over the
tree). Terminal UIs run in a real (detached) tmux terminal, 160x48, on a tmux server of their own.

Rows:
  lpxtop (dashboard)   `python -m lpxtop URL... --no-discover` in tmux
  lpxtop engine only   a small Python child that starts `build_engine(...)` and sleeps: the UI's
                       share is the difference between the two rows
  vllm-mon, vllm-htop  peer vLLM monitors (PyPI), when installed; they only scrape /metrics, while
                       lpxtop also sends a streaming probe request to every endpoint every 2 s

Run it from the repository root with the project's Python (it needs psutil and lpxtop):
    .venv/bin/python benchmarks/overhead.py [--seconds 60] [--peer-venv /work/bench-venv] [--json]
Peers go in a separate venv, never the project's:
    python3 -m venv /work/bench-venv && /work/bench-venv/bin/pip install vllm-mon vllm-htop

Everything listens on and talks to 127.0.0.1 only. CPU figures on a shared machine are noisy: the
table says how busy the whole host was during each row; run it twice and compare.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

try:
    import psutil
except ImportError:  # pragma: no cover - psutil is an lpxtop dependency
    sys.exit("overhead.py: psutil is missing; run it with the project's Python (.venv/bin/python)")

from benchmarks.sim_processes import REPO, STOP_TIMEOUT_S, Sims, stop_process

TARGET_CPU_PCT = 2.0
TARGET_RSS_MB = 60.0
TERM_COLS, TERM_ROWS = 160, 48
MB = 1024 * 1024

# The engine without any UI: the same build_engine() call and defaults the CLI uses for URLs.
ENGINE_CHILD = """\
import sys, time
from lpxtop.cli.assemble import build_engine
from lpxtop.config import endpoints_from_urls
seconds = float(sys.argv[1])
engine = build_engine(endpoints_from_urls(sys.argv[2:]), discover=False)
engine.start()
try:
    time.sleep(seconds)
finally:
    engine.stop()
"""


@dataclass
class Measurement:
    """One tool's figures over the measured window (CPU in % of one core, memory in MB)."""

    tool: str
    version: str = ""
    command: str = ""
    note: str = ""
    status: str = "ok"  # "ok", "skipped: ...", "failed: ..."
    samples: int = 0
    cpu_pct_mean: float | None = None
    cpu_pct_p95: float | None = None
    cpu_pct_max: float | None = None
    rss_mb_mean: float | None = None
    rss_mb_peak: float | None = None
    rss_mb_per_min: float | None = None  # growth while measuring (least-squares slope): not yet steady
    processes: int = 0  # most processes seen in the tree at once
    host_busy_pct: float | None = None  # the whole machine, all cores, during the window
    sims_cpu_pct: float | None = None  # all sim processes together, % of one core
    cpu_ratio: float | None = None  # against lpxtop (dashboard)
    rss_ratio: float | None = None
    cpu_samples: list[float] = field(default_factory=list)
    rss_samples_mb: list[float] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile with linear interpolation (numpy's default), or None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def slope_per_min(values: list[float]) -> float | None:
    """Least-squares slope of 1-s samples, per minute; None for fewer than two."""
    n = len(values)
    if n < 2:
        return None
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    sxx = sum((x - mean_x) ** 2 for x in range(n))
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(values))
    return 60.0 * sxy / sxx


def _tree(root_pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(root_pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _read_tree(root_pid: int) -> tuple[dict[tuple[int, float], float], float] | None:
    """CPU seconds per live process of the tree (keyed by pid and start time) and the tree's RSS."""
    cpu: dict[tuple[int, float], float] = {}
    rss = 0
    for proc in _tree(root_pid):
        try:
            with proc.oneshot():
                t = proc.cpu_times()
                key = (proc.pid, proc.create_time())
                cpu[key] = t.user + t.system + t.children_user + t.children_system
                rss += proc.memory_info().rss
        except psutil.Error:
            continue  # exited between listing and reading
    if not cpu:
        return None
    return cpu, rss / MB


def _cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
    return total


def sample_tree(root_pid: int, seconds: int, sim_pids: list[int], m: Measurement) -> None:
    """Fill `m` with 1-s samples of the process tree under `root_pid`, `seconds` of them at most."""
    first = _read_tree(root_pid)
    if first is None:
        m.status = "failed: the process was gone before measuring started"
        return
    last_cpu, _ = first
    psutil.cpu_percent(None)  # starts the host-wide busy counter
    sims_before = _cpu_seconds(sim_pids)
    start = last_t = time.monotonic()
    for i in range(1, seconds + 1):
        time.sleep(max(0.0, start + i - time.monotonic()))
        reading = _read_tree(root_pid)
        now = time.monotonic()
        if reading is None:
            m.status = f"failed: the process exited after {i - 1} s of measuring"
            break
        cpu, rss_mb = reading
        # A process first seen now started after the previous sample: all its CPU time is new.
        used = sum(max(0.0, v - last_cpu.get(k, 0.0)) for k, v in cpu.items())
        m.cpu_samples.append(100.0 * used / (now - last_t))
        m.rss_samples_mb.append(rss_mb)
        m.processes = max(m.processes, len(cpu))
        last_cpu, last_t = cpu, now
    elapsed = last_t - start
    m.samples = len(m.cpu_samples)
    m.host_busy_pct = psutil.cpu_percent(None)
    if elapsed > 0:
        m.sims_cpu_pct = 100.0 * (_cpu_seconds(sim_pids) - sims_before) / elapsed
    if m.cpu_samples:
        m.cpu_pct_mean = sum(m.cpu_samples) / len(m.cpu_samples)
        m.cpu_pct_p95 = percentile(m.cpu_samples, 95)
        m.cpu_pct_max = max(m.cpu_samples)
        m.rss_mb_mean = sum(m.rss_samples_mb) / len(m.rss_samples_mb)
        m.rss_mb_peak = max(m.rss_samples_mb)
        m.rss_mb_per_min = slope_per_min(m.rss_samples_mb)


def wait_gone(pid: int) -> None:
    """Wait (bounded) for a process we started to exit; SIGKILL it if it lingers."""
    try:
        proc = psutil.Process(pid)
        proc.wait(STOP_TIMEOUT_S)
    except psutil.TimeoutExpired:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    except psutil.Error:
        pass


class Tmux:
    """A tmux server of our own (its own socket), so nobody else's sessions are touched."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.socket = f"lpxtop-overhead-{os.getpid()}"
        self.env = env
        self.conf = workdir / "tmux.conf"
        # A dead pane stays, so a tool that exits at once leaves its message to read.
        self.conf.write_text("set -g remain-on-exit on\nset -g history-limit 1000\n")
        self.started = False

    def _run(self, *args: str, check: bool = True) -> str:
        cmd = ["tmux", "-L", self.socket, "-f", str(self.conf), *args]
        out = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=15, check=check)
        return out.stdout

    def open(self, name: str, command: str, cwd: Path) -> int:
        """Start `command` in a detached 160x48 session; return the pane's pid (the tool, via exec)."""
        self._run("new-session", "-d", "-s", name, "-x", str(TERM_COLS), "-y", str(TERM_ROWS), "-c", str(cwd),
                  command)
        self.started = True
        return int(self._run("list-panes", "-t", name, "-F", "#{pane_pid}").split()[0])

    def pane_dead(self, name: str) -> bool:
        out = self._run("list-panes", "-t", name, "-F", "#{pane_dead}", check=False).strip()
        return out != "0"

    def capture(self, name: str) -> str:
        return self._run("capture-pane", "-p", "-t", name, check=False)

    def close(self, name: str) -> None:
        self._run("kill-session", "-t", name, check=False)

    def shutdown(self) -> None:
        if self.started:
            with contextlib.suppress(Exception):
                self._run("kill-server", check=False)
        with contextlib.suppress(OSError):  # tmux may leave its socket file behind
            (Path(self.env.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / self.socket).unlink()


def _version_of(exe: str, distribution: str) -> str:
    """The installed version: from the venv's package metadata (vllm-mon's --version is broken), else --version."""
    python = Path(exe).parent / "python"
    probes = [[str(python), "-c", f"import importlib.metadata as m; print(m.version({distribution!r}))"]]
    probes.append([exe, "--version"])
    for argv in probes:
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            continue
        found = re.fullmatch(r"\s*(?:\S+ )?(\d+\.\d+(?:\.\d+)?\S*)\s*", out.stdout) if out.returncode == 0 else None
        if found:
            return found.group(1)
    return ""


def find_peer(names: list[str], peer_venv: str | None) -> str | None:
    """The first executable of `names` in --peer-venv, else on PATH, ./bench-venv or $LPXTOP_PEER_VENV."""
    if peer_venv:
        dirs = [Path(peer_venv) / "bin"]
    else:
        dirs = [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
        dirs.append(Path.cwd() / "bench-venv" / "bin")
        if os.environ.get("LPXTOP_PEER_VENV"):
            dirs.append(Path(os.environ["LPXTOP_PEER_VENV"]) / "bin")
    for name in names:
        for d in dirs:
            exe = d / name
            if exe.is_file() and os.access(exe, os.X_OK):
                return str(exe)
    return None


def run_in_tmux(tmux: Tmux, m: Measurement, name: str, command: str, cwd: Path, args, sims: Sims) -> None:
    m.command = command
    pid = tmux.open(name, f"exec {command}", cwd)
    try:
        time.sleep(args.warmup)
        if tmux.pane_dead(name):
            m.status = "failed: exited during warm-up: " + " ".join(tmux.capture(name).split())[-300:]
            return
        sample_tree(pid, args.seconds, sims.pids, m)
        if m.status.startswith("failed"):
            m.status += ": " + " ".join(tmux.capture(name).split())[-300:]
    finally:
        tmux.close(name)
        wait_gone(pid)


def run_engine_only(m: Measurement, python: str, args, sims: Sims, workdir: Path, env: dict[str, str]) -> None:
    lifetime = args.warmup + args.seconds + 30  # bounded even if we were killed without cleanup
    argv = [python, "-c", ENGINE_CHILD, str(lifetime), *sims.urls]
    m.command = f"{python} -c '<build_engine(endpoints_from_urls(URLS)); start; sleep>' " + " ".join(sims.urls)
    with open(workdir / "engine.log", "wb") as log:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(args.warmup)
        if proc.poll() is not None:
            tail = (workdir / "engine.log").read_text(errors="replace")[-300:]
            m.status = f"failed: exited during warm-up ({proc.returncode}): {tail.strip()}"
            return
        sample_tree(proc.pid, args.seconds, sims.pids, m)
    finally:
        stop_process(proc)


def measure_all(args) -> tuple[list[Measurement], dict]:
    python = sys.executable
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_CONNECTION", "SSH_CLIENT", "SSH_TTY")}
    # Local defaults (over SSH lpxtop turns animation off), no colour override, no Textual devtools.
    env.pop("TEXTUAL", None)
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    results: list[Measurement] = []
    with tempfile.TemporaryDirectory(prefix="lpxtop-overhead-") as tmp:
        workdir = Path(tmp)
        sims = Sims(workdir, python)
        tmux = Tmux(workdir, env)
        try:
            log(f"starting {args.endpoints} sim processes (background load {args.background_load}) ...")
            sims.start(args.endpoints, args.background_load)
            info = {"endpoints": sims.urls, "seconds": args.seconds, "warmup_s": args.warmup,
                    "background_load": args.background_load, "terminal": f"{TERM_COLS}x{TERM_ROWS}",
                    "cpu_count": psutil.cpu_count(), "python": sys.version.split()[0]}
            for tool in tools:
                m = measure_one(tool, args, tmux, sims, workdir, python, env)
                results.append(m)
        finally:
            # A second Ctrl-C must not cut the (bounded) cleanup short.
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                tmux.shutdown()
                sims.stop()
            finally:
                signal.signal(signal.SIGINT, previous)
    return results, info


def measure_one(tool: str, args, tmux: Tmux, sims: Sims, workdir: Path, python: str, env) -> Measurement:
    from lpxtop import __version__

    secs = f"{args.seconds} s after {args.warmup:g} s warm-up"
    if tool == "lpxtop":
        m = Measurement("lpxtop (dashboard)", __version__, note=f"{len(sims.urls)} endpoints, probes + /metrics")
        if shutil.which("tmux", path=env.get("PATH")) is None:
            m.status = "skipped: tmux is not installed"
            return m
        log(f"measuring lpxtop dashboard ({secs}) ...")
        extra = shlex.split(args.lpxtop_args)
        if extra:
            m.note += f", with {args.lpxtop_args}"
        command = shlex.join([python, "-m", "lpxtop", *sims.urls, "--no-discover", *extra])
        run_in_tmux(tmux, m, "lpxtop", command, REPO, args, sims)
    elif tool == "engine":
        m = Measurement("lpxtop engine only", __version__, note="no UI: build_engine() in a child")
        log(f"measuring lpxtop engine only ({secs}) ...")
        run_engine_only(m, python, args, sims, workdir, env)
    elif tool == "vllm-mon":
        m = Measurement("vllm-mon", note="1 endpoint (takes one --url), /metrics only")
        exe = find_peer(["vllm-dash", "vllmtop"], args.peer_venv)
        if exe is None:
            m.status = "skipped: not installed (pip install vllm-mon into a venv; --peer-venv PATH)"
            return m
        m.version = _version_of(exe, "vllm-mon")
        log(f"measuring vllm-mon ({secs}) ...")
        command = shlex.join([exe, "--url", sims.bases[0], "--db", str(workdir / "vllm_metrics.db")])
        run_in_tmux(tmux, m, "vllm-mon", command, workdir, args, sims)
    elif tool == "vllm-htop":
        m = Measurement("vllm-htop", note=f"{len(sims.bases)} endpoints, /metrics only")
        exe = find_peer(["vllm-htop"], args.peer_venv)
        if exe is None:
            m.status = "skipped: not installed (pip install vllm-htop into a venv; --peer-venv PATH)"
            return m
        m.version = _version_of(exe, "vllm-htop")
        log(f"measuring vllm-htop ({secs}) ...")
        command = shlex.join([exe, "--url", *sims.bases])
        run_in_tmux(tmux, m, "vllm-htop", command, workdir, args, sims)
    else:
        m = Measurement(tool, status="skipped: unknown tool (choose from lpxtop, engine, vllm-mon, vllm-htop)")
    if m.status == "ok":
        log(f"  {m.tool}: CPU {m.cpu_pct_mean:.2f} % mean, RSS {m.rss_mb_peak:.1f} MB peak")
    else:
        log(f"  {m.tool}: {m.status}")
    return m


def add_ratios(results: list[Measurement]) -> None:
    base = next((m for m in results if m.tool == "lpxtop (dashboard)" and m.status == "ok"), None)
    if base is None:
        return
    for m in results:
        if m.status != "ok":
            continue
        if base.cpu_pct_mean:
            m.cpu_ratio = m.cpu_pct_mean / base.cpu_pct_mean
        if base.rss_mb_mean:
            m.rss_ratio = m.rss_mb_mean / base.rss_mb_mean


def _f(value: float | None, fmt: str) -> str:
    return "--" if value is None else format(value, fmt)


def render_table(results: list[Measurement], info: dict) -> str:
    lines = [
        f"lpxtop overhead: {len(info['endpoints'])} endpoints ({len(info['endpoints'])} `lpxtop sim` processes, "
        f"background load {info['background_load']}), {info['seconds']} x 1-s samples after "
        f"{info['warmup_s']:g} s warm-up, terminal {info['terminal']}, {info['cpu_count']} CPUs",
        "",
        f"{'tool':<20} {'version':<8} {'CPU% mean':>9} {'CPU% p95':>9} {'RSS MB mean':>11} {'RSS MB peak':>11} "
        f"{'RSS MB/min':>10} {'CPU x':>6} {'RSS x':>6} {'host busy':>9} {'sims CPU%':>9}",
    ]
    for m in results:
        if m.status != "ok":
            lines.append(f"{m.tool:<20} {m.version:<8} {m.status}")
            continue
        lines.append(
            f"{m.tool:<20} {m.version:<8} {_f(m.cpu_pct_mean, '.2f'):>9} {_f(m.cpu_pct_p95, '.2f'):>9} "
            f"{_f(m.rss_mb_mean, '.1f'):>11} {_f(m.rss_mb_peak, '.1f'):>11} {_f(m.rss_mb_per_min, '+.1f'):>10} "
            f"{_f(m.cpu_ratio, '.2f'):>6} "
            f"{_f(m.rss_ratio, '.2f'):>6} {_f(m.host_busy_pct, '.0f') + ' %':>9} {_f(m.sims_cpu_pct, '.1f'):>9}"
        )
    lines += [
        "",
        "CPU % is of one core (process tree: user + system, reaped children included); RSS summed over the tree.",
        "RSS MB/min: growth while measuring; well above 0 means not yet steady (lpxtop's windows fill for"
        " 300 s+: try --seconds 360).",
        "CPU x / RSS x: mean against lpxtop (dashboard). host busy: all cores, whole machine, same window.",
        "sims CPU%: the simulated servers during that row (lpxtop's probes are real requests; peers only scrape).",
    ]
    for m in results:
        if m.note:
            lines.append(f"  {m.tool}: {m.note}")
    lines.append("")
    lines.append(f"target: <= {TARGET_CPU_PCT:g} % of one core and <= {TARGET_RSS_MB:g} MB RSS")
    for m in results:
        if m.tool.startswith("lpxtop") and m.status == "ok":
            cpu_ok = m.cpu_pct_mean is not None and m.cpu_pct_mean <= TARGET_CPU_PCT
            rss_ok = m.rss_mb_peak is not None and m.rss_mb_peak <= TARGET_RSS_MB
            lines.append(f"  {m.tool}: CPU {m.cpu_pct_mean:.2f} % mean ({'met' if cpu_ok else 'MISSED'}), "
                         f"RSS {m.rss_mb_peak:.1f} MB peak ({'met' if rss_ok else 'MISSED'})")
    busy = [m.host_busy_pct for m in results if m.host_busy_pct is not None]
    if busy and max(busy) > 50:
        lines.append(f"note: the host was up to {max(busy):.0f} % busy: CPU figures are noisy, run it again")
    return "\n".join(lines)


def to_json(results: list[Measurement], info: dict) -> dict:
    return {
        "benchmark": "overhead",
        "settings": info,
        "target": {"cpu_pct_of_one_core": TARGET_CPU_PCT, "rss_mb": TARGET_RSS_MB},
        "results": [asdict(m) for m in results],
    }


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="CPU and RSS of lpxtop (dashboard and engine only) and peer vLLM monitors, watching "
        "simulated servers on 127.0.0.1.")
    parser.add_argument("--seconds", type=int, default=60, help="measured seconds per tool (default 60)")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before measuring, excluded (default 5)")
    parser.add_argument("--endpoints", type=int, default=4, help="simulated servers to watch (default 4)")
    parser.add_argument("--background-load", default="2,12,60", metavar="MIN,MAX,PERIOD_S",
                        help="the sims' virtual load (default 2,12,60)")
    parser.add_argument("--tools", default="lpxtop,engine,vllm-mon,vllm-htop",
                        help="comma-separated rows to measure, in order (default: all)")
    parser.add_argument("--peer-venv", metavar="PATH", default=None,
                        help="venv holding vllm-mon / vllm-htop (default: PATH, ./bench-venv, $LPXTOP_PEER_VENV)")
    parser.add_argument("--lpxtop-args", default="", metavar="ARGS",
                        help="extra options for the dashboard row, e.g. '--interval 10 --refresh 1', to measure "
                        "what other settings cost (the target is judged at the defaults)")
    parser.add_argument("--json", action="store_true", help="print JSON (with the 1-s samples) instead of a table")
    args = parser.parse_args(argv)
    if not 1 <= args.seconds <= 3600:
        parser.error("--seconds must be between 1 and 3600")
    if not 0 <= args.warmup <= 120:
        parser.error("--warmup must be between 0 and 120")
    if not 1 <= args.endpoints <= 16:
        parser.error("--endpoints must be between 1 and 16")
    return args


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Ctrl-C and kill both end in the `finally` blocks that stop every child. SIGINT is set explicitly
    # because a shell starting us in the background (`cmd &`) leaves it ignored.
    signal.signal(signal.SIGINT, _raise_interrupt)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        results, info = measure_all(args)
    except KeyboardInterrupt:
        log("overhead.py: interrupted; every child process and tmux session was stopped")
        return 130
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        log(f"overhead.py: {exc}")
        return 1
    add_ratios(results)
    if args.json:
        print(json.dumps(to_json(results, info), indent=2))
    else:
        print(render_table(results, info))
    return 0 if all(m.status == "ok" or m.status.startswith("skipped") for m in results) else 1


if __name__ == "__main__":
    sys.exit(main())
