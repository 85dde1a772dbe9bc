"""Every accelerator on the host in one GpuSnapshot: NVIDIA through NVML, AMD through AMD SMI or sysfs.

The engine and every reader see one list of devices, each with its `vendor`; AMD devices are numbered
after the NVIDIA ones. With neither vendor present the status is NVML's own line (what most users of a
GPU-less host expect to read) and the AMD finding is a note beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from lpxtop.engine.gpu.accel.amd import AmdGpuCollector
from lpxtop.engine.gpu.collector import GpuCollector, join_processes
from lpxtop.model.gpu import GpuSnapshot


class AcceleratorCollector:
    """The engine's GPU source: `collect()` and `cheap()` as GpuCollector's, over both vendors."""

    def __init__(self, nvidia: GpuCollector | None = None, amd: AmdGpuCollector | None = None) -> None:
        self.nvidia = nvidia if nvidia is not None else GpuCollector()
        self.amd = amd if amd is not None else AmdGpuCollector()

    def cheap(self) -> bool:
        """True when `collect()` would touch no driver: neither vendor is due for a look."""
        return self.nvidia.cheap() and self.amd.cheap()

    def collect(self, endpoint_pids: Mapping[int, str] | None = None) -> GpuSnapshot:
        nv = self.nvidia.collect(endpoint_pids)
        amd = self.amd.collect(first_index=len(nv.devices))
        if not amd.devices:
            if nv.devices or nv.ok:
                return nv
            why = amd.status.removeprefix("unavailable: ")
            return replace(nv, notes=(*nv.notes, f"AMD: {why}"))
        devices = tuple(join_processes(amd.devices, endpoint_pids or {}))
        if not nv.devices:
            return replace(amd, devices=devices)
        versions = " + ".join(v for v in (nv.driver_version, amd.driver_version) if v)
        return GpuSnapshot(
            status="ok",
            devices=(*nv.devices, *devices),
            collected_at=amd.collected_at or nv.collected_at,
            driver_version=versions or None,
            notes=(*nv.notes, *amd.notes),
        )

    def close(self) -> None:
        self.nvidia.close()
        self.amd.close()
