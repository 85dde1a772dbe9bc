"""Host CPU and memory, and the endpoints' server processes (owned by engine/system/host.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class HostProcess:
    """An endpoint's server process and its children, summed (RSS counts pages shared between
    them once per process, so it overstates a little for forked workers).

    `status` is "ok", "gone" (the PID no longer exists) or "denied" (another user's process).
    `cpu_pct` is None on the first reading (psutil needs two to measure) and can exceed 100 on
    several cores. `endpoints`: every endpoint the process serves (`endpoint` among them, in port order).
    """

    endpoint: str
    pid: int
    status: str = "ok"
    name: str | None = None
    rss_bytes: int | None = None
    cpu_pct: float | None = None
    children: int = 0
    endpoints: tuple[str, ...] = ()

    def served(self) -> tuple[str, ...]:
        """Every endpoint the process serves: `endpoints`, else `endpoint` alone."""
        return self.endpoints or (self.endpoint,)

    def to_json(self) -> dict:
        return {
            "endpoint": self.endpoint,
            "endpoints": list(self.served()),
            "pid": self.pid,
            "status": self.status,
            "name": self.name,
            "rss_bytes": self.rss_bytes,
            "cpu_pct": self.cpu_pct,
            "children": self.children,
        }


@dataclass(frozen=True)
class HostSnapshot:
    """One reading of the host. None means "not available on this OS" (shown as `--`)."""

    cpu_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    mem_available_bytes: int | None = None
    swap_used_bytes: int | None = None
    swap_total_bytes: int | None = None
    load_avg: tuple[float, float, float] | None = None
    cpu_count: int | None = None
    mem_pressure_avg10: float | None = None  # Linux PSI: % of the last 10 s some task stalled on memory
    processes: tuple[HostProcess, ...] = ()
    collected_at: float | None = None

    @property
    def mem_available_pct(self) -> float | None:
        if self.mem_available_bytes is None or not self.mem_total_bytes:
            return None
        return 100.0 * self.mem_available_bytes / self.mem_total_bytes

    def with_endpoints(self, served: Mapping[str, tuple[str, ...]]) -> HostSnapshot:
        """This reading with each server process's `endpoints` filled in from `served` (model/ports.py
        `endpoints_by_process`); itself when none changes."""
        procs = tuple(replace(p, endpoints=served[p.endpoint])
                      if p.endpoint in served and p.endpoints != served[p.endpoint] else p for p in self.processes)
        return self if all(a is b for a, b in zip(procs, self.processes)) else replace(self, processes=procs)

    def to_json(self) -> dict:
        return {
            "cpu_pct": self.cpu_pct,
            "mem_used_bytes": self.mem_used_bytes,
            "mem_total_bytes": self.mem_total_bytes,
            "mem_available_bytes": self.mem_available_bytes,
            "swap_used_bytes": self.swap_used_bytes,
            "swap_total_bytes": self.swap_total_bytes,
            "load_avg": list(self.load_avg) if self.load_avg is not None else None,
            "cpu_count": self.cpu_count,
            "mem_pressure_avg10": self.mem_pressure_avg10,
            "processes": [p.to_json() for p in self.processes],
        }
