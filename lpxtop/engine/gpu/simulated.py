"""A pretend GPU for the demo: its memory follows the simulated server's KV cache.

Clearly labelled: the device name says "Simulated" and the snapshot has `simulated=True`, so no
screen or JSON can pass it off as real hardware.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping

from lpxtop.model.gpu import GpuDevice, GpuProcess, GpuSnapshot

GIB = 2**30


class SimulatedGpuCollector:
    """Same interface as `GpuCollector`, backed by arithmetic instead of NVML.

    memory used = weights + runtime overhead + KV pool x kv_usage() (+ the surge, when on);
    utilisation follows `load()` (default: the KV usage); temperature and power follow utilisation, and an
    energy counter sums the power over the collector's clock (so the demo shows joules per token).
    `surge(True)` makes memory climb at `surge_rate_bytes_s` until nearly full, so the demo can show
    the projection, then the warning, then the critical alert, and runs the GPU at its power limit with its
    clocks held down ("pwr-cap"); `surge(False)` releases it.
    """

    def __init__(
        self,
        kv_usage: Callable[[], float],
        total_bytes: int = 80 * GIB,
        name: str = "Simulated GPU (demo)",
        *,
        load: Callable[[], float] | None = None,
        weights_bytes: int = 16 * GIB,
        overhead_bytes: int = 2 * GIB,
        kv_pool_fraction: float = 0.80,
        surge_rate_bytes_s: float = 1.2 * GIB,
        power_limit_w: float = 700.0,
        pid: int | None = None,
        process_name: str = "lpxtop-sim",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kv_usage = kv_usage
        self._load = load
        self.total_bytes = int(total_bytes)
        self.name = name
        self.weights_bytes = int(weights_bytes)
        self.overhead_bytes = int(overhead_bytes)
        # like vLLM's --gpu-memory-utilization: the KV pool is what is left of that share after weights
        self.kv_pool_bytes = max(
            0, int(self.total_bytes * kv_pool_fraction) - self.weights_bytes - self.overhead_bytes
        )
        self.surge_rate_bytes_s = float(surge_rate_bytes_s)
        self.power_limit_w = float(power_limit_w)
        self.pid = os.getpid() if pid is None else pid
        self.process_name = process_name
        self._clock = clock
        self._lock = threading.Lock()
        self._surge_since: float | None = None
        self._energy_j = 1_000_000.0  # as a driver's counter: started long before lpxtop
        self._last: tuple[float, float] | None = None  # (clock, power) of the last reading

    def surge(self, on: bool) -> None:
        """Start (or stop) a steady climb of memory use, to provoke the early warnings."""
        with self._lock:
            if on and self._surge_since is None:
                self._surge_since = self._clock()
            elif not on:
                self._surge_since = None

    @property
    def surging(self) -> bool:
        return self._surge_since is not None

    def _fraction(self, source: Callable[[], float] | None) -> float:
        if source is None:
            return 0.0
        try:
            value = float(source())
        except Exception:  # noqa: BLE001 - a sim server not ready yet reads as idle
            return 0.0
        if value != value:  # NaN
            return 0.0
        return min(1.0, max(0.0, value))

    def collect(self, endpoint_pids: Mapping[int, str] | None = None) -> GpuSnapshot:
        """One pretend reading."""
        kv = self._fraction(self._kv_usage)
        load = self._fraction(self._load) if self._load is not None else kv
        used = self.weights_bytes + self.overhead_bytes + int(self.kv_pool_bytes * kv)
        with self._lock:
            since = self._surge_since
        if since is not None:
            used += int(max(0.0, self._clock() - since) * self.surge_rate_bytes_s)
        used = min(used, self.total_bytes - 256 * 2**20)  # stop just short of full, as a real OOM would
        util = round(5.0 + 93.0 * load, 1)
        power = round(75.0 + (self.power_limit_w - 75.0) * util / 100.0, 1)
        throttle: tuple[str, ...] = ()
        if since is not None:
            power = round(self.power_limit_w * 0.995, 1)
            throttle = ("power_cap",)
        now = self._clock()
        with self._lock:
            if self._last is not None and now > self._last[0]:
                self._energy_j += (self._last[1] + power) / 2.0 * (now - self._last[0])
            self._last = (now, power)
            energy = self._energy_j
        endpoint = (endpoint_pids or {}).get(self.pid)
        process = GpuProcess(
            pid=self.pid,
            name=self.process_name,
            used_bytes=used,
            user=None,
            cmdline=f"{self.process_name} (simulated inference server)",
            endpoint=endpoint,
        )
        device = GpuDevice(
            index=0,
            name=self.name,
            uuid="GPU-00000000-0000-0000-0000-5133d0000000",
            util_pct=util,
            mem_util_pct=round(util * 0.6, 1),
            mem_used_bytes=used,
            mem_total_bytes=self.total_bytes,
            temp_c=round(34.0 + 0.42 * util, 1),
            power_w=power,
            power_limit_w=self.power_limit_w,
            sm_clock_mhz=int((1410 + 570 * load) * (0.8 if throttle else 1.0)),
            processes=(process,),
            vendor="simulated",
            energy_j=round(energy, 3),
            throttle=throttle,
        )
        return GpuSnapshot(status="ok", devices=(device,), simulated=True, collected_at=time.time())

    def close(self) -> None:
        """Nothing to release; present so the engine can treat both collectors alike."""
