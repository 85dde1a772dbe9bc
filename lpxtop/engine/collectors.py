"""The engine's machine-wide collectors: the GPU reading, the host and port check, discovery.

Each runs on its own period (`every`), its blocking work (NVML, psutil, the process scan) on a worker
thread, and waits at start for every endpoint's first probe (runner.py: `FIRST_PROBES_GRACE_S`).
`CollectorLoops` is a part of `Engine` (runner.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from lpxtop.engine.gpu.accel.energy import EnergyMeter
from lpxtop.http import HttpClient
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.events import GpuEvent, SystemEvent
from lpxtop.model.gpu import GpuSnapshot
from lpxtop.model.host import HostSnapshot
from lpxtop.model.ports import LeftoverProcess, PortStatus, endpoints_by_pid, endpoints_by_process

if TYPE_CHECKING:
    from lpxtop.engine.endpoints import EndpointState
    from lpxtop.engine.runner import EngineSettings
    from lpxtop.model.events import EngineEvent

log = logging.getLogger("lpxtop.engine")


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


async def every(period_s: float, work: Callable[[], Awaitable[None]]) -> None:
    """Run `work` every `period_s`, never two at once: the next run starts a period after this one began."""
    while True:
        began = time.monotonic()
        await work()
        await asyncio.sleep(max(0.1, period_s - (time.monotonic() - began)))


async def prepare(source: object) -> None:
    """Build a collector made on first use (assemble.Later) on a worker thread: its imports and set-up hold
    the interpreter lock there, where the probe loop's thread takes it back within a switch interval."""
    set_up = getattr(source, "prepare", None) if source is not None else None
    if set_up is not None:
        try:
            await asyncio.to_thread(set_up)
        except Exception:  # noqa: BLE001 - its first collection will say what is wrong
            log.exception("collector set-up failed")


class CollectorLoops:
    """The GPU, host-and-ports and discovery loops, and the collections `once` makes: a part of `Engine`."""

    settings: EngineSettings
    _gpu: GpuSource | None
    _host: HostSource | None
    _ports: PortSource | None
    _discover: Callable[[HttpClient], Any] | None
    _configs: list[EndpointConfig]
    _states: dict[str, EndpointState]
    _gpu_snapshot: GpuSnapshot
    _host_snapshot: HostSnapshot | None
    _port_statuses: tuple[PortStatus, ...]
    _leftovers: tuple[LeftoverProcess, ...]
    _energy: EnergyMeter
    _dirty: bool
    _listeners: list[Callable[[EngineEvent], None]]

    async def _gpu_loop(self) -> None:
        if self._gpu is not None:
            await self._after_first_probes()
            await prepare(self._gpu)
            await every(self.settings.gpu_interval_s, self._collect_gpu)

    async def _collect_gpu(self) -> None:
        if self._gpu is None:
            return
        previous = self._gpu_snapshot
        try:
            cheap = getattr(self._gpu, "cheap", None)
            if cheap is not None and cheap():  # no driver: the answer is remembered, so skip the thread hop
                gpu = self._gpu.collect(self._endpoint_pids())
            else:
                gpu = await asyncio.to_thread(self._gpu.collect, self._endpoint_pids())
            self._gpu_snapshot = gpu.with_endpoints(endpoints_by_process(self._port_statuses))
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
        await prepare(self._ports)
        await prepare(self._host)
        await every(self.settings.system_interval_s, self._collect_host_and_ports)

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
                host = await asyncio.to_thread(self._host.collect, self._endpoint_pids(), kids)
                self._host_snapshot = host.with_endpoints(endpoints_by_process(self._port_statuses))
            except Exception:  # noqa: BLE001
                log.exception("host collection failed")
        self._dirty = True
        if self._listeners:
            self._emit(SystemEvent(time.time(), self._host_snapshot, self._port_statuses, self._leftovers))

    def _endpoint_pids(self) -> dict[int, str]:
        """Each listening server's PID -> the first endpoint it serves, in port order (the snapshot's
        `endpoints` name all of them)."""
        return {pid: names[0] for pid, names in endpoints_by_pid(self._port_statuses).items()}

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
