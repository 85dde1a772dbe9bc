"""GPU devices and the processes on them (owned by engine/gpu/collector.py)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

# Clock-throttle reasons, worst first: the key JSON and the exporter use, and the short word the GPU
# panel shows beside the device. The NVML bits they come from are in lpxtop/engine/gpu/accel/throttle.py.
THROTTLE_REASONS: tuple[tuple[str, str, str], ...] = (
    ("hw_thermal", "thermal", "hardware thermal slowdown: the GPU is too hot"),
    ("power_brake", "pwr-brake", "hardware power brake: the system asserted its power-brake signal"),
    ("hw_slowdown", "hw-slow", "hardware slowdown: too hot, or the power supply asked for less"),
    ("sw_thermal", "thermal", "software thermal slowdown: the driver holds clocks down to stay cool"),
    ("power_cap", "pwr-cap", "power cap: drawing the power limit, so the clocks come down"),
    ("board_limit", "board", "board limit"),
    ("reliability", "reliab", "reliability limit"),
    ("sync_boost", "sync", "sync boost: held to the clocks of other GPUs in its group"),
)
THROTTLE_WORDS = {key: word for key, word, _ in THROTTLE_REASONS}
THROTTLE_TEXT = {key: text for key, _, text in THROTTLE_REASONS}


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


@dataclass(frozen=True)
class GpuProcess:
    """One process holding memory on a GPU, joined (when the OS lets us) to its name, user and command.

    `name`, `user` and `cmdline` are None when the process cannot be read (gone, another user's and
    access denied, or in another PID namespace); `used_bytes` is None when NVML does not report it.
    `endpoint` names the endpoint whose server is this process or one of its ancestors; `endpoints`,
    every endpoint that server serves (`endpoint` among them, in port order).
    """

    pid: int
    name: str | None
    used_bytes: int | None
    user: str | None = None
    cmdline: str | None = None
    endpoint: str | None = None
    kind: str = "compute"  # compute | graphics | compute+graphics
    endpoints: tuple[str, ...] = ()

    def served(self) -> tuple[str, ...]:
        """Every endpoint its server serves: `endpoints`, else `endpoint` alone."""
        return self.endpoints or ((self.endpoint,) if self.endpoint else ())

    def to_json(self) -> dict:
        return {
            "pid": self.pid,
            "name": self.name,
            "used_bytes": self.used_bytes,
            "user": self.user,
            "cmdline": self.cmdline,
            "endpoint": self.endpoint,
            "endpoints": list(self.served()),
            "kind": self.kind,
        }


@dataclass(frozen=True)
class GpuDevice:
    """One GPU, or one MIG device (then `parent_index` is its GPU's index and `index` the MIG slot).

    None means "N/A": the driver does not report the value; `notes` says why, once per cause.
    """

    index: int
    name: str
    uuid: str
    util_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    temp_c: float | None = None
    power_w: float | None = None
    processes: tuple[GpuProcess, ...] = ()
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    mem_util_pct: float | None = None  # memory-controller busy share, not memory used
    mig_devices: tuple[GpuDevice, ...] = ()
    parent_index: int | None = None
    lost: bool = False  # NVML says GPU_IS_LOST: fell off the bus, needs a reset
    notes: tuple[str, ...] = ()  # why some values are N/A, what to do
    vendor: str = ""  # "nvidia", "amd", "simulated" ("" in recordings made before vendors were kept)
    # The driver's cumulative energy counter in joules (NVML: since the driver loaded; amdgpu hwmon
    # energy1_input); None where the device has none. Differences over time are what count.
    energy_j: float | None = None
    # Why the clocks are held down right now, worst first (THROTTLE_REASONS keys); () none; None unknown
    throttle: tuple[str, ...] | None = None

    @property
    def is_mig(self) -> bool:
        return self.parent_index is not None

    @property
    def label(self) -> str:
        """How messages name it: "GPU 0", or "GPU 0 MIG 2"."""
        if self.parent_index is None:
            return f"GPU {self.index}"
        return f"GPU {self.parent_index} MIG {self.index}"

    @property
    def key(self) -> str:
        """A short stable identifier for alert subjects and history: "gpu0", "gpu0/mig2"."""
        if self.parent_index is None:
            return f"gpu{self.index}"
        return f"gpu{self.parent_index}/mig{self.index}"

    @property
    def throttle_word(self) -> str | None:
        """The worst current clock-throttle reason as one short word ("pwr-cap", "thermal"); None when none."""
        if not self.throttle:
            return None
        return THROTTLE_WORDS.get(self.throttle[0], self.throttle[0])

    @property
    def mem_used_pct(self) -> float | None:
        if self.mem_used_bytes is None or not self.mem_total_bytes:
            return None
        return 100.0 * self.mem_used_bytes / self.mem_total_bytes

    def to_json(self) -> dict:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "util_pct": self.util_pct,
            "mem_used_bytes": self.mem_used_bytes,
            "mem_total_bytes": self.mem_total_bytes,
            "temp_c": self.temp_c,
            "power_w": self.power_w,
            "processes": [p.to_json() for p in self.processes],
            "power_limit_w": self.power_limit_w,
            "sm_clock_mhz": self.sm_clock_mhz,
            "mem_util_pct": self.mem_util_pct,
            "parent_index": self.parent_index,
            "mig_devices": [m.to_json() for m in self.mig_devices],
            "lost": self.lost,
            "notes": list(self.notes),
            "vendor": self.vendor or None,
            "energy_j": _finite(self.energy_j),
            "throttle": list(self.throttle) if self.throttle is not None else None,
        }


@dataclass(frozen=True)
class GpuSnapshot:
    """`status` is "ok" or "unavailable: <reason>"; `simulated` marks the demo's fake GPU.

    `collected_at` is time.time() when the devices were read (alert projections fit against it).
    """

    status: str
    devices: tuple[GpuDevice, ...] = ()
    simulated: bool = False
    collected_at: float | None = None
    driver_version: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def all_devices(self) -> Iterator[GpuDevice]:
        """Every GPU, each followed by its MIG devices."""
        for dev in self.devices:
            yield dev
            yield from dev.mig_devices

    def all_processes(self) -> Iterator[tuple[GpuDevice, GpuProcess]]:
        """Every (device, process) pair, MIG devices included."""
        for dev in self.all_devices():
            for proc in dev.processes:
                yield dev, proc

    def with_endpoints(self, served: Mapping[str, tuple[str, ...]]) -> GpuSnapshot:
        """This snapshot with each process's `endpoints` filled in from `served` (an endpoint's name ->
        every endpoint its server serves: model/ports.py `endpoints_by_process`); itself when none changes."""

        def device(dev: GpuDevice) -> GpuDevice:
            procs = tuple(replace(p, endpoints=served[p.endpoint])
                          if p.endpoint in served and p.endpoints != served[p.endpoint] else p for p in dev.processes)
            migs = tuple(device(m) for m in dev.mig_devices)
            same = all(a is b for a, b in zip(procs, dev.processes)) and all(a is b for a, b in zip(migs, dev.mig_devices))
            return dev if same else replace(dev, processes=procs, mig_devices=migs)

        devices = tuple(device(d) for d in self.devices)
        return self if all(a is b for a, b in zip(devices, self.devices)) else replace(self, devices=devices)

    def to_json(self) -> dict:
        return {
            "status": self.status,
            "simulated": self.simulated,
            "collected_at": self.collected_at,
            "driver_version": self.driver_version,
            "notes": list(self.notes),
            "devices": [d.to_json() for d in self.devices],
        }
