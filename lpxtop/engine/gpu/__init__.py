"""Accelerators: memory, utilisation, power and throttling per device and process.

- `collector`: the GPU collector the engine runs, over NVML, AMD and the simulated devices.
- `nvml`: NVIDIA through `pynvml` (nvidia-ml-py); `simulated`: devices for the demo and tests.
- `accel`: AMD (AMD SMI or the amdgpu driver's sysfs files), DRM fdinfo, throttle reasons, energy per token.

The names below are imported on first use (lpxtop/lazy.py): NVML's and AMD's libraries load only when a
collector is made.
"""

from lpxtop.lazy import lazy_exports

__all__ = [
    "AcceleratorCollector",
    "EnergyMeter",
    "GpuCollector",
    "REPLAY_LOOKBACK_S",
    "SimulatedGpuCollector",
    "energy_between",
]

__getattr__, __dir__ = lazy_exports(__name__, {
    "lpxtop.engine.gpu.collector": ("GpuCollector",),
    "lpxtop.engine.gpu.simulated": ("SimulatedGpuCollector",),
    "lpxtop.engine.gpu.accel.collector": ("AcceleratorCollector",),
    "lpxtop.engine.gpu.accel.energy": ("EnergyMeter", "energy_between", "REPLAY_LOOKBACK_S"),
})
