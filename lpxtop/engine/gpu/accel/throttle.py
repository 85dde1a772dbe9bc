"""Clock-throttle reasons: NVML's bit mask → the keys of `lpxtop.model.gpu.THROTTLE_REASONS`, worst first.

NVML (nvml.h, `nvmlClocksEventReason*`, called `nvmlClocksThrottleReason*` before driver R535) reports why
the clocks are below their maximum as a bit mask from `nvmlDeviceGetCurrentClocksEventReasons` (older:
`nvmlDeviceGetCurrentClocksThrottleReasons`). Only the reasons that slow work down are kept: an idle GPU
(0x1), clocks set by the user or an application (0x2) and the display clock (0x100) are no throttling.
The literal bits keep this module free of the bindings.
"""

from __future__ import annotations

from lpxtop.model.gpu import THROTTLE_REASONS

# nvml.h: nvmlClocksEventReason* / nvmlClocksThrottleReason*
NVML_BITS: dict[str, int] = {
    "power_cap": 0x4,  # SwPowerCap
    "hw_slowdown": 0x8,  # HwSlowdown (thermal or power-supply; the two below say which when known)
    "sync_boost": 0x10,  # SyncBoost
    "sw_thermal": 0x20,  # SwThermalSlowdown
    "hw_thermal": 0x40,  # HwThermalSlowdown
    "power_brake": 0x80,  # HwPowerBrakeSlowdown
    "board_limit": 0x200,  # BoardLimit (throttle-era name only)
    "reliability": 0x400,  # Reliability (throttle-era name only)
}
_ORDER = tuple(key for key, _, _ in THROTTLE_REASONS)


def nvml_throttle(mask: object) -> tuple[str, ...] | None:
    """The slowing reasons in `mask`, worst first; None when `mask` is no bit mask."""
    if isinstance(mask, bool) or not isinstance(mask, int) or mask < 0:
        return None
    found = {key for key, bit in NVML_BITS.items() if mask & bit}
    if "hw_thermal" in found or "power_brake" in found:
        found.discard("hw_slowdown")  # HW slowdown is set with either; the specific one says more
    return tuple(key for key in _ORDER if key in found)
