"""Simulated servers in their own processes, for the benchmark scripts (not a test helper)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def sim_processes(count: int, model: Callable[[int], str], background_load: str = "2,12,60",
                  settle_s: float = 2.5) -> Iterator[list[int]]:
    """`count` `lpxtop sim` processes on free loopback ports (server i serves `model(i)`); yields the
    ports once they have had `settle_s` to start, and stops them all on the way out."""
    ports = [free_port() for _ in range(count)]
    procs = [subprocess.Popen([sys.executable, "-m", "lpxtop", "sim", "--port", str(port), "--model", model(i),
                               "--background-load", background_load], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for i, port in enumerate(ports)]
    try:
        time.sleep(settle_s)
        yield ports
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)
