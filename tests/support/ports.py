"""Loopback ports for tests: a free one, who listens on one, and real child processes that listen (the
port, discovery and action tests). Every wait is bounded; every child is killed at teardown.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil

from tests.support.paths import REPO
from tests.support.waiting import wait_for

# The real sim started under the program name of another server: `python DIR/vllm serve --port P
# --model M` has the command line of a vLLM started from its console script, and answers like one.
SIM_AS_OTHER_SERVER = (
    "import sys\n"
    "del sys.argv[1]  # the server's subcommand ('serve'): the sim has none\n"
    "from lpxtop.cli.sim import main\n"
    "raise SystemExit(main())\n"
)

# A bare listener sharing its port through SO_REUSEPORT (what two servers started with it do).
REUSEPORT_LISTENER = (
    "import socket, sys, time\n"
    "s = socket.socket()\n"
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)\n"
    "s.bind(('127.0.0.1', int(sys.argv[1])))\n"
    "s.listen()\n"
    "time.sleep(60)\n"
)

SLEEPER = "import time\ntime.sleep(60)\n"


def _ephemeral_low() -> int:
    """The first port of the kernel's own picks (bind to port 0, outgoing connections): 32768 by default."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _test_ports() -> range:
    """This process's own ports: $LPXTOP_TEST_PORTS ("21000-21999", several runs sharing one machine) or
    10000 up to the kernel's ephemeral range, cut into one block per pytest-xdist worker. A port handed out
    here is never the kernel's pick for another test's server (those come from the ephemeral range), nor
    another worker's: a port a test keeps closed stays closed until the test ends."""
    low, _, high = os.environ.get("LPXTOP_TEST_PORTS", "").partition("-")
    if low.isdigit() and high.isdigit() and int(low) <= int(high):
        whole = range(int(low), int(high) + 1)
    else:
        whole = range(10000, max(10000, _ephemeral_low()))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")
    if not (worker.isdigit() and count.isdigit()) or int(worker) >= int(count) or len(whole) < int(count):
        return whole
    size = len(whole) // int(count)
    return whole[int(worker) * size : (int(worker) + 1) * size]


def free_port() -> int:
    """A port nothing listens on now, from this process's own block (`_test_ports`); the kernel's pick when
    that block is empty (an ephemeral range starting below 10000)."""
    block = _test_ports()
    candidates = random.sample(block, min(200, len(block))) if block else [0]
    for port in candidates:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError(f"no free port in {block}")


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def listener_pids(port: int) -> set[int]:
    """PIDs with a listening TCP socket on `port`, from the kernel's table (we run as root)."""
    return {
        c.pid
        for c in psutil.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid is not None
    }


class Children:
    """Starts child processes and kills whatever is left of them at teardown."""

    def __init__(self, scripts: Path) -> None:
        self.scripts = scripts
        self.procs: list[subprocess.Popen] = []

    def start(self, args: list[str], executable: str | None = None) -> subprocess.Popen:
        """`executable` runs with `args[0]` as its argv[0]: how a test shows a renamed process title."""
        proc = subprocess.Popen(
            args,
            executable=executable,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=REPO,
        )
        self.procs.append(proc)
        return proc

    def python(self, code: str, *argv: str) -> subprocess.Popen:
        return self.start([sys.executable, "-c", code, *argv])

    def script(self, program: str, code: str, *argv: str) -> subprocess.Popen:
        """`code` run as a script file named `program` (``python DIR/vllm serve …``, as console scripts run)."""
        path = self.scripts / program
        path.write_text(code)
        return self.start([sys.executable, str(path), *argv])

    def wait_listening(self, proc: subprocess.Popen, port: int) -> subprocess.Popen:
        wait_for(lambda: listening(port) or proc.poll() is not None, timeout=15, what=f"a listener on {port}")
        assert proc.poll() is None, f"the server for port {port} exited at start"
        return proc

    def sim(self, port: int, model: str, *flags: str) -> subprocess.Popen:
        """`python -m lpxtop.sim` on 127.0.0.1:port serving `model`, ready to answer."""
        proc = self.start([sys.executable, "-m", "lpxtop.sim", "--port", str(port), "--model", model, *flags])
        return self.wait_listening(proc, port)

    def sim_as(self, program: str, port: int, model: str, *flags: str) -> subprocess.Popen:
        """The sim with the command line of `program serve --port P --model M` (e.g. vllm)."""
        proc = self.script(
            program, SIM_AS_OTHER_SERVER, "serve", "--port", str(port), "--model", model, *flags
        )
        return self.wait_listening(proc, port)

    def stop(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)

    def close(self) -> None:
        for proc in self.procs:
            self.stop(proc)


@contextlib.contextmanager
def running_children(scripts: Path) -> Iterator[Children]:
    """Children for one test (scripts written under `scripts`); each test module wraps this in a fixture."""
    kids = Children(scripts)
    try:
        yield kids
    finally:
        kids.close()
