"""The Engine: probes, scrapers and collectors on their own thread and asyncio loop.

Rendering never shares this loop, so a slow repaint cannot delay a timestamp. Readers get immutable
Snapshots through `snapshot()`, an attribute read; commands (pause, reset, interval) cross threads with
`call_soon_threadsafe`.

This module is the supervisor: the thread and its loop, the commands, publishing snapshots. Its parts:
`endpoints.py` (each endpoint's state and its probe, agent-step and scrape loops), `model_resolution.py`
(the model a probe sends), `collectors.py` (GPU, host and ports, discovery), `once.py` (`collect_once`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from lpxtop import __version__
from lpxtop.engine.agent import wants_chat
from lpxtop.engine.collectors import CollectorLoops, GpuSource, HostSource, PortSource
from lpxtop.engine.endpoints import (
    MAX_INTERVAL_S,
    MIN_INTERVAL_S,
    EndpointLoops,
    EndpointState,
    Scraper,
    pending_view,
)
from lpxtop.engine.gpu.accel.energy import EnergyMeter
from lpxtop.engine.once import OnceCollection
from lpxtop.engine.probe.clientlimit import LatenessWatch
from lpxtop.engine.source import Capabilities
from lpxtop.engine.window import DEFAULT_MAX_SAMPLES, DEFAULT_WINDOW_S
from lpxtop.http import HttpClient
from lpxtop.loopthread import LoopThread
from lpxtop.model.alerts import Alert
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.events import AlertsEvent, ControlEvent, SnapshotEvent
from lpxtop.model.gpu import GpuSnapshot
from lpxtop.model.host import HostSnapshot
from lpxtop.model.ports import LeftoverProcess, PortStatus
from lpxtop.model.snapshot import EndpointView, Snapshot

if TYPE_CHECKING:
    from lpxtop.model.events import EngineEvent

log = logging.getLogger("lpxtop.engine")

PUBLISH_EVERY_S = 0.5
HEARTBEAT_S = 1.0
WORKER_THREADS = 3  # asyncio.to_thread pool: GPU, host and ports, and the endpoints' /metrics parsing
# At start, the /metrics scrapes, the GPU reading and the port and host scan wait for every endpoint's first
# probe (at most this long): they would compete with it for the interpreter (its timestamps) and delay the
# first figures on screen, which are the probes'.
FIRST_PROBES_GRACE_S = 1.0


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


class Engine(EndpointLoops, CollectorLoops, OnceCollection):
    """Runs every collector on a background thread and publishes Snapshots."""

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
    ) -> None:
        self.settings = settings or EngineSettings()
        self.readonly = self.settings.readonly
        self._scraper_factory = scraper_factory
        self._gpu = gpu
        self._host = host
        self._ports = ports
        self._alerts = alerts
        self._discover = discover
        self._configs = list(endpoints)
        self._states: dict[str, EndpointState] = {}
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
        self._loop_thread: LoopThread | None = None
        self._first_probes: asyncio.Event | None = None  # set once every endpoint's first probe is in
        self._listeners: list[Callable[[EngineEvent], None]] = []
        self._rng = random.Random(self.settings.seed)
        # lpxtop's own lateness while each probe runs; opened on the loop's thread when it starts
        self._lateness = LatenessWatch()
        # (endpoint, worst loop lag, CPU wait, probe duration) in ns, of the last probes
        self.lateness: deque[tuple[str, int, int | None, int]] = self._lateness.records

    # ---- the reader's side (any thread) ----

    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def capabilities(self) -> Capabilities:
        """As a SnapshotSource (lpxtop/engine/source.py): the engine's controls (p, r, + / -)."""
        return Capabilities(controls=self, readonly=self.readonly, warming_up=self.warming_up)

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
        """Start the engine thread; returns once its loop runs (TimeoutError if it does not within 10 s)."""
        if self._loop_thread is not None:
            return
        # asyncio.to_thread's pool (NVML, psutil, /metrics parsing): a few threads are enough, since each
        # collector is single-flight.
        self._loop_thread = LoopThread("lpxtop-engine", workers=WORKER_THREADS)
        self._loop_thread.start(self._main())

    def stop(self, timeout: float = 5.0) -> None:
        """Stop every task and join the thread (bounded)."""
        if self._loop_thread is not None:
            self._loop_thread.stop(timeout)
            self._loop_thread = None
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

    def _publish(self, snapshot: Snapshot) -> None:
        previous = self._snapshot
        self._snapshot = snapshot
        if self._listeners:
            if snapshot.alerts != previous.alerts:
                self._emit(AlertsEvent(snapshot.wall_time, snapshot.alerts))
            self._emit(SnapshotEvent(snapshot))

    # ---- the engine's loop ----

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        """`fn(*args)` on the engine's loop, or here when no loop runs (before `start()`, after `stop()`)."""
        if self._loop_thread is None or not self._loop_thread.call_soon(fn, *args):
            fn(*args)

    async def _main(self) -> None:
        """The engine's life on its loop, until `stop()` cancels it (its loop thread: lpxtop/loopthread.py)."""
        self._lateness.open()
        try:
            await self._run()
        finally:
            self._lateness.close()

    async def _run(self) -> None:
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
            try:
                await asyncio.get_running_loop().create_future()  # until stop()
            finally:
                tasks = background + [t for s in self._states.values() for t in (*s.tasks, s.models_task)
                                      if t is not None]
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    def _client(self) -> HttpClient:
        """The one client of probes, scrapes and discovery (lpxtop's own, on asyncio: lpxtop/http/)."""
        return HttpClient(timeout=30.0, max_connections=64, max_idle=32, idle_expiry_s=30.0)

    def _add_state(self, config: EndpointConfig) -> EndpointState:
        if config.name in self._states:
            return self._states[config.name]
        scraper = None
        if self.settings.scrape_metrics and self._scraper_factory is not None:
            scraper = self._scraper_factory(config)
        state = EndpointState(config, self.settings, scraper)
        self._states[config.name] = state
        if config not in self._configs:
            self._configs.append(config)
        self._dirty = True
        return state

    def _start_endpoint(self, state: EndpointState, client: HttpClient) -> None:
        if self.settings.probes and wants_chat(state.config):
            state.tasks.append(asyncio.create_task(self._probe_loop(state, client), name=f"probe:{state.config.name}"))
        if self.settings.probes and state.agent is not None:
            state.tasks.append(asyncio.create_task(self._agent_loop(state, client), name=f"agent:{state.config.name}"))
        if state.scraper is not None:
            state.tasks.append(asyncio.create_task(self._scrape_loop(state, client), name=f"scrape:{state.config.name}"))

    def _check_first_probes(self) -> None:
        """Let the scrapes and collectors start once every probing endpoint has its first probe in."""
        event = self._first_probes
        if event is not None and not event.is_set() and not any(
            self.settings.probes and wants_chat(s.config) and s.window.tally.sent == 0 for s in self._states.values()
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
        if not self._states:  # not started yet: the endpoints it was given, pending (the first frame's rows)
            views.extend(pending_view(config, self.settings, now) for config in self._configs)
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
