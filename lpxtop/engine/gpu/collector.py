"""NVIDIA GPUs through NVML → GpuSnapshot: devices, MIG slices, and who holds their memory.

Per device also the power draw against its enforced limit, the energy counter
(`nvmlDeviceGetTotalEnergyConsumption`, mJ, Volta and newer) and the current clock-throttle reasons
(`nvmlDeviceGetCurrentClocksEventReasons`, before R535 `...ThrottleReasons`; decoded in accel/throttle.py).

Blocking; the engine calls `GpuCollector.collect` from a worker thread, one call at a time.
Every NVML call goes through `lpxtop.engine.gpu.nvml.Nvml`, so a missing driver, an old driver or an
unsupported value shows as N/A with a note, never as an exception.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import psutil

from lpxtop.engine.gpu.accel.throttle import nvml_throttle
from lpxtop.engine.gpu.nvml import Nvml, Problems
from lpxtop.engine.system.shown import redact_argv, safe_name
from lpxtop.model.gpu import GpuDevice, GpuProcess, GpuSnapshot

# nvml.h constants, literal so nothing here depends on the bindings being importable
_TEMPERATURE_GPU = 0
_CLOCK_SM = 1
_MIG_ENABLED = 1
_MAX_ANCESTRY = 16  # how far up the process tree to look for an endpoint's server


@dataclass(frozen=True)
class ProcessInfo:
    """What psutil could tell about a PID; None fields where it could not."""

    name: str | None
    user: str | None
    cmdline: str | None


def describe_process(pid: int) -> ProcessInfo:
    """Name, user and command line of `pid`; None fields when gone or not ours to read."""
    try:
        proc = psutil.Process(pid)
    except (psutil.Error, OSError, ValueError):
        return ProcessInfo(None, None, None)
    return ProcessInfo(safe_name(_safe(proc.name)), _safe(proc.username), _cmdline(proc))


def _safe(getter: Any) -> Any:
    try:
        return getter()
    except (psutil.Error, OSError):
        return None


def _cmdline(proc: psutil.Process) -> str | None:
    parts = _safe(proc.cmdline)
    if not parts:
        return None
    return " ".join(redact_argv(parts))  # keys on the command line masked, escapes removed


def endpoint_of(pid: int, endpoint_pids: Mapping[int, str]) -> str | None:
    """The endpoint served by `pid` or by one of its ancestors (vLLM's EngineCore is a child of
    the API server that holds the port)."""
    if not endpoint_pids:
        return None
    if pid in endpoint_pids:
        return endpoint_pids[pid]
    try:
        proc = psutil.Process(pid)
        for _ in range(_MAX_ANCESTRY):
            proc = proc.parent()
            if proc is None:
                return None
            if proc.pid in endpoint_pids:
                return endpoint_pids[proc.pid]
    except (psutil.Error, OSError):
        return None
    return None


def _num(value: Any, scale: float = 1.0) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value) * scale
    except (TypeError, ValueError):
        return None


def _int(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class GpuCollector:
    """Reads every NVIDIA GPU once per `collect()`; owns one `Nvml` context until `close()`."""

    def __init__(self, nvml: Nvml | None = None) -> None:
        self._nvml = nvml if nvml is not None else Nvml()
        self._driver_version: str | None = None

    @property
    def nvml(self) -> Nvml:
        return self._nvml

    def cheap(self) -> bool:
        """True when `collect()` would not touch the driver (NVML known unavailable for now): no need for a thread."""
        return self._nvml.known_unavailable()

    def collect(self, endpoint_pids: Mapping[int, str] | None = None) -> GpuSnapshot:
        """One reading of all GPUs; processes joined to psutil and to `endpoint_pids` (pid -> endpoint)."""
        try:
            return self._collect(endpoint_pids or {})
        except Exception as exc:  # noqa: BLE001 - a collector bug must not take the engine down
            return GpuSnapshot(
                status=f"unavailable: internal error reading GPUs: {type(exc).__name__}: {exc}"
            )

    def _collect(self, endpoint_pids: Mapping[int, str]) -> GpuSnapshot:
        nvml = self._nvml
        reason = nvml.ensure()
        if reason is not None:
            self._driver_version = None  # it may come back as another version (driver upgrade)
            return GpuSnapshot(status=f"unavailable: {reason}")
        problems = Problems()
        if self._driver_version is None:
            self._driver_version = nvml.query("nvmlSystemGetDriverVersion", quiet=True)
        count = nvml.query("nvmlDeviceGetCount", problems=problems, what="GPU count")
        if count is None:
            why = (
                problems.messages[0]
                if problems.messages
                else "the driver did not say how many GPUs there are"
            )
            return GpuSnapshot(status=f"unavailable: {why}", driver_version=self._driver_version)
        if count == 0:
            return GpuSnapshot(
                status="unavailable: the NVIDIA driver is loaded but reports no GPU",
                driver_version=self._driver_version,
                collected_at=time.time(),
            )
        devices = [self._read_gpu(i) for i in range(int(count))]
        devices = self._join_processes(devices, endpoint_pids)
        return GpuSnapshot(
            status="ok",
            devices=tuple(devices),
            collected_at=time.time(),
            driver_version=self._driver_version,
            notes=problems.as_tuple(),
        )

    def _read_gpu(self, index: int) -> GpuDevice:
        nvml = self._nvml
        problems = Problems()
        handle = nvml.query("nvmlDeviceGetHandleByIndex", index, problems=problems)
        if handle is None:
            return GpuDevice(
                index=index, name="unknown GPU", uuid="", lost=problems.lost, notes=problems.as_tuple()
            )
        fields = self._read_common(handle, problems, mig=False)
        if problems.lost:
            return GpuDevice(index=index, lost=True, notes=problems.as_tuple(), **_identity(fields))
        migs = self._read_migs(index, handle)
        util = self._utilization(handle, problems, mig=bool(migs))
        power_mw = nvml.query("nvmlDeviceGetPowerUsage", handle, problems=problems, what="power draw")
        limit_mw = nvml.query("nvmlDeviceGetEnforcedPowerLimit", handle, quiet=True)
        if limit_mw is None:
            limit_mw = nvml.query(
                "nvmlDeviceGetPowerManagementLimit", handle, problems=problems, what="power limit"
            )
        clock = nvml.query("nvmlDeviceGetClockInfo", handle, _CLOCK_SM, problems=problems, what="SM clock")
        temp = self._temperature(handle, problems)
        # Volta and newer; mJ since the driver was loaded
        energy_mj = nvml.query("nvmlDeviceGetTotalEnergyConsumption", handle, quiet=True)
        processes: tuple[GpuProcess, ...] = ()
        if not migs:
            # with MIG on, per-process memory is only meaningful per MIG device
            processes = self._processes(handle, problems)
        return GpuDevice(
            index=index,
            **_identity(fields),
            util_pct=_num(getattr(util, "gpu", None)),
            mem_util_pct=_num(getattr(util, "memory", None)),
            mem_used_bytes=fields["mem_used"],
            mem_total_bytes=fields["mem_total"],
            temp_c=temp,
            power_w=_num(power_mw, 0.001),
            power_limit_w=_num(limit_mw, 0.001),
            sm_clock_mhz=_int(clock),
            processes=processes,
            mig_devices=migs,
            lost=problems.lost,
            notes=problems.as_tuple(),
            vendor="nvidia",
            energy_j=_num(energy_mj, 0.001),
            throttle=self._throttle(handle),
        )

    def _utilization(self, handle: Any, problems: Problems, *, mig: bool) -> Any:
        """Utilisation rates; in MIG mode NVML reports none (NOT_SUPPORTED): unavailable, said once, never 0 %."""
        if not mig:
            return self._nvml.query("nvmlDeviceGetUtilizationRates", handle, problems=problems, what="utilization")
        util = self._nvml.query("nvmlDeviceGetUtilizationRates", handle, quiet=True)
        if util is None:
            problems.add("utilization: NVML does not report it in MIG mode (for the GPU or its MIG devices)")
        return util

    def _throttle(self, handle: Any) -> tuple[str, ...] | None:
        """Why the clocks are down now: the R535+ call, else its older name; None when neither answers."""
        nvml = self._nvml
        mask = nvml.query("nvmlDeviceGetCurrentClocksEventReasons", handle, quiet=True)
        if mask is None:
            mask = nvml.query("nvmlDeviceGetCurrentClocksThrottleReasons", handle, quiet=True)
        return nvml_throttle(mask)

    def _read_common(self, handle: Any, problems: Problems, *, mig: bool) -> dict:
        nvml = self._nvml
        name = nvml.query("nvmlDeviceGetName", handle, problems=problems, what="name")
        uuid = (
            None if problems.lost else nvml.query("nvmlDeviceGetUUID", handle, problems=problems, what="UUID")
        )
        mem = None if problems.lost else self._memory(handle, problems)
        return {
            "name": str(name) if name is not None else ("unknown MIG device" if mig else "unknown GPU"),
            "uuid": str(uuid) if uuid is not None else "",
            "mem_used": _int(getattr(mem, "used", None)),
            "mem_total": _int(getattr(mem, "total", None)),
        }

    def _memory(self, handle: Any, problems: Problems) -> Any:
        """Memory info, `used` as nvidia-smi shows it: the v2 call (R510+) leaves the driver's own
        reservation out of `used`; the v1 call counts it (about 0.5 GiB on an idle H100), so an idle
        GPU would not read 0. Drivers without v2 get v1, silently."""
        nvml = self._nvml
        version = nvml.constant("nvmlMemory_v2")
        if version is not None:
            mem = nvml.query("nvmlDeviceGetMemoryInfo", handle, version, quiet=True, variant="_v2")
            if mem is not None:
                return mem
        return nvml.query("nvmlDeviceGetMemoryInfo", handle, problems=problems, what="memory")

    def _temperature(self, handle: Any, problems: Problems) -> float | None:
        # nvmlDeviceGetTemperatureV is the current call; drivers before R535 only have the old one
        nvml = self._nvml
        value = nvml.query("nvmlDeviceGetTemperatureV", handle, _TEMPERATURE_GPU, quiet=True)
        if value is None:
            value = nvml.query(
                "nvmlDeviceGetTemperature", handle, _TEMPERATURE_GPU, problems=problems, what="temperature"
            )
        return _num(value)

    def _read_migs(self, parent_index: int, handle: Any) -> tuple[GpuDevice, ...]:
        nvml = self._nvml
        mode = nvml.query("nvmlDeviceGetMigMode", handle, quiet=True)
        current = mode[0] if isinstance(mode, (list, tuple)) and mode else None
        if current != _MIG_ENABLED:
            return ()
        slots = _int(nvml.query("nvmlDeviceGetMaxMigDeviceCount", handle, quiet=True)) or 0
        migs = []
        for slot in range(min(slots, 64)):
            mig_handle = nvml.query("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot, quiet=True)
            if mig_handle is None:
                continue  # an empty slot: NVML says NOT_FOUND
            problems = Problems()
            fields = self._read_common(mig_handle, problems, mig=True)
            processes = () if problems.lost else self._processes(mig_handle, problems)
            migs.append(
                GpuDevice(
                    index=slot,
                    parent_index=parent_index,
                    **_identity(fields),
                    mem_used_bytes=fields["mem_used"],
                    mem_total_bytes=fields["mem_total"],
                    processes=processes,
                    lost=problems.lost,
                    notes=problems.as_tuple(),
                    vendor="nvidia",
                )
            )
        return tuple(migs)

    def _processes(self, handle: Any, problems: Problems) -> tuple[GpuProcess, ...]:
        compute = self._running(handle, "Compute", problems)
        graphics = self._running(handle, "Graphics", problems)
        merged: dict[int, tuple[int | None, str]] = {}
        for kind, entries in (("compute", compute), ("graphics", graphics)):
            for entry in entries:
                pid = _int(getattr(entry, "pid", None))
                if pid is None:
                    continue
                used = _used_bytes(getattr(entry, "usedGpuMemory", None))
                if pid in merged:
                    # the same allocation shows in both lists: keep the larger, do not add
                    old_used, old_kind = merged[pid]
                    best = max((u for u in (old_used, used) if u is not None), default=None)
                    merged[pid] = (best, old_kind if old_kind == kind else "compute+graphics")
                else:
                    merged[pid] = (used, kind)
        return tuple(
            GpuProcess(pid=pid, name=None, used_bytes=used, kind=kind)
            for pid, (used, kind) in sorted(merged.items())
        )

    def _running(self, handle: Any, which: str, problems: Problems) -> list:
        nvml = self._nvml
        function = f"nvmlDeviceGet{which}RunningProcesses"
        # the unversioned call maps to _v3; drivers before R510 only have _v2
        entries = nvml.query(function, handle, quiet=True)
        if entries is None:
            entries = nvml.query(
                f"{function}_v2", handle, problems=problems, what=f"{which.lower()} processes"
            )
        return list(entries) if isinstance(entries, Iterable) else []

    def _join_processes(self, devices: list[GpuDevice], endpoint_pids: Mapping[int, str]) -> list[GpuDevice]:
        return join_processes(devices, endpoint_pids)

    def close(self) -> None:
        """Shut NVML down; safe to call twice."""
        self._nvml.close()


def join_processes(devices: Iterable[GpuDevice], endpoint_pids: Mapping[int, str]) -> list[GpuDevice]:
    """Each device's processes (MIG devices' too) joined to psutil (name, user, command line) and to the
    endpoint whose server is the process or an ancestor of it; every vendor's devices alike."""
    infos: dict[int, ProcessInfo] = {}
    endpoints: dict[int, str | None] = {}

    def join(proc: GpuProcess) -> GpuProcess:
        if proc.pid not in infos:
            infos[proc.pid] = describe_process(proc.pid)
            endpoints[proc.pid] = endpoint_of(proc.pid, endpoint_pids)
        info = infos[proc.pid]
        return GpuProcess(
            pid=proc.pid,
            name=info.name,
            used_bytes=proc.used_bytes,
            user=info.user,
            cmdline=info.cmdline,
            endpoint=endpoints[proc.pid],
            kind=proc.kind,
        )

    def join_device(dev: GpuDevice) -> GpuDevice:
        return replace(
            dev,
            processes=tuple(join(p) for p in dev.processes),
            mig_devices=tuple(join_device(m) for m in dev.mig_devices),
        )

    return [join_device(d) for d in devices]


def _identity(fields: dict) -> dict:
    return {"name": fields["name"], "uuid": fields["uuid"]}


def _used_bytes(value: Any) -> int | None:
    used = _int(value)
    # NVML_VALUE_NOT_AVAILABLE is (unsigned long long)-1; newer bindings already map it to None
    if used is None or used < 0 or used >= 2**64 - 1:
        return None
    return used
