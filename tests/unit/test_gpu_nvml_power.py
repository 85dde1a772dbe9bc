"""NVML power, energy and clock-throttle readings, against the same fake driver as test_gpu_nvml.py
(only the pynvml functions are replaced; the wrapper and the collector are the real code)."""

from __future__ import annotations

import pynvml
import pytest

from lpxtop.engine.gpu.accel.throttle import nvml_throttle
from lpxtop.model.gpu import GpuDevice
from tests.support.nvml import GIB, Clock, FakeDriver, FakeGpu, collector


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_power_against_limit_energy_and_no_throttle_when_idle(monkeypatch, clock):
    FakeDriver([FakeGpu(power_mw=698_000, limit_mw=700_000, energy_mj=5_000_250)]).install(monkeypatch)
    dev = collector(clock).collect().devices[0]
    assert (dev.power_w, dev.power_limit_w) == (pytest.approx(698.0), pytest.approx(700.0))
    assert dev.energy_j == pytest.approx(5000.25)
    assert dev.vendor == "nvidia"
    assert dev.throttle == ()  # idle is no throttling
    assert dev.throttle_word is None
    j = dev.to_json()
    assert (j["vendor"], j["energy_j"], j["throttle"]) == ("nvidia", pytest.approx(5000.25), [])


def test_throttle_reasons_worst_first_with_one_word(monkeypatch, clock):
    mask = (pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonHwSlowdown
            | pynvml.nvmlClocksEventReasonHwThermalSlowdown | pynvml.nvmlClocksEventReasonSyncBoost)
    FakeDriver([FakeGpu(clock_events=mask)]).install(monkeypatch)
    dev = collector(clock).collect().devices[0]
    # HW slowdown comes with HW thermal: the specific reason stands for it
    assert dev.throttle == ("hw_thermal", "power_cap", "sync_boost")
    assert dev.throttle_word == "thermal"


def test_power_cap_alone(monkeypatch, clock):
    FakeDriver([FakeGpu(clock_events=pynvml.nvmlClocksEventReasonSwPowerCap)]).install(monkeypatch)
    dev = collector(clock).collect().devices[0]
    assert dev.throttle == ("power_cap",) and dev.throttle_word == "pwr-cap"


def test_a_driver_before_r535_answers_through_the_throttle_name(monkeypatch, clock):
    gpu = FakeGpu(clock_events=pynvml.nvmlClocksThrottleReasonSwThermalSlowdown)
    drv = FakeDriver([gpu]).install(monkeypatch, missing=("nvmlDeviceGetCurrentClocksEventReasons",))
    gc = collector(clock)
    dev = gc.collect().devices[0]
    assert dev.throttle == ("sw_thermal",)
    assert dev.notes == ()  # the missing newer name is no news
    gc.collect()
    assert drv.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 2


def test_no_energy_counter_or_throttle_reasons_is_none_quietly(monkeypatch, clock):
    # a pre-Volta GPU: the energy counter is NOT_SUPPORTED; a GPU that will not say why its clocks are down
    gpu = FakeGpu(errors={
        "nvmlDeviceGetTotalEnergyConsumption": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "nvmlDeviceGetCurrentClocksEventReasons": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "nvmlDeviceGetCurrentClocksThrottleReasons": pynvml.NVML_ERROR_NOT_SUPPORTED,
    })
    FakeDriver([gpu]).install(monkeypatch)
    dev = collector(clock).collect().devices[0]
    assert dev.energy_j is None and dev.throttle is None and dev.throttle_word is None
    assert dev.notes == ()
    assert dev.to_json()["throttle"] is None


def test_mig_mode_utilisation_is_unavailable_not_zero(monkeypatch, clock):
    slice0 = FakeGpu(name="NVIDIA A100 MIG 3g.40gb", uuid="MIG-0", used=30 * GIB, total=40 * GIB)
    slice1 = FakeGpu(name="NVIDIA A100 MIG 3g.40gb", uuid="MIG-1", used=2 * GIB, total=40 * GIB)
    parent = FakeGpu(name="NVIDIA A100-SXM4-80GB", uuid="GPU-A", migs=[slice0, slice1])
    FakeDriver([parent]).install(monkeypatch)
    (dev,) = collector(clock).collect().devices
    assert dev.util_pct is None and dev.mem_util_pct is None
    assert "utilization: NVML does not report it in MIG mode (for the GPU or its MIG devices)" in dev.notes
    assert not any("not supported" in n for n in dev.notes)
    assert [(m.uuid, m.mem_used_bytes, m.mem_total_bytes, m.util_pct) for m in dev.mig_devices] == [
        ("MIG-0", 30 * GIB, 40 * GIB, None), ("MIG-1", 2 * GIB, 40 * GIB, None)]
    assert all(m.vendor == "nvidia" for m in dev.mig_devices)
    assert dev.to_json()["util_pct"] is None


def test_throttle_mask_decoding():
    assert nvml_throttle(0) == ()
    assert nvml_throttle(0x1 | 0x2 | 0x100) == ()  # idle, application clocks, display clock
    assert nvml_throttle(0x8) == ("hw_slowdown",)
    assert nvml_throttle(0x80 | 0x8) == ("power_brake",)
    assert nvml_throttle(0x200 | 0x400) == ("board_limit", "reliability")
    assert nvml_throttle(None) is None and nvml_throttle(-1) is None and nvml_throttle(True) is None
    assert GpuDevice(index=0, name="x", uuid="", throttle=("reliability",)).throttle_word == "reliab"
