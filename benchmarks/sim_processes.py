"""Simulated servers in their own processes, for the benchmark scripts (not a test helper)."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
SIM_START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 5.0


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, wait a bounded time, then SIGKILL; never raises."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(STOP_TIMEOUT_S)


class Sims:
    """`lpxtop sim` processes on free loopback ports (each picks its own with --port 0)."""

    def __init__(self, workdir: Path, python: str = sys.executable) -> None:
        self.workdir = workdir
        self.python = python
        self.procs: list[subprocess.Popen] = []
        self.urls: list[str] = []  # API base URLs, http://127.0.0.1:PORT/v1

    def start(self, count: int, background_load: str,
              model: Callable[[int], str] = lambda i: f"sim-bench-{i + 1}") -> None:
        """Start `count` servers (server i serves `model(i)`) and return once each answers /metrics."""
        logs = []
        for i in range(count):
            log_path = self.workdir / f"sim{i}.log"
            argv = [self.python, "-m", "lpxtop", "sim", "--host", HOST, "--port", "0",
                    "--model", model(i), "--background-load", background_load, "--seed", str(i)]
            with open(log_path, "wb") as log:
                # Own session: a Ctrl-C in the terminal reaches us, and we stop the sims in order.
                self.procs.append(subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                                   stdin=subprocess.DEVNULL, start_new_session=True))
            logs.append(log_path)
        deadline = time.monotonic() + SIM_START_TIMEOUT_S
        pattern = re.compile(r"serving \S+ on (http://127\.0\.0\.1:\d+/v1)")
        for proc, log_path in zip(self.procs, logs):
            url = None
            while url is None and time.monotonic() < deadline:
                found = pattern.search(log_path.read_text(errors="replace"))
                if found:
                    url = found.group(1)
                elif proc.poll() is not None:
                    break
                else:
                    time.sleep(0.1)
            if url is None:
                tail = log_path.read_text(errors="replace")[-500:]
                raise RuntimeError(f"a sim did not start (exit {proc.poll()}): {tail.strip()}")
            self.urls.append(url)
        for url in self.urls:  # /metrics must answer before any tool looks at it
            base = url[: -len("/v1")]
            with urllib.request.urlopen(f"{base}/metrics", timeout=5) as resp:
                resp.read()

    @property
    def bases(self) -> list[str]:
        return [u[: -len("/v1")] for u in self.urls]

    @property
    def ports(self) -> list[int]:
        return [int(b.rsplit(":", 1)[1]) for b in self.bases]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stop(self) -> None:
        for proc in self.procs:
            stop_process(proc)


@contextlib.contextmanager
def sim_processes(count: int, model: Callable[[int], str], background_load: str = "2,12,60") -> Iterator[Sims]:
    """`count` started Sims (server i serves `model(i)`), logging to a temporary folder; all stopped on the
    way out."""
    with tempfile.TemporaryDirectory(prefix="lpxtop-bench-") as workdir:
        sims = Sims(Path(workdir))
        try:
            sims.start(count, background_load, model)
            yield sims
        finally:
            sims.stop()
