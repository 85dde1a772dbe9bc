"""Start, watch and stop the real inference servers built by tests/integration/realservers/setup.sh, and read
their /metrics.

Used by tests/integration (its conftest.py holds the session fixtures) and by benchmarks/reference.py. Everything here is bounded: every wait
has a deadline, every network call a timeout, and every server runs in its own process group so that
stopping it also stops the children it spawned (vLLM's engine core).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.paths import REPO
from tests.support.ports import free_port

SCRIPTS = REPO / "tests" / "integration" / "realservers"
# The same default as the scripts: $LPXTOP_REALSERVERS, else the user's cache dir.
CACHE = Path(
    os.environ.get("LPXTOP_REALSERVERS")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lpxtop-realservers"
)

# small-llama (~85M parameters) keeps vLLM's engine, not its HTTP front end, the bottleneck on a CPU, so
# requests queue visibly while /metrics stays responsive (see tests/integration/realservers/README.md).
VLLM_MODEL = "small-llama"
VLLM_MAX_NUM_SEQS = 2
LLAMA_MODEL = "tiny-llama"
LLAMA_SLOTS = 4
# Context shared by llama-server's slots: 4096 tokens per slot, so a load stream can run for 3800 tokens.
LLAMA_CTX = 4 * 4096
START_TIMEOUT_S = float(os.environ.get("LPXTOP_REALSERVERS_START_TIMEOUT", "300"))
STOP_TIMEOUT_S = 20.0
KEEP_LOGS = 30


def require_servers() -> bool:
    """True when a missing cache or a missing lpxtop API must fail the run instead of skipping it."""
    return os.environ.get("LPXTOP_REQUIRE_REALSERVERS") == "1"


def unavailable(reason: str) -> NoReturn:
    """Skip, or fail when LPXTOP_REQUIRE_REALSERVERS=1, with `reason`."""
    if require_servers():
        pytest.fail(f"{reason} (LPXTOP_REQUIRE_REALSERVERS=1)", pytrace=False)
    pytest.skip(reason)


def import_lpxtop(module: str, *names: str) -> ModuleType:
    """Import an lpxtop module the tests drive; skip (or fail under REQUIRE) when it is not there yet."""
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        unavailable(f"{module} is not importable: {exc}")
    for name in names:
        if not hasattr(mod, name):
            unavailable(f"{module} has no {name}")
    return mod


def missing_parts(server: str) -> list[str]:
    """What `setup.sh --check SERVER` ("vllm" or "llama") reports missing from the cache; [] when built."""
    try:
        done = subprocess.run(
            ["bash", str(SCRIPTS / "setup.sh"), "--check", server],
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "LPXTOP_REALSERVERS": str(CACHE)},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"setup.sh --check did not run: {exc}"]
    if done.returncode == 0:
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.startswith("  ")] or [done.stdout.strip()]


# The servers run at a lower priority than the tests that watch them. Each server leads a new session,
# so on a kernel with autogroup scheduling it gets a CPU group of its own, weighted like every other
# group: a test in a lower-weighted group (a runner started with `nice`) then gets next to no CPU while
# vLLM computes. Seen here with the test's group at nice 10: the test's event loop, `top` and vLLM's own
# /metrics stalled for 30-80 s at a time while vLLM's engine and worker used both cores; with the
# server's group at nice 10 or 19, no stall over 10 ms. On CI a sandwich once took 60 s in the same way.
# 19, the lowest priority, so that the tests come first however their runner was started.
SERVER_NICE = 19


def _child_setup() -> None:
    """In the child before exec (after setsid): lower its priority, and get SIGTERM if pytest dies.

    SIGTERM, not SIGKILL: vLLM's API server then shuts down its engine-core and worker processes too
    (seen here: gone within 2 s); with SIGKILL they were left running, orphaned.
    """
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    with contextlib.suppress(OSError):
        os.nice(SERVER_NICE)  # inherited by every process and thread the server starts
    with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as group:
        group.write(str(SERVER_NICE))  # the new session's autogroup (Linux with CONFIG_SCHED_AUTOGROUP)


@dataclass
class ServerProcess:
    """One running server: its process (leader of its own process group), port and log file."""

    name: str
    port: int
    proc: subprocess.Popen
    log_path: Path
    started_at: float = field(default_factory=time.monotonic)
    ready_s: float | None = None

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        return f"{self.origin}/v1"

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"(no log: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def wait_healthy(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until GET /health answers 200; raise with the log's tail if the server dies or is late."""
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=httpx.Timeout(2.0)) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"{self.name} exited with {self.proc.returncode} before it was ready; "
                        f"log {self.log_path}:\n{self.log_tail()}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.origin}/health").status_code == 200:
                        self.ready_s = time.monotonic() - self.started_at
                        return
                time.sleep(0.25)
        raise RuntimeError(
            f"{self.name} on port {self.port} not ready after {timeout_s:.0f} s; log {self.log_path}:\n"
            f"{self.log_tail()}"
        )

    def stop(self) -> None:
        """SIGTERM the whole process group, SIGKILL what is left after STOP_TIMEOUT_S."""
        pgid = self.proc.pid  # start_new_session: the server leads its own group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
        # Children (vLLM's engine core) may outlive the leader: clear the group in any case.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


