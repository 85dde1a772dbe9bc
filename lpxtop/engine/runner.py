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
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from lpxtop import __version__
from lpxtop.engine.httpclient import HttpClient
from lpxtop.engine.probe import fetch_models, rejects_stream_options, run_probe
from lpxtop.engine.stats import DEFAULT_MAX_SAMPLES, DEFAULT_WINDOW_S, EndpointWindow
from lpxtop.model.alerts import Alert
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.events import (
    AlertsEvent,
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

log = logging.getLogger("lpxtop.engine")

MIN_INTERVAL_S = 0.25
MAX_INTERVAL_S = 60.0
PUBLISH_EVERY_S = 0.5
VIEW_MAX_AGE_S = 10.0
HEARTBEAT_S = 1.0
WORKER_THREADS = 3  # asyncio.to_thread pool: GPU, host and ports, and the endpoints' /metrics parsing


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
    # False: no probe loops (scrapes, GPU, host and ports only): `lpxtop load` measures with its own requests
    probes: bool = True


class _Waker:
    """What a probe loop sleeps on between probes: `set()` (reset, interval change, resume) ends the nap.

    One timer and one future per nap. `asyncio.wait_for(event.wait(), delay)` costs a task and three or
    four more passes of the loop for each of the ~2 naps a second that 4 endpoints take.
    """

    __slots__ = ("_waiter",)

    def __init__(self) -> None:
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def nap(self, seconds: float | None) -> None:
        """Wait `seconds` (None: without end) or until `set()`; a `set()` before the nap began is not kept."""
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = None if seconds is None else loop.call_later(seconds, _resolve, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _EndpointState:
    """Everything the engine keeps for one endpoint; touched only on the engine's loop."""

    def __init__(self, config: EndpointConfig, settings: EngineSettings, scraper: Scraper | None) -> None:
        self.config = config
        self.window = EndpointWindow(settings.window_s, settings.max_samples)
        self.scraper = scraper
        self.model: str | None = config.model
        self.served_models: tuple[str, ...] = ()
        self.models_checked_at = 0.0
        self.models_known = False  # a GET /models has finished (with or without models)
        self.include_usage = True  # ask for a usage chunk until the server refuses stream_options
        self.version = 0  # bumped by every change a view shows; the cached view is reused until then
        self._view: tuple[int, float, EndpointView] | None = None
        self.server: ServerMetrics | None = None
        self.in_flight = False
        self.wake = _Waker()
        self.tasks: list[asyncio.Task] = []

    def changed(self) -> None:
        self.version += 1

    def view(self, now: float) -> EndpointView:
        """The summary of this endpoint, recomputed only after a change (or every 10 s, for pruning)."""
        cached = self._view
        if cached is not None and cached[0] == self.version and now - cached[1] < VIEW_MAX_AGE_S:
            return cached[2]
        view = self.window.view(self.config, now=now, model=self.model, server=self.server,
                                server_kind=self.server_kind, in_flight=self.in_flight)
        self._view = (self.version, now, view)
        return view

    @property
    def server_kind(self) -> str:
        if self.server is not None and self.server.kind not in ("", "unknown"):
            return self.server.kind
        return self.config.server_kind or "unknown"


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
        self._snapshot = self._build_snapshot()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._listeners: list[Callable[[EngineEvent], None]] = []

    # ---- the reader's side (any thread) ----

    def snapshot(self) -> Snapshot:
        return self._snapshot

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

    def collect_once(self, samples: int = 3, timeout_s: float = 120.0) -> Snapshot:
        """Run `samples` probes per endpoint (endpoints in parallel), scrape, collect, and return a snapshot."""
        return asyncio.run(self._collect_once(samples, timeout_s))

    async def _collect_once(self, samples: int, timeout_s: float) -> Snapshot:
        async with self._client() as client:
            if self._discover is not None and not self._configs:
                await self._run_discovery(client)
            for config in self._configs:
                self._add_state(config)
            gpu = asyncio.ensure_future(self._collect_gpu())

            async def one_endpoint(state: _EndpointState) -> None:
                if state.scraper is not None:
                    await self._scrape(state, client)
                for i in range(samples):
                    await self._probe(state, client)
                    if i + 1 < samples:
                        await asyncio.sleep(min(0.2, state.config.interval_s))
                if state.scraper is not None:
                    await self._scrape(state, client)
                    if state.server is not None and _passing_failure(state.server.status):
                        # one answer decides the report: a passing failure gets one more try
                        await asyncio.sleep(0.5)
                        await self._scrape(state, client)

            try:
                await asyncio.wait_for(
                    asyncio.gather(*(one_endpoint(s) for s in self._states.values()), gpu), timeout_s
                )
            except asyncio.TimeoutError:
                log.warning("collect_once: gave up after %.0f s", timeout_s)
            # after the probes, so the port check knows what each endpoint's /v1/models serves
            await self._collect_host_and_ports()
            if any(True for _ in self._gpu_snapshot.all_processes()) and self._endpoint_pids():
                # the GPU was read before the port check said which PID serves which endpoint:
                # read it again (about 1 ms) so its processes are joined to their endpoints
                await self._collect_gpu()
        self._publish(self._build_snapshot())
        return self._snapshot

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
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            self._ready.set()

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        self._ready.set()
        async with self._client() as client:
            for config in self._configs:
                self._start_endpoint(self._add_state(config), client)
            background = [
                asyncio.create_task(self._gpu_loop()),
                asyncio.create_task(self._system_loop()),
                asyncio.create_task(self._publish_loop()),
            ]
            if self._discover is not None and self.settings.discover:
                background.append(asyncio.create_task(self._discovery_loop(client)))
            await self._stopping.wait()
            tasks = background + [t for s in self._states.values() for t in s.tasks]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _client(self) -> HttpClient:
        """The one client of probes, scrapes and discovery (lpxtop's own, on asyncio: httpclient.py)."""
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
        if self.settings.probes:
            state.tasks.append(asyncio.create_task(self._probe_loop(state, client), name=f"probe:{state.config.name}"))
        if state.scraper is not None:
            state.tasks.append(asyncio.create_task(self._scrape_loop(state, client), name=f"scrape:{state.config.name}"))

    async def _probe_loop(self, state: _EndpointState, client: HttpClient) -> None:
        """One probe at a time per endpoint, started every interval (or right after a slow one)."""
        while True:
            while self._paused:
                await state.wake.nap(None)
            began = time.monotonic()
            sample = await self._probe(state, client)
            delay = state.config.interval_s * self._interval_scale - (time.monotonic() - began)
            if sample is not None and sample.retry_after_s:
                delay = max(delay, min(sample.retry_after_s, MAX_INTERVAL_S))
            await state.wake.nap(max(0.0, delay))  # woken early on reset / interval change / resume

    async def _probe(self, state: _EndpointState, client: HttpClient) -> Sample | None:
        try:
            model, error = await self._resolve_model(state, client)
            state.in_flight = True
            state.changed()
            self._dirty = True
            if model is None and error is not None:
                sample = _failed_sample(state.config, error)
            else:
                sample = await run_probe(client, state.config, model, include_usage=state.include_usage)
                if state.include_usage and rejects_stream_options(sample):
                    state.include_usage = False
                    sample = await run_probe(client, state.config, model, include_usage=False)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug in one probe must not stop the others
            log.exception("probe of %s failed unexpectedly", state.config.name)
            sample = _failed_sample(state.config, f"other: {type(exc).__name__}: {exc}")
        finally:
            state.in_flight = False
        state.window.add(sample)
        state.changed()
        self._dirty = True
        if self._listeners:
            self._emit(SampleEvent(state.config.name, sample))
        return sample

    async def _resolve_model(self, state: _EndpointState, client: HttpClient) -> tuple[str | None, str | None]:
        """Ask /v1/models now and then: for the model to send when none is configured, and for ports' mismatch check."""
        now = time.monotonic()
        if state.model is not None and now - state.models_checked_at < 60.0:
            return state.model, None
        state.models_checked_at = now
        ids, error = await fetch_models(client, state.config)
        # on failure nothing is known to be served: a stale list would hide a port taken over by another process
        state.served_models = ids
        state.models_known = True
        if state.config.model is None and ids:
            state.model = ids[0]
        if state.model is None:
            return None, error or "http_404: GET /models listed no model; pass --model"
        return state.model, None

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

        await self._every(state.config.metrics_interval_s, scrape_unless_paused)

    async def _scrape(self, state: _EndpointState, client: HttpClient) -> None:
        assert state.scraper is not None
        try:
            metrics = await state.scraper.scrape(client)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            log.exception("scrape of %s failed unexpectedly", state.config.name)
            metrics = ServerMetrics(status=f"error: {type(exc).__name__}: {exc}")
        if metrics.status != "ok" and (state.server is None or state.server.status != metrics.status):
            log.info("metrics of %s: %s", state.config.name, metrics.status)
        state.server = metrics
        now = time.time()
        if metrics.status == "ok":
            state.window.add_server_point(metrics, now)
        state.changed()
        self._dirty = True
        if self._listeners:
            self._emit(ScrapeEvent(state.config.name, now, metrics))

    async def _gpu_loop(self) -> None:
        if self._gpu is not None:
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
        # "unavailable" every second is no news: do not make readers redraw for it
        if self._gpu_snapshot.devices or previous.devices or self._gpu_snapshot.status != previous.status:
            self._dirty = True
            if self._listeners:
                self._emit(GpuEvent(time.time(), self._gpu_snapshot))

    async def _system_loop(self) -> None:
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
                state.wake.set()
        self._dirty = True

    def _reset(self) -> None:
        for state in self._states.values():
            state.window.reset()
            state.changed()
        self._dirty = True

    def _set_interval(self, seconds: float) -> None:
        base = min((c.interval_s for c in self._configs), default=2.0)
        seconds = min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, seconds))
        self._interval_scale = seconds / base if base > 0 else 1.0
        for state in self._states.values():
            state.wake.set()
        self._dirty = True

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
        if self._alerts is not None:
            try:
                snapshot = replace(snapshot, alerts=self._alerts.evaluate(snapshot, now))
            except Exception:  # noqa: BLE001
                log.exception("alert rules failed")
        return snapshot


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
