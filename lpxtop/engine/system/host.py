"""Host CPU, memory, swap, memory pressure, and each endpoint's server process → HostSnapshot.

Blocking and cheap (a few /proc reads); the engine calls `HostCollector.collect` from a worker
thread at about 1 Hz. Anything the OS will not tell us becomes None, never an exception.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

import psutil

from lpxtop.engine.system.processes import descendants
from lpxtop.engine.system.shown import safe_name
from lpxtop.model.host import HostProcess, HostSnapshot

PRESSURE_MEMORY = Path("/proc/pressure/memory")
_MAX_TRACKED = 4096  # psutil.Process objects kept between calls (servers and their children)


def parse_pressure(text: str, line: str = "some", field: str = "avg10") -> float | None:
    """One value from a Linux PSI file ("some avg10=1.23 avg60=... total=..."); None if absent."""
    for row in text.splitlines():
        parts = row.split()
        if not parts or parts[0] != line:
            continue
        for item in parts[1:]:
            key, sep, value = item.partition("=")
            if sep and key == field:
                try:
                    return float(value)
                except ValueError:
                    return None
    return None


def read_memory_pressure(path: Path = PRESSURE_MEMORY) -> float | None:
    """The "some avg10" of /proc/pressure/memory; None off Linux, on kernels without PSI, or psi=0."""
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except OSError:  # missing, or EOPNOTSUPP when the kernel was booted with psi=0
        return None
    return parse_pressure(text)


def _busy_and_total(times: object) -> tuple[float, float]:
    # Same accounting as psutil.cpu_percent: guest time is already inside user/nice, and
    # idle + iowait is not busy.
    total = sum(float(v) for v in times)  # type: ignore[attr-defined]
    total -= float(getattr(times, "guest", 0.0)) + float(getattr(times, "guest_nice", 0.0))
    idle = float(getattr(times, "idle", 0.0)) + float(getattr(times, "iowait", 0.0))
    return total - idle, total


class HostCollector:
    """Reads the host once per `collect()`, keeping what psutil needs to measure CPU between calls."""

    def __init__(self, pressure_path: Path = PRESSURE_MEMORY) -> None:
        self._pressure_path = pressure_path
        # System CPU % from our own cpu_times deltas rather than psutil.cpu_percent(interval=None):
        # that one keeps its baseline per calling thread, and the engine's worker thread may change.
        self._last_cpu: tuple[float, float] | None = self._cpu_sample()
        self._procs: dict[int, psutil.Process] = {}

    @staticmethod
    def _cpu_sample() -> tuple[float, float] | None:
        try:
            return _busy_and_total(psutil.cpu_times())
        except (psutil.Error, OSError):
            return None

    def _cpu_pct(self) -> float | None:
        now = self._cpu_sample()
        last, self._last_cpu = self._last_cpu, now
        if now is None or last is None:
            return None
        busy = now[0] - last[0]
        total = now[1] - last[1]
        if total <= 0:
            return None  # called twice within one clock tick: no information
        return round(min(100.0, max(0.0, 100.0 * busy / total)), 1)

    def collect(
        self, endpoint_pids: Mapping[int, str] | None = None, kids: Mapping[int, list[int]] | None = None
    ) -> HostSnapshot:
        """One reading; `endpoint_pids` maps a server's PID to its endpoint's name. `kids` (ppid -> PIDs,
        from a process scan just made, such as the port monitor's) saves one scan of /proc per server."""
        mem = swap = None
        try:
            mem = psutil.virtual_memory()
        except (psutil.Error, OSError):
            pass
        try:
            swap = psutil.swap_memory()
        except (psutil.Error, OSError, RuntimeError):
            pass
        try:
            load = tuple(round(x, 2) for x in psutil.getloadavg())
        except (psutil.Error, OSError, AttributeError):
            load = None
        return HostSnapshot(
            cpu_pct=self._cpu_pct(),
            mem_used_bytes=getattr(mem, "used", None),
            mem_total_bytes=getattr(mem, "total", None),
            mem_available_bytes=getattr(mem, "available", None),
            swap_used_bytes=getattr(swap, "used", None),
            swap_total_bytes=getattr(swap, "total", None),
            load_avg=load if load is not None and len(load) == 3 else None,  # type: ignore[arg-type]
            cpu_count=psutil.cpu_count(),
            mem_pressure_avg10=read_memory_pressure(self._pressure_path),
            processes=self._server_processes(endpoint_pids or {}, kids),
            collected_at=time.time(),
        )

    def _tracked(self, pid: int) -> psutil.Process:
        """The psutil.Process kept from earlier calls (its cpu_percent baseline), or a new one."""
        proc = self._procs.get(pid)
        if proc is not None and proc.is_running():  # is_running also catches a reused PID
            return proc
        proc = psutil.Process(pid)
        proc.cpu_percent(None)  # prime: the first call only sets the baseline
        self._procs[pid] = proc
        return proc

    def _server_processes(
        self, endpoint_pids: Mapping[int, str], kids: Mapping[int, list[int]] | None
    ) -> tuple[HostProcess, ...]:
        seen: set[int] = set()
        rows = []
        for pid, endpoint in sorted(endpoint_pids.items(), key=lambda item: (item[1], item[0])):
            rows.append(self._measure(pid, endpoint, seen, kids))
        # forget processes that are no longer servers or children of one (bounded either way)
        for pid in [p for p in self._procs if p not in seen]:
            del self._procs[pid]
        if len(self._procs) > _MAX_TRACKED:
            self._procs.clear()
        return tuple(rows)

    def _measure(self, pid: int, endpoint: str, seen: set[int], kids: Mapping[int, list[int]] | None) -> HostProcess:
        fresh = pid not in self._procs
        try:
            proc = self._tracked(pid)
            seen.add(pid)
            with proc.oneshot():
                name = safe_name(proc.name()) or ""
                rss = proc.memory_info().rss
                cpu = proc.cpu_percent(None)
        except psutil.NoSuchProcess:
            return HostProcess(endpoint=endpoint, pid=pid, status="gone")
        except (psutil.AccessDenied, psutil.ZombieProcess, OSError):
            return HostProcess(endpoint=endpoint, pid=pid, status="denied")
        children: list[int] = []
        if kids is not None:
            children = descendants(pid, kids)
        else:
            try:
                children = [child.pid for child in proc.children(recursive=True)]
            except (psutil.Error, OSError):
                pass
        counted = 0
        for child in children:
            try:
                tracked = self._tracked(child)
                seen.add(child)
                rss += tracked.memory_info().rss
                cpu += tracked.cpu_percent(None)
                counted += 1
            except (psutil.Error, OSError):
                continue  # exited between listing and reading, or not ours: count what we can
        return HostProcess(
            endpoint=endpoint,
            pid=pid,
            name=name,
            rss_bytes=rss,
            # a server seen for the first time has no CPU baseline yet: say "unknown", not 0
            cpu_pct=None if fresh else round(cpu, 1),
            children=counted,
        )
