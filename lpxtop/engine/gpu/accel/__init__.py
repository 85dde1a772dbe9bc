"""Accelerators beyond NVML's own collector (engine/gpu/collector.py, engine/gpu/nvml.py): AMD GPUs, throttle reasons,
energy per output token, and the collector that puts every vendor's devices in one GpuSnapshot.

- `collector.AcceleratorCollector`  NVIDIA (NVML) and AMD (AMD SMI through pyrsmi, or amdgpu sysfs) in one
- `amd.AmdGpuCollector`             AMD GPUs: pyrsmi where installed, the amdgpu driver's sysfs files always
- `amd_sysfs`                       the amdgpu sysfs reader (root injectable for tests: LPXTOP_SYSFS_ROOT)
- `amd_smi`                         the one guarded door to pyrsmi (AMD SMI)
- `throttle.nvml_throttle`          NVML's clock-event bit mask → reason keys, worst first
- `energy.EnergyMeter`              joules per output token per endpoint, from the energy and token counters
"""

from __future__ import annotations

__all__ = ["AcceleratorCollector", "AmdGpuCollector", "EnergyMeter", "nvml_throttle"]


def __getattr__(name: str):  # the face, without importing every part on `import lpxtop.engine.gpu.accel`
    if name == "AcceleratorCollector":
        from lpxtop.engine.gpu.accel.collector import AcceleratorCollector

        return AcceleratorCollector
    if name == "AmdGpuCollector":
        from lpxtop.engine.gpu.accel.amd import AmdGpuCollector

        return AmdGpuCollector
    if name == "EnergyMeter":
        from lpxtop.engine.gpu.accel.energy import EnergyMeter

        return EnergyMeter
    if name == "nvml_throttle":
        from lpxtop.engine.gpu.accel.throttle import nvml_throttle

        return nvml_throttle
    raise AttributeError(name)
