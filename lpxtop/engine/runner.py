"""The Engine: probes, scrapers and collectors on their own thread and asyncio loop.

Rendering never shares this loop, so a slow repaint cannot delay a timestamp. Readers get immutable
Snapshots through `snapshot()`, an attribute read; commands (pause, reset, interval) cross threads with
`call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import random
import socket
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from lpxtop import __version__
from lpxtop.engine.agent.prober import AgentProber, wants_agent, wants_chat, with_agent
from lpxtop.engine.diagnosis import model_matches, model_not_served, no_model_listed
from lpxtop.engine.gpu.accel.energy import EnergyMeter
from lpxtop.engine.probe import fetch_models, rejects_stream_options, run_probe
from lpxtop.engine.probe.clientlimit import LoopLag, ThreadCpuWait
from lpxtop.engine.probe.schedule import next_gap
from lpxtop.engine.stats import DEFAULT_MAX_SAMPLES, DEFAULT_WINDOW_S, EndpointWindow, server_kind
from lpxtop.http import HttpClient
from lpxtop.model.agent import AgentStepEvent
from lpxtop.model.alerts import Alert
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.events import (
    AlertsEvent,
    ControlEvent,
    EngineEvent,
    GpuEvent,
    SampleEvent,
    ScrapeEvent,
    SnapshotEvent,
    SystemEvent,
)
from lpxtop.model.gpu import GpuSnapshot
from lpxtop.model.host import HostSnapshot
from lpxtop.model.ports import LeftoverProcess, PortStatus
from lpxtop.model.probe import Sample
from lpxtop.model.server import ServerMetrics
from lpxtop.model.snapshot import EndpointView, Snapshot
from lpxtop.textsafe import scrub

log = logging.getLogger("lpxtop.engine")
_T = TypeVar("_T")

MIN_INTERVAL_S = 0.25
MAX_INTERVAL_S = 60.0
PUBLISH_EVERY_S = 0.5
VIEW_MAX_AGE_S = 10.0
HEARTBEAT_S = 1.0
WORKER_THREADS = 3  # asyncio.to_thread pool: GPU, host and ports, and the endpoints' /metrics parsing
MODELS_TIMEOUT_S = 5.0  # GET /v1/models as a whole, or the endpoint's --timeout when shorter (a trickle is cut)
MODELS_RECHECK_S = 60.0
# At start, the /metrics scrapes, the GPU reading and the port and host scan wait for every endpoint's first
# probe (at most this long): they would compete with it for the interpreter (its timestamps) and delay the
# first figures on screen, which are the probes'.
FIRST_PROBES_GRACE_S = 1.0
MODEL_REFUSAL_KINDS = ("http_404", "http_4xx")  # how servers refuse a model they do not serve (404; some 400)
# `once`: the mean gap between probes when --interval is not given, and between scrapes while probing
ONCE_INTERVAL_S = 0.2
ONCE_SCRAPE_MEAN_S = 0.25
ONCE_REPORT_RESERVE_S = 0.5  # of --deadline, kept for the port check and the report after probing
# A probe is client_limited when, while it ran, the engine's loop ran a timer more than
# CLIENT_LAG_LIMIT_NS late, or its thread spent more than CLIENT_CPU_WAIT_SHARE of the probe's time
# (and at least CLIENT_CPU_WAIT_MIN_NS, as much as the lag limit) waiting for a CPU (clientlimit.py). benchmarks/client_limit.py
# on the 2-core VM (4 simulated servers, 40 s per condition, 1-ms switch interval, the machine shared
# with other work at a load average of ~4): undisturbed, the worst lag per probe was 1.7 ms at p50 and
# 6.1 ms at p99 (epoll's 1-ms timeout rounding and the switch interval are most of the floor), the CPU
# wait 0.7 % of a probe's time at p50 and 2.3 % at most; with a thread holding the interpreter lock
# 5 ms in 10, lags of 5.8 / 12.9 ms (p50 / p95); pinned to one CPU beside a spinner, waits of 7 / 26 %.
# The wait is a sum over the probe's wake-ups, so it is judged as a share of the probe's time (a 1-s
# probe on a busy host sums 30 ms of small waits); a single long wait makes the loop's timer late too.
CLIENT_LAG_LIMIT_NS = 5_000_000
CLIENT_CPU_WAIT_SHARE = 0.05
CLIENT_CPU_WAIT_MIN_NS = 5_000_000  # as the lag: lateness of at least 5 ms by either measure
LATENESS_KEPT = 1000  # (endpoint, loop lag, CPU wait) of the last probes, for benchmarks and tests


class Scraper(Protocol):
    async def scrape(self, client: HttpClient) -> ServerMetrics: ...


class GpuSource(Protocol):
    def collect(self, endpoint_pids: Mapping[int, str] | None = None) -> GpuSnapshot: ...


class HostSource(Protocol):
    def collect(
        self, endpoint_pids: Mapping[int, str] | None = None, kids: Mapping[int, list[int]] | None = None
    ) -> HostSnapshot: ...


class PortSource(Protocol):
    def collect(
        self,
        endpoints: Sequence[EndpointConfig],
        served_models: Mapping[str, tuple[str, ...]] | None = None,
        gpu_pids: Mapping[int, int] | None = None,
    ) -> tuple[tuple[PortStatus, ...], tuple[LeftoverProcess, ...]]: ...


class AlertSource(Protocol):
    def evaluate(self, snapshot: Snapshot, now: float | None = None) -> tuple[Alert, ...]: ...


@dataclass(frozen=True)
class EngineSettings:
    window_s: float = DEFAULT_WINDOW_S
    max_samples: int = DEFAULT_MAX_SAMPLES
    gpu_interval_s: float = 1.0
    system_interval_s: float = 5.0  # host and ports (a process scan costs ~20 ms of CPU)
    scrape_metrics: bool = True
    discover: bool = False
    discover_every_s: float = 30.0
    readonly: bool = False
    probe_schedule: str = "poisson"  # "poisson": exponential gaps (unbiased); "fixed": for comparisons
    seed: int | None = None  # of the probe schedule's random gaps (None: unpredictable)
    include_client_limited: bool = False  # count client_limited probes in the percentiles too
    # False: no probe loops (scrapes, GPU, host and ports only): `lpxtop load` measures with its own requests
    probes: bool = True


class _Waker:
    """What a probe loop sleeps on between probes: `set()` (reset, interval change, resume) ends the nap.

    One timer and one future per nap. `asyncio.wait_for(event.wait(), delay)` costs a task and three or
    four more passes of the loop for each of the ~2 naps a second that 4 endpoints take.
    """

    __slots__ = ("_waiter",)

    def __init__(self) -> None:
        self._waiter: asyncio.Future[bool] | None = None

    async def nap(self, seconds: float | None) -> bool:
        """Wait `seconds` (None: without end) or until `set()`; True when `set()` ended it. A `set()`
        before the nap began is not kept."""
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = None if seconds is None else loop.call_later(seconds, _resolve, waiter, False)
        try:
            return bool(await waiter)
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def set(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)


def _resolve(waiter: asyncio.Future, value: object = None) -> None:
    if not waiter.done():
        waiter.set_result(value)


class _EndpointState:
    """Everything the engine keeps for one endpoint; touched only on the engine's loop."""

    def __init__(self, config: EndpointConfig, settings: EngineSettings, scraper: Scraper | None) -> None:
        self.config = config
        self.window = EndpointWindow(settings.window_s, settings.max_samples,
                                     include_client_limited=settings.include_client_limited)
        self.scraper = scraper
        self.model: str | None = config.model
        self.served_models: tuple[str, ...] = ()
        self.models_checked_at = 0.0
        self.models_known = False  # a GET /models has finished (with or without models)
        self.models_task: asyncio.Task | None = None  # the check beside the probes when the model is known
        self.include_usage = True  # ask for a usage chunk until the server refuses stream_options
        self.version = 0  # bumped by every change a view shows; the cached view is reused until then
        self._view: tuple[int, float, EndpointView] | None = None
        self.server: ServerMetrics | None = None
        self.in_flight = False
        self.wake = _Waker()
        self.tasks: list[asyncio.Task] = []
        # The agent-step probe: a second probe loop with its own window and its own nap (engine/agent).
        self.agent = (AgentProber(config, settings.window_s, settings.max_samples,
                                  include_client_limited=settings.include_client_limited)
                      if wants_agent(config) else None)
        self.agent_wake = _Waker()

    def wake_all(self) -> None:
        self.wake.set()
        self.agent_wake.set()

    def changed(self) -> None:
        self.version += 1

    def view(self, now: float) -> EndpointView:
        """The summary of this endpoint, recomputed only after a change (or every 10 s, for pruning)."""
        cached = self._view
        if cached is not None and cached[0] == self.version and now - cached[1] < VIEW_MAX_AGE_S:
            return cached[2]
        view = self.window.view(self.config, now=now, model=self.model, server=self.server,
                                server_kind=self.server_kind, in_flight=self.in_flight)
        if self.agent is not None:
            view = with_agent(view, self.config, self.agent.view(now))
        self._view = (self.version, now, view)
        return view

    @property
    def server_kind(self) -> str:
        return server_kind(self.config, self.server)