def _prune_logs(logs: Path, keep: int = KEEP_LOGS) -> None:
    """Keep the newest `keep` server logs of earlier test runs; a new log is written per port."""
    with contextlib.suppress(OSError):  # another run may be pruning too
        old = sorted(logs.glob("test-*.log"), key=lambda p: p.stat().st_mtime, reverse=True)[keep:]
        for path in old:
            path.unlink(missing_ok=True)


def start_server(name: str, script: str, args: list[str], env: dict[str, str]) -> ServerProcess:
    """Start realservers/<script> in the foreground of a new process group on a free port."""
    port = free_port()
    logs = CACHE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"test-{name}-{port}.log"
    _prune_logs(logs)
    full_env = {
        **os.environ,
        **env,
        "PORT": str(port),
        "LPXTOP_FOREGROUND": "1",
        "LPXTOP_REALSERVERS": str(CACHE),
    }
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            ["bash", str(SCRIPTS / script), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
            preexec_fn=_child_setup,  # only a death signal and priority: safe before exec
        )
    return ServerProcess(name=name, port=port, proc=proc, log_path=log_path)


@contextlib.contextmanager
def running(server: ServerProcess, timeout_s: float = START_TIMEOUT_S) -> Iterator[ServerProcess]:
    """Wait for `server` to be healthy, yield it, and always stop it."""
    try:
        server.wait_healthy(timeout_s)
        yield server
    finally:
        server.stop()


# ---- /metrics, read directly with prometheus_client (the reference the tests compare lpxtop with)


@dataclass(frozen=True)
class RawScrape:
    """One GET /metrics: its HTTP status, the parsed samples, and when it was sent and answered."""

    status: int
    samples: tuple[tuple[str, tuple[tuple[str, str], ...], float], ...]
    sent: float  # time.monotonic()
    answered: float

    def value(self, name: str) -> float | None:
        """Sum of all samples of `name` (one engine here, so one sample), None if absent."""
        found = [v for n, _, v in self.samples if n == name]
        return sum(found) if found else None

    def buckets(self, name: str) -> dict[float, float]:
        """Cumulative bucket counts of histogram `name`, keyed by upper bound (`le`)."""
        out: dict[float, float] = {}
        for n, labels, v in self.samples:
            if n == f"{name}_bucket":
                le = float(dict(labels)["le"])
                out[le] = out.get(le, 0.0) + v
        return out


async def raw_scrape(client: httpx.AsyncClient, origin: str, timeout_s: float = 10.0) -> RawScrape:
    """GET <origin>/metrics and parse it with prometheus_client."""
    sent = time.monotonic()
    response = await client.get(f"{origin}/metrics", timeout=timeout_s)
    answered = time.monotonic()
    samples: list[tuple[str, tuple[tuple[str, str], ...], float]] = []
    if response.status_code == 200:
        for family in text_string_to_metric_families(response.text):
            for s in family.samples:
                samples.append((s.name, tuple(sorted(s.labels.items())), s.value))
    return RawScrape(response.status_code, tuple(samples), sent, answered)


# ---- starvation: on 2 cores the machine can keep this process off the CPU for seconds

# Seen here in the first seconds of a fresh vLLM's load: event-loop hold-ups up to 1.5 s, with the
# process's run-queue delay (/proc/self/schedstat) as long; with the runner niced (see SERVER_NICE),
# 30-80 s. A measurement taken across such a hold-up says nothing about lpxtop.
STARVED_MS = 1000.0


def run_queue_ms() -> float:
    """How long this process's threads have waited runnable but not running, in total (0 where unknown)."""
    total = 0.0
    try:
        for task in Path("/proc/self/task").iterdir():
            total += int((task / "schedstat").read_text().split()[1]) / 1e6
    except (OSError, ValueError, IndexError):
        return 0.0
    return total


class LoopLag:
    """The event loop's hold-ups: a task wakes every 20 ms and notes how late it is.

    `take()` gives the worst hold-up and the run-queue delay since the last take: when the two are
    alike, the machine starved this process; a hold-up with little run-queue delay is code that
    blocked the loop.
    """

    def __init__(self) -> None:
        self.worst_ms = 0.0
        self._waited = 0.0  # set by the take() in __aenter__
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        for _ in range(100_000):  # 20 ms each: far beyond any test's budget
            asked = time.monotonic()
            await asyncio.sleep(0.02)
            self.worst_ms = max(self.worst_ms, (time.monotonic() - asked - 0.02) * 1000)

    def take(self) -> tuple[float, float]:
        """(worst hold-up, run-queue delay) in ms since the last take; starts both over."""
        waited = run_queue_ms()
        out = (self.worst_ms, waited - self._waited)
        self.worst_ms, self._waited = 0.0, waited
        return out

    async def __aenter__(self) -> LoopLag:
        self.take()
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


