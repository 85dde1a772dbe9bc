"""Accelerators beyond NVML's own collector (engine/gpu/collector.py, engine/gpu/nvml.py): AMD GPUs, throttle reasons,
energy per output token, and the collector that puts every vendor's devices in one GpuSnapshot.

- `collector.AcceleratorCollector`  NVIDIA (NVML) and AMD (AMD SMI through pyrsmi, or amdgpu sysfs) in one
- `amd.AmdGpuCollector`             AMD GPUs: pyrsmi where installed, the amdgpu driver's sysfs files always
- `amd_sysfs`                       the amdgpu sysfs reader (root injectable for tests: LPXTOP_SYSFS_ROOT)
- `amd_smi`                         the one guarded door to pyrsmi (AMD SMI)
- `throttle.nvml_throttle`          NVML's clock-event bit mask → reason keys, worst first
- `energy.EnergyMeter`              joules per output token per endpoint, from the energy and token counters
"""

from lpxtop.lazy import lazy_exports

__all__ = ["AcceleratorCollector", "AmdGpuCollector", "EnergyMeter", "nvml_throttle"]

# the face, without importing every part on `import lpxtop.engine.gpu.accel` (lpxtop/lazy.py)
__getattr__, __dir__ = lazy_exports(__name__, {
    "lpxtop.engine.gpu.accel.collector": ("AcceleratorCollector",),
    "lpxtop.engine.gpu.accel.amd": ("AmdGpuCollector",),
    "lpxtop.engine.gpu.accel.energy": ("EnergyMeter",),
    "lpxtop.engine.gpu.accel.throttle": ("nvml_throttle",),
})