def _passing_failure(status: str) -> bool:
    """A scrape failure that may well not happen again (unlike a server without /metrics)."""
    return status.startswith("error:") or "timed out" in status


class Engine:
    """Runs every collector on a background thread and publishes Snapshots."""

    is_demo = False

    def __init__(
        self,
        endpoints: Sequence[EndpointConfig],
        settings: EngineSettings | None = None,
        *,
        scraper_factory: Callable[[EndpointConfig], Scraper] | None = None,
        gpu: GpuSource | None = None,
        host: HostSource | None = None,
        ports: PortSource | None = None,
        alerts: AlertSource | None = None,
        discover: Callable[[HttpClient], Any] | None = None,
        on_surge: Callable[[bool], None] | None = None,
    ) -> None:
        self.settings = settings or EngineSettings()
        self.readonly = self.settings.readonly
        self._scraper_factory = scraper_factory
        self._gpu = gpu
        self._host = host
        self._ports = ports
        self._alerts = alerts
        self._discover = discover
        self._on_surge = on_surge
        self._configs = list(endpoints)
        self._states: dict[str, _EndpointState] = {}
        self._paused = False
        self._interval_scale = 1.0
        self._started_at = time.time()
        self._host_name = socket.gethostname()
        self._gpu_snapshot = GpuSnapshot(status="unavailable: not collected yet")
        self._host_snapshot: HostSnapshot | None = None
        self._port_statuses: tuple[PortStatus, ...] = ()
        self._leftovers: tuple[LeftoverProcess, ...] = ()
        self._seq = 0
        self._dirty = True
        self._alert_sources: list[Callable[[], tuple[Alert, ...]]] = []
        self._snapshot_hooks: list[Callable[[Snapshot], Snapshot]] = []
        self._energy = EnergyMeter()
        self._snapshot = self._build_snapshot()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None
        self._first_probes: asyncio.Event | None = None  # set once every endpoint's first probe is in
        self._ready = threading.Event()
        self._listeners: list[Callable[[EngineEvent], None]] = []
        self._rng = random.Random(self.settings.seed)
        # lpxtop's own lateness while each probe runs; opened on the loop's thread when it starts
        self._lag: LoopLag | None = None
        self._cpu_wait: ThreadCpuWait | None = None
        # (endpoint, worst loop lag, CPU wait, probe duration) in ns, of the last probes
        self.lateness: deque[tuple[str, int, int | None, int]] = deque(maxlen=LATENESS_KEPT)

    # ---- the reader's side (any thread) ----

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def warming_up(self) -> bool:
        """True until every endpoint has its first probe's figures (or failure) published: a screen may read
        snapshots more often meanwhile, so the first figures show as soon as they exist."""
        snap = self._snapshot  # immutable: safe to read from the UI's thread
        return not snap.endpoints or any(e.probes_sent == 0 for e in snap.endpoints)

    def set_paused(self, paused: bool) -> None:
        self._call(self._set_paused, paused)

    def reset(self) -> None:
        self._call(self._reset)

    def set_interval(self, seconds: float) -> None:
        self._call(self._set_interval, seconds)

    def request_surge(self, on: bool) -> None:
        if self._on_surge is not None:
            self._on_surge(on)

    def add_listener(self, listener: Callable[[EngineEvent], None]) -> None:
        """Hand every input the engine measures to `listener` (see lpxtop.model.events).

        Called on the engine's loop: the listener must return at once and never block. One that
        raises is logged and dropped. Add listeners before `start()`.
        """
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[EngineEvent], None]) -> None:
        with contextlib.suppress(ValueError):
            self._listeners.remove(listener)

    def post_event(self, event: EngineEvent) -> None:
        """Hand an input measured off the engine's loop (a joined server span: engine/traces/feed.py) to the
        listeners, on the loop when it runs. Any thread."""
        self._call(self._emit, event)

    def add_snapshot_hook(self, hook: Callable[[Snapshot], Snapshot]) -> None:
        """`hook(snapshot)` -> the snapshot with what it adds (the latency chain), before the alert rules; on
        the engine's loop: it must return at once. One that raises is logged and skipped."""
        self._snapshot_hooks.append(hook)

    def add_alert_source(self, source: Callable[[], tuple[Alert, ...]]) -> None:
        """Alerts from outside the engine's rules (e.g. "recording stopped: disk full"), added to every
        snapshot. Called on the engine's loop: it must return at once."""
        self._alert_sources.append(source)

    def _emit(self, event: EngineEvent) -> None:
        for listener in tuple(self._listeners):
            try:
                listener(event)
            except Exception:  # noqa: BLE001 - a reader's bug must not stop the measuring
                log.exception("engine listener %r failed; dropped", listener)
                self.remove_listener(listener)

    @property
    def interval_s(self) -> float:
        base = min((c.interval_s for c in self._configs), default=2.0)
        return base * self._interval_scale

    def start(self) -> None:
        """Start the engine thread; returns once its loop runs."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._thread_main, name="lpxtop-engine", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop every task and join the thread (bounded)."""
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and loop.is_running():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stopping.set)
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        for source in (self._gpu, self._host, self._ports):
            close = getattr(source, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    close()

    def __enter__(self) -> Engine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- headless: N probes per endpoint, one snapshot ----

    def collect_once(self, samples: int = 3, timeout_s: float = 120.0, interval_s: float | None = None) -> Snapshot:
        """Run `samples` probes per endpoint (endpoints in parallel, at random gaps averaging `interval_s`,
        default ONCE_INTERVAL_S), scrape each server meanwhile on its own schedule, collect, and return a
        snapshot. Everything, discovery included, ends within `timeout_s`."""
        return asyncio.run(self._collect_once(samples, timeout_s, interval_s or ONCE_INTERVAL_S))

    async def _collect_once(self, samples: int, timeout_s: float, interval_s: float) -> Snapshot:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s

        def left(reserve: float = 0.0) -> float:
            return max(0.0, deadline - loop.time() - min(reserve, timeout_s / 4))

        self._open_lateness()
        try:
            # collectors made on first use are built now, before any probe is in flight (assemble.Later)
            for source in (self._gpu, self._ports, self._host):
                await _within(_prepare(source), left(ONCE_REPORT_RESERVE_S), "collector set-up")
            async with self._client() as client:
                if self._discover is not None and not self._configs:
                    await _within(self._run_discovery(client), left(ONCE_REPORT_RESERVE_S), "discovery")
                for config in self._configs:
                    self._add_state(config)
                gpu = asyncio.ensure_future(self._collect_gpu())
                runs = [asyncio.ensure_future(self._once_endpoint(s, client, samples, interval_s))
                        for s in self._states.values()]
                done, pending = await asyncio.wait([*runs, gpu], timeout=left(ONCE_REPORT_RESERVE_S))
                if pending:
                    log.warning("once: gave up after %.1f s (--deadline)", timeout_s)
                    for task in pending:
                        task.cancel()
                    await asyncio.gather(*pending, return_exceptions=True)
                    for state in self._states.values():
                        # the probe that was cut, or an endpoint that never got to probe, is a failure the
                        # report names (kind "deadline")
                        if state.in_flight:
                            why = "the probe was still running"
                        elif state.window.sent == 0:
                            why = ("no probe could start (GET /v1/models had not answered)" if not state.models_known
                                   else "no probe had finished")
                        else:
                            continue
                        state.in_flight = False
                        self._record(state, _failed_sample(
                            state.config, f"deadline: {why} when --deadline ({timeout_s:g} s) passed"))
                models = [s.models_task for s in self._states.values() if s.models_task is not None]
                if models:
                    await _within(asyncio.gather(*models, return_exceptions=True), left(), "GET /models")
                # after the probes, so the port check knows what each endpoint's /v1/models serves
                await _within(self._collect_host_and_ports(), left(), "port check")
                if self._gpu_snapshot.devices:
                    # the GPU was read before the port check said which PID serves which endpoint: read it
                    # again (about 1 ms) so its processes are joined to their endpoints and, after the last
                    # scrape, its energy counter closes the interval energy per token is taken over
                    await _within(self._collect_gpu(), left(), "GPU")
        finally:
            self._close_lateness()
        self._publish(self._build_snapshot())
        return self._snapshot

    async def _once_endpoint(self, state: _EndpointState, client: HttpClient, samples: int, interval_s: float) -> None:
        """`once` for one endpoint: the probes, and scrapes on a schedule of their own while they run."""
        scraping = None
        if state.scraper is not None:
            scraping = asyncio.create_task(self._scrape_while_probing(state, client))
        try:
            loops = []
            if wants_chat(state.config):
                loops.append(self._probe_loop(state, client, count=samples, interval_s=interval_s))
            if state.agent is not None:
                loops.append(self._agent_loop(state, client, count=samples, interval_s=interval_s))
            await asyncio.gather(*loops)
        finally:
            if scraping is not None:
                scraping.cancel()
                await asyncio.gather(scraping, return_exceptions=True)
        if state.scraper is not None:
            # The last scrape reads the latency histograms whatever their 10 s schedule, so the server's
            # window (its exact means, the gap) covers every probe of the run, not only its first seconds.
            await self._scrape(state, client, histograms=True)
            if state.server is None or _passing_failure(state.server.status):
                # one answer decides the report: a passing failure gets one more try
                await asyncio.sleep(0.5)
                await self._scrape(state, client, histograms=True)

    async def _scrape_while_probing(self, state: _EndpointState, client: HttpClient) -> None:
        """Scrape at random gaps (the probes' schedule, its own clock): what the server showed across the run,
        not only right after lpxtop's own probe ended (its slot not yet refilled)."""
        while True:
            await self._scrape(state, client)
            await asyncio.sleep(next_gap(min(ONCE_SCRAPE_MEAN_S, state.config.metrics_interval_s), self._rng,
                                         schedule=self.settings.probe_schedule))

    def _publish(self, snapshot: Snapshot) -> None:
        previous = self._snapshot
        self._snapshot = snapshot
        if self._listeners:
            if snapshot.alerts != previous.alerts:
                self._emit(AlertsEvent(snapshot.wall_time, snapshot.alerts))
            self._emit(SnapshotEvent(snapshot))

    # ---- the engine's loop ----

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is not None and loop.is_running():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(fn, *args)
        else:
            fn(*args)

    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        # asyncio.to_thread's pool (NVML, psutil, /metrics parsing): a few threads are enough, since each
        # collector is single-flight, and each extra thread would keep a malloc arena of its own.
        loop.set_default_executor(
            concurrent.futures.ThreadPoolExecutor(max_workers=WORKER_THREADS, thread_name_prefix="lpxtop-worker")
        )
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        except Exception:  # noqa: BLE001 - the engine must never take the app down
            log.exception("engine loop failed")
        finally:
            with contextlib.suppress(Exception):
                _finish_tasks(loop)
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            self._ready.set()

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        self._open_lateness()
        self._ready.set()
        try:
            await self._run(self._stopping)
        finally:
            self._close_lateness()

    async def _run(self, stopping: asyncio.Event) -> None:
        self._first_probes = asyncio.Event()
        asyncio.get_running_loop().call_later(FIRST_PROBES_GRACE_S, self._first_probes.set)
        async with self._client() as client:
            for config in self._configs:
                self._start_endpoint(self._add_state(config), client)
            self._check_first_probes()
            background = [
                asyncio.create_task(self._gpu_loop()),
                asyncio.create_task(self._system_loop()),
                asyncio.create_task(self._publish_loop()),
            ]
            if self._discover is not None and self.settings.discover:
                background.append(asyncio.create_task(self._discovery_loop(client)))
            await stopping.wait()
            tasks = background + [t for s in self._states.values() for t in (*s.tasks, s.models_task) if t is not None]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _client(self) -> HttpClient:
        """The one client of probes, scrapes and discovery (lpxtop's own, on asyncio: lpxtop/http/)."""
        return HttpClient(timeout=30.0, max_connections=64, max_idle=32, idle_expiry_s=30.0)

    def _add_state(self, config: EndpointConfig) -> _EndpointState:
        if config.name in self._states:
            return self._states[config.name]
        scraper = None
        if self.settings.scrape_metrics and self._scraper_factory is not None:
            scraper = self._scraper_factory(config)
        state = _EndpointState(config, self.settings, scraper)
        self._states[config.name] = state
        if config not in self._configs:
            self._configs.append(config)
        self._dirty = True
        return state

    def _start_endpoint(self, state: _EndpointState, client: HttpClient) -> None:
        if self.settings.probes and wants_chat(state.config):
            state.tasks.append(asyncio.create_task(self._probe_loop(state, client), name=f"probe:{state.config.name}"))
        if self.settings.probes and state.agent is not None:
            state.tasks.append(asyncio.create_task(self._agent_loop(state, client), name=f"agent:{state.config.name}"))
        if state.scraper is not None:
            state.tasks.append(asyncio.create_task(self._scrape_loop(state, client), name=f"scrape:{state.config.name}"))

    def _open_lateness(self) -> None:
        """Watch the loop's and the thread's lateness (on the engine's thread, which schedstat names)."""
        self._lag = LoopLag()
        self._cpu_wait = ThreadCpuWait()

    def _close_lateness(self) -> None:
        if self._cpu_wait is not None:
            self._cpu_wait.close()
        self._lag = self._cpu_wait = None

    async def _probe_loop(
        self, state: _EndpointState, client: HttpClient, count: int | None = None, interval_s: float | None = None
    ) -> None:
        """One probe at a time per endpoint, each after a random gap (schedule.py); `count` probes, or forever."""
        await self._repeat(lambda: self._probe(state, client), state, state.wake, count, interval_s)

    async def _agent_loop(
        self, state: _EndpointState, client: HttpClient, count: int | None = None, interval_s: float | None = None
    ) -> None:
        """One agent step (two calls to the server) at a time per endpoint, on the probes' schedule."""
        await self._repeat(lambda: self._agent_step(state, client), state, state.agent_wake, count, interval_s)

    async def _repeat(
        self,
        step: Callable[[], Awaitable[Sample | None]],
        state: _EndpointState,
        wake: _Waker,
        count: int | None,
        interval_s: float | None,
    ) -> None:
        sent = 0
        while count is None or sent < count:
            while self._paused:
                await wake.nap(None)
            sample = await step()
            sent += 1
            if count is not None and sent >= count:
                return
            await self._wait_for_next(state, sample, interval_s, wake)

    async def _wait_for_next(
        self, state: _EndpointState, sample: Sample | None, interval_s: float | None, wake: _Waker
    ) -> None:
        """The gap before the next probe. A new interval draws a new gap at once (the clock has no memory,
        so that is still an exponential gap); resume ends the wait."""
        retry_after = min(sample.retry_after_s, MAX_INTERVAL_S) if sample is not None and sample.retry_after_s else 0.0
        while True:
            scale = self._interval_scale
            mean = (interval_s or state.config.interval_s) * scale
            gap = max(next_gap(mean, self._rng, schedule=self.settings.probe_schedule), retry_after)
            woken = await wake.nap(gap)
            if not woken or self._paused or scale == self._interval_scale:
                return

    async def _probe(self, state: _EndpointState, client: HttpClient) -> Sample | None:
        try:
            model, error = await self._resolve_model(state, client)
            state.in_flight = True
            state.changed()
            self._dirty = True
            if model is None and error is not None:
                sample = _failed_sample(state.config, error)
            else:
                sample, late = await self._watch_lateness(state, lambda: self._run_probe(state, client, model))
                if late:
                    sample = replace(sample, client_limited=True)
                if not sample.ok:
                    sample = await self._name_served_models(state, sample, model)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug in one probe must not stop the others
            log.exception("probe of %s failed unexpectedly", state.config.name)
            sample = _failed_sample(state.config, f"other: {type(exc).__name__}: {exc}")
        finally:
            state.in_flight = False
        self._record(state, sample)
        return sample

    async def _run_probe(self, state: _EndpointState, client: HttpClient, model: str | None) -> Sample:
        sample = await run_probe(client, state.config, model, include_usage=state.include_usage)
        if state.include_usage and rejects_stream_options(sample):
            state.include_usage = False
            sample = await run_probe(client, state.config, model, include_usage=False)
        return sample

    async def _watch_lateness(self, state: _EndpointState, work: Callable[[], Awaitable[_T]]) -> tuple[_T, bool]:
        """`work()`'s result, and whether lpxtop itself was late while it ran (the loop's timer lag, the
        thread's CPU wait: `client_was_late`). Chat probes and agent steps are watched alike."""
        lag_ns, wait_ns = 0, None
        watch = self._lag.watch() if self._lag is not None else None
        cpu_wait = self._cpu_wait
        waited_before = cpu_wait.read() if cpu_wait is not None else None
        began_ns = time.perf_counter_ns()
        try:
            result = await work()
        finally:
            if watch is not None:
                lag_ns = watch.close()
            waited_after = cpu_wait.read() if cpu_wait is not None else None
            if waited_before is not None and waited_after is not None:
                wait_ns = waited_after - waited_before
        took_ns = time.perf_counter_ns() - began_ns
        self.lateness.append((state.config.name, lag_ns, wait_ns, took_ns))
        return result, client_was_late(lag_ns, wait_ns, took_ns)

    def _record(self, state: _EndpointState, sample: Sample) -> None:
        """Put a finished probe into the window; a sample the statistics cannot take is logged, not fatal.

        The server's words in it (an error message that may echo the request's key, a model id with
        terminal escapes) pass through `textsafe.scrub` here, where they enter the engine's records,
        so every reader (UI, JSON, table, listeners) gets them clean."""
        message, model = sample.error_message, sample.model
        if (message and scrub(message) != message) or (model and scrub(model) != model):
            sample = replace(sample, error_message=scrub(message), model=scrub(model))
        try:
            state.window.add(sample)
        except Exception:  # noqa: BLE001 - no sample may stop an endpoint's probe loop
            log.exception("the statistics of %s could not take a sample; left out", state.config.name)
        state.changed()
        self._dirty = True
        if self._listeners:
            self._emit(SampleEvent(state.config.name, sample))
        if state.window.sent == 1 and self._thread is not None:
            self._publish_now()  # an endpoint's first figures go out at once, not at the next publish tick
            self._check_first_probes()

    def _check_first_probes(self) -> None:
        """Let the scrapes and collectors start once every probing endpoint has its first probe in."""
        event = self._first_probes
        if event is not None and not event.is_set() and not any(
            self.settings.probes and wants_chat(s.config) and s.window.sent == 0 for s in self._states.values()
        ):
            event.set()

    async def _after_first_probes(self) -> None:
        if self._first_probes is not None:
            await self._first_probes.wait()

    def _publish_now(self) -> None:
        """Publish a snapshot now (on the loop, after the measurement is done); the publish loop goes on."""
        self._dirty = False
        try:
            self._publish(self._build_snapshot())
        except Exception:  # noqa: BLE001
            log.exception("snapshot failed")
            self._dirty = True

    async def _agent_step(self, state: _EndpointState, client: HttpClient) -> None:
        prober = state.agent
        assert prober is not None
        try:
            model: str | None = None
            error: str | None = None
            if not state.config.is_platform:  # an agent platform has no /v1/models; its model is its business
                model, error = await self._resolve_model(state, client)
            prober.in_flight = True
            state.changed()
            self._dirty = True
            if not state.config.is_platform and model is None and error is not None:
                step = prober.failed(error)
            else:
                step, late = await self._watch_lateness(state, lambda: prober.step(client, model))
                if late:
                    step = replace(step, client_limited=True)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug in one step must not stop the loop
            log.exception("agent step of %s failed unexpectedly", state.config.name)
            step = prober.failed(f"other: {type(exc).__name__}: {exc}")
        finally:
            prober.in_flight = False
        try:
            prober.window.add(step)
        except Exception:  # noqa: BLE001 - no step may stop an endpoint's agent loop
            log.exception("the agent statistics of %s could not take a step; left out", state.config.name)
        state.changed()
        self._dirty = True
        if self._listeners:
            self._emit(AgentStepEvent(state.config.name, step))

    async def _resolve_model(self, state: _EndpointState, client: HttpClient) -> tuple[str | None, str | None]:
        """The model to send. Once a model is known (configured, or listed before) the probe does not wait:
        GET /v1/models (for the ports' mismatch check) runs beside it now and then. Without one, the
        probe needs its answer, so each probe asks until a model is known, and a failure keeps its own
        kind (`refused`, `tls`, `http_401` ...: engine/diagnosis.py says what to do)."""
        now = time.monotonic()
        if state.model is not None:
            stale = not state.models_known or now - state.models_checked_at >= MODELS_RECHECK_S
            if stale and (state.models_task is None or state.models_task.done()):
                state.models_checked_at = now
                state.models_task = asyncio.create_task(self._check_models(state, client),
                                                        name=f"models:{state.config.name}")
            return state.model, None
        state.models_checked_at = now
        error = await self._check_models(state, client)
        if state.model is None:
            return None, error or f"no_model: {no_model_listed(state.config)}"
        return state.model, None

    async def _name_served_models(self, state: _EndpointState, sample: Sample, model: str | None) -> Sample:
        """A probe refused for its model (a typo in --model, most often): say which models the server does serve,
        from GET /v1/models (waiting, bounded, for the check that runs beside the first probe)."""
        if sample.error_kind not in MODEL_REFUSAL_KINDS or model is None:
            return sample
        task = state.models_task
        if task is not None and not task.done():
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(task), MODELS_TIMEOUT_S)
        served = state.served_models
        if not served or model_matches(model, served) or (
            sample.error_kind != "http_404" and "model" not in (sample.error_message or "").lower()
        ):
            return sample
        return replace(sample, error_message=model_not_served(model, served))

    async def _check_models(self, state: _EndpointState, client: HttpClient) -> str | None:
        """Ask GET /v1/models, bounded as a whole (as the endpoint's requests are); returns the error, if any."""
        ids, error = await fetch_models(client, state.config, min(MODELS_TIMEOUT_S, state.config.timeout_s))
        ids = tuple(t for t in (scrub(i) for i in ids) if t)  # model ids are outside text
        # on failure nothing is known to be served: a stale list would hide a port taken over by another process
        state.served_models = ids
        state.models_known = True
        state.models_checked_at = time.monotonic()
        if state.config.model is None and ids:
            state.model = ids[0]
        state.changed()
        return error

    @staticmethod
    async def _every(period_s: float, work: Callable[[], Awaitable[None]]) -> None:
        """Run `work` every `period_s`, never two at once: the next run starts a period after this one began."""
        while True:
            began = time.monotonic()
            await work()
            await asyncio.sleep(max(0.1, period_s - (time.monotonic() - began)))

    async def _scrape_loop(self, state: _EndpointState, client: HttpClient) -> None:
        async def scrape_unless_paused() -> None:
            if not self._paused:
                await self._scrape(state, client)

        await self._after_first_probes()
        await self._every(state.config.metrics_interval_s, scrape_unless_paused)

    async def _scrape(self, state: _EndpointState, client: HttpClient, *, histograms: bool = False) -> None:
        assert state.scraper is not None
        try:
            metrics = await state.scraper.scrape(client, histograms=histograms)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            log.exception("scrape of %s failed unexpectedly", state.config.name)
            metrics = ServerMetrics(status=f"error: {type(exc).__name__}: {exc}")
        if metrics.status != "ok" and (state.server is None or state.server.status != metrics.status):
            log.info("metrics of %s: %s", state.config.name, metrics.status)
        state.server = metrics
        self._energy.add_scrape(state.config.name, metrics)
        now = time.time()
        if metrics.status == "ok":
            state.window.add_server_point(metrics, now)
        state.changed()
        self._dirty = True
        if self._listeners:
            self._emit(ScrapeEvent(state.config.name, now, metrics))

    async def _gpu_loop(self) -> None:
        if self._gpu is not None:
            await self._after_first_probes()
            await _prepare(self._gpu)
            await self._every(self.settings.gpu_interval_s, self._collect_gpu)

    async def _collect_gpu(self) -> None:
        if self._gpu is None:
            return
        previous = self._gpu_snapshot
        try:
            cheap = getattr(self._gpu, "cheap", None)
            if cheap is not None and cheap():  # no driver: the answer is remembered, so skip the thread hop
                self._gpu_snapshot = self._gpu.collect(self._endpoint_pids())
            else:
                self._gpu_snapshot = await asyncio.to_thread(self._gpu.collect, self._endpoint_pids())
        except Exception as exc:  # noqa: BLE001
            self._gpu_snapshot = GpuSnapshot(status=f"unavailable: {type(exc).__name__}: {exc}")
        self._energy.add_gpu(self._gpu_snapshot)
        # "unavailable" every second is no news: do not make readers redraw for it
        if self._gpu_snapshot.devices or previous.devices or self._gpu_snapshot.status != previous.status:
            self._dirty = True
            if self._listeners:
                self._emit(GpuEvent(time.time(), self._gpu_snapshot))

    async def _system_loop(self) -> None:
        await self._after_first_probes()
        await _prepare(self._ports)
        await _prepare(self._host)
        await self._every(self.settings.system_interval_s, self._collect_host_and_ports)

    async def _collect_host_and_ports(self) -> None:
        if self._ports is not None:
            # only endpoints whose /v1/models was asked: the others are not known to serve nothing
            served = {name: s.served_models for name, s in self._states.items() if s.models_known}
            gpu_pids = {p.pid: p.used_bytes or 0 for _, p in self._gpu_snapshot.all_processes()}
            try:
                self._port_statuses, self._leftovers = await asyncio.to_thread(
                    self._ports.collect, list(self._configs), served, gpu_pids
                )
            except Exception:  # noqa: BLE001
                log.exception("port check failed")
        if self._host is not None:
            try:
                kids = getattr(self._ports, "last_kids", None)  # the port check's process scan, just made
                self._host_snapshot = await asyncio.to_thread(self._host.collect, self._endpoint_pids(), kids)
            except Exception:  # noqa: BLE001
                log.exception("host collection failed")
        self._dirty = True
        if self._listeners:
            self._emit(SystemEvent(time.time(), self._host_snapshot, self._port_statuses, self._leftovers))

    def _endpoint_pids(self) -> dict[int, str]:
        return {p.pid: p.endpoint for p in self._port_statuses if p.pid is not None and p.endpoint}

    async def _discovery_loop(self, client: HttpClient) -> None:
        while True:
            await self._run_discovery(client, start=True)
            await asyncio.sleep(self.settings.discover_every_s)

    async def _run_discovery(self, client: HttpClient, start: bool = False) -> None:
        assert self._discover is not None
        try:
            found = await self._discover(client)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001
            log.exception("discovery failed")
            return
        known_urls = {c.url.rstrip("/") for c in self._configs}
        for config in found:
            if config.url.rstrip("/") in known_urls or config.name in self._states:
                continue
            state = self._add_state(config)
            known_urls.add(config.url.rstrip("/"))
            if start:
                self._start_endpoint(state, client)

    async def _publish_loop(self) -> None:
        while True:
            # Also when nothing changed, now and then: readers show ages and uptime from the snapshot's time.
            if self._dirty or time.time() - self._snapshot.wall_time >= HEARTBEAT_S:
                self._dirty = False
                try:
                    self._publish(self._build_snapshot())
                except Exception:  # noqa: BLE001
                    log.exception("snapshot failed")
            await asyncio.sleep(PUBLISH_EVERY_S)

    # ---- commands (run on the loop) ----

    def _set_paused(self, paused: bool) -> None:
        self._paused = paused
        if not paused:
            for state in self._states.values():
                state.wake_all()
        self._dirty = True
        if self._listeners:
            self._emit(ControlEvent(time.time(), "paused", paused))

    def _reset(self) -> None:
        for state in self._states.values():
            state.window.reset()
            if state.agent is not None:
                state.agent.window.reset()
            state.changed()
        self._dirty = True
        if self._listeners:
            self._emit(ControlEvent(time.time(), "reset"))

    def _set_interval(self, seconds: float) -> None:
        base = min((c.interval_s for c in self._configs), default=2.0)
        seconds = min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, seconds))
        self._interval_scale = seconds / base if base > 0 else 1.0
        for state in self._states.values():
            state.wake_all()
        self._dirty = True
        if self._listeners:
            self._emit(ControlEvent(time.time(), "interval", self.interval_s))

    # ---- snapshots ----

    def _build_snapshot(self) -> Snapshot:
        now = time.time()
        views: list[EndpointView] = []
        for state in self._states.values():
            views.append(state.view(now))
        self._seq += 1
        snapshot = Snapshot(
            wall_time=now,
            host_name=self._host_name,
            version=__version__,
            started_at=self._started_at,
            paused=self._paused,
            interval_s=self.interval_s,
            endpoints=tuple(views),
            gpu=self._gpu_snapshot,
            host=self._host_snapshot,
            ports=self._port_statuses,
            leftovers=self._leftovers,
            seq=self._seq,
        )
        try:
            snapshot = self._energy.apply(snapshot)
        except Exception:  # noqa: BLE001
            log.exception("energy per token failed")
        for hook in self._snapshot_hooks:
            try:
                snapshot = hook(snapshot)
            except Exception:  # noqa: BLE001
                log.exception("snapshot hook %r failed", hook)
        if self._alerts is not None:
            try:
                snapshot = replace(snapshot, alerts=self._alerts.evaluate(snapshot, now))
            except Exception:  # noqa: BLE001
                log.exception("alert rules failed")
        if self._alert_sources:
            extra: list[Alert] = []
            for source in self._alert_sources:
                try:
                    extra.extend(source())
                except Exception:  # noqa: BLE001
                    log.exception("alert source %r failed", source)
            if extra:
                snapshot = replace(snapshot, alerts=(*snapshot.alerts, *extra))
        return snapshot


