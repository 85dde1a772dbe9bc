"""Accelerators: memory, utilisation, power and throttling per device and process.

- `collector`: the GPU collector the engine runs, over NVML, AMD and the simulated devices.
- `nvml`: NVIDIA through `pynvml` (nvidia-ml-py); `simulated`: devices for the demo and tests.
- `accel`: AMD (AMD SMI or the amdgpu driver's sysfs files), DRM fdinfo, throttle reasons, energy per token.
"""