# ---- load: long streams that keep a server's slots busy


@dataclass
class StreamLoad:
    """Workers that each run long streaming requests back to back; counts finished and failed streams."""

    tasks: list[asyncio.Task] = field(default_factory=list)
    finished: int = 0
    errors: list[str] = field(default_factory=list)
    timeouts: int = 0  # streams that timed out (a starved machine, see STARVED_MS) and were started again


# Streams per worker, whatever happens: the block's own deadline normally ends the load much sooner.
MAX_STREAMS_PER_WORKER = 200


async def _stream_worker(
    client: httpx.AsyncClient, api_url: str, model: str, max_tokens: int, index: int, load: StreamLoad
) -> None:
    """Run one long stream after another until cancelled, so the load lasts as long as the test needs.

    The tiny llama.cpp model writes 900 tokens in about 0.25 s: a single round of streams can be over
    before the first scrape, so each worker starts its next stream as soon as one ends.
    """
    for n in range(MAX_STREAMS_PER_WORKER):
        body = {
            "model": model,
            "messages": [{"role": "user", "content": f"[load {index}.{n}] Count slowly."}],
            "max_tokens": max_tokens,
            "ignore_eos": True,  # both servers accept it: the stream runs to max_tokens
            "stream": True,
        }
        try:
            async with client.stream("POST", f"{api_url}/chat/completions", json=body) as response:
                if response.status_code != 200:
                    load.errors.append(f"HTTP {response.status_code}")
                    return
                async for _ in response.aiter_raw():
                    pass
            load.finished += 1
        except asyncio.CancelledError:
            raise
        except httpx.TimeoutException:
            # Seen here: vLLM's API server accepted nothing for 10+ s while the machine stalled. The load's
            # job is to keep the slots busy, so start again; a server that is down fails on connect.
            load.timeouts += 1
            await asyncio.sleep(0.5)
        except httpx.HTTPError as exc:
            load.errors.append(f"{type(exc).__name__}: {exc}")
            return


@contextlib.asynccontextmanager
async def stream_load(
    api_url: str, model: str, streams: int, max_tokens: int, timeout_s: float = 120.0
) -> AsyncIterator[StreamLoad]:
    """Keep `streams` long streams running for the duration of the block; cancel them on exit.

    Cancelling closes the connections, and both servers abort a request whose client went away.
    """
    load = StreamLoad()
    limits = httpx.Limits(max_connections=streams + 2, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=30.0), limits=limits) as client:
        load.tasks = [
            asyncio.create_task(_stream_worker(client, api_url, model, max_tokens, i, load)) for i in range(streams)
        ]
        try:
            yield load
        finally:
            for task in load.tasks:
                task.cancel()
            await asyncio.wait(load.tasks, timeout=10.0)


async def _warm_up(server: ServerProcess, model: str, streams: int, max_tokens: int) -> None:
    async with stream_load(server.api_url, model, streams, max_tokens) as load:
        for _ in range(600):  # 0.1 s each: until `streams` streams have finished, or one failed
            if load.finished >= streams or load.errors or all(t.done() for t in load.tasks):
                break
            await asyncio.sleep(0.1)
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as client:
        await raw_scrape(client, server.origin)


def warm_up(server: ServerProcess, model: str, streams: int = 4, max_tokens: int = 128, budget_s: float = 120.0) -> None:
    """Run a few concurrent streams and a scrape before any test measures.

    A freshly started vLLM's first requests are its slowest (seen here: event-loop hold-ups up to 1.5 s
    in another process during the first seconds of load). That belongs to the fixture's start-up, not to
    a test's measurement. Never raises: a server that cannot serve fails the tests, with their messages.
    """
    with contextlib.suppress(Exception):
        asyncio.run(asyncio.wait_for(_warm_up(server, model, streams, max_tokens), budget_s))


async def wait_idle(
    client: httpx.AsyncClient, origin: str, running: str, waiting: str, timeout_s: float = 60.0
) -> RawScrape:
    """Poll /metrics until the `running` and `waiting` gauges both read 0; raise after timeout_s."""
    deadline = time.monotonic() + timeout_s
    last: RawScrape | None = None
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            last = await raw_scrape(client, origin)
            if last.value(running) == 0 and last.value(waiting) == 0:
                return last
        await asyncio.sleep(0.5)
    seen = None if last is None else (last.value(running), last.value(waiting))
    raise AssertionError(f"{origin} not idle after {timeout_s:.0f} s (running, waiting) = {seen}")


def require_built(server: str) -> None:
    """Skip (or fail) when `server` ("vllm" or "llama") is not complete in the cache."""
    gaps = missing_parts(server)
    if gaps:
        unavailable(
            f"{server} not built in {CACHE} (missing: {'; '.join(gaps)}); "
            f"build it with: bash {SCRIPTS / 'setup.sh'}"
        )