def _finish_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks still pending when the engine stops (a scraper's own, say) and let them end, as
    asyncio.run does: none is destroyed pending, and their connections close on a loop that still runs."""
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


def client_was_late(lag_ns: int, wait_ns: int | None, took_ns: int) -> bool:
    """Whether lpxtop's own lateness while a probe ran may have moved its figures (see the limits above)."""
    if lag_ns > CLIENT_LAG_LIMIT_NS:
        return True
    return wait_ns is not None and wait_ns > max(CLIENT_CPU_WAIT_MIN_NS, CLIENT_CPU_WAIT_SHARE * took_ns)


async def _prepare(source: object) -> None:
    """Build a collector made on first use (assemble.Later) on a worker thread: its imports and set-up hold
    the interpreter lock there, where the probe loop's thread takes it back within a switch interval."""
    prepare = getattr(source, "prepare", None) if source is not None else None
    if prepare is not None:
        try:
            await asyncio.to_thread(prepare)
        except Exception:  # noqa: BLE001 - its first collection will say what is wrong
            log.exception("collector set-up failed")


async def _within(work: Awaitable[Any], seconds: float, what: str) -> None:
    """Await `work` for at most `seconds` (then cancel it); `once` must end within its deadline."""
    try:
        await asyncio.wait_for(work, max(0.001, seconds))
    except asyncio.TimeoutError:
        log.warning("once: %s cut at the deadline", what)


def _failed_sample(config: EndpointConfig, error: str) -> Sample:
    kind, _, message = error.partition(": ")
    return Sample(
        endpoint=config.name,
        wall_time=time.time(),
        start_ns=time.perf_counter_ns(),
        ok=False,
        error_kind=kind or "other",
        error_message=message or None,
    )
