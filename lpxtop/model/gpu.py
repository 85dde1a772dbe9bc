"""GPU devices and the processes on them (owned by engine/gpu.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    used_bytes: int | None

    def to_json(self) -> dict:
        return {"pid": self.pid, "name": self.name, "used_bytes": self.used_bytes}


@dataclass(frozen=True)
class GpuDevice:
    index: int
    name: str
    uuid: str
    util_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    temp_c: float | None = None
    power_w: float | None = None
    processes: tuple[GpuProcess, ...] = ()

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
        }


@dataclass(frozen=True)
class GpuSnapshot:
    """`status` is "ok" or "unavailable: <reason>"; `simulated` marks the demo's fake GPU."""

    status: str
    devices: tuple[GpuDevice, ...] = ()
    simulated: bool = False
