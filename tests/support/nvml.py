"""A fake NVIDIA driver: the pynvml functions themselves replaced (monkeypatched on the pynvml module, where
the wrapper looks them up), for the GPU collector tests; everything above them is the real code."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pynvml
import pytest

from lpxtop.engine.gpu.collector import GpuCollector
from lpxtop.engine.gpu.nvml import Nvml

GIB = 2**30



FUNCTIONS = (
    "nvmlInit",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetTemperatureV",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
)



def proc(pid: int, used: int | None) -> SimpleNamespace:
    return SimpleNamespace(
        pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF
    )



class FakeGpu:
    """One device as the driver would describe it. `errors` maps a function name to an NVML code
    (or an exception instance) that function raises for this device."""

    def __init__(self, name="NVIDIA H100 80GB HBM3", uuid="GPU-aaaa", used=40 * GIB, total=80 * GIB, **kw):
        self.name = name
        self.uuid = uuid
        self.used = used
        self.total = total
        self.util = kw.get("util", (57, 23))
        self.temp = kw.get("temp", 61)
        self.power_mw = kw.get("power_mw", 312_500)
        self.limit_mw = kw.get("limit_mw", 700_000)
        self.sm_mhz = kw.get("sm_mhz", 1980)
        self.compute = kw.get("compute", [])
        self.graphics = kw.get("graphics", [])
        self.errors: dict = kw.get("errors", {})
        self.lost = kw.get("lost", False)
        self.migs: list[FakeGpu | None] | None = kw.get("migs")  # None: MIG not supported
        # The driver's own reservation: the v1 memory call counts it as used, v2 reports it apart
        self.reserved = kw.get("reserved", 0)
        self.has_memory_v2 = kw.get("has_memory_v2", True)  # False: a driver before R510
        self.energy_mj = kw.get("energy_mj", 123_456_789)  # since the driver loaded
        self.clock_events = kw.get("clock_events", pynvml.nvmlClocksEventReasonGpuIdle)
        # MIG mode on: NVML answers NOT_SUPPORTED for utilisation (the GPU's and its MIG devices')
        if self.migs:
            self.errors.setdefault("nvmlDeviceGetUtilizationRates", pynvml.NVML_ERROR_NOT_SUPPORTED)



class FakeDriver:
    """The pynvml functions lpxtop uses, answering from FakeGpu objects; counts every call."""

    def __init__(self, gpus: list[FakeGpu], init_error: BaseException | None = None, version="550.54.15"):
        self.gpus = gpus
        self.init_error = init_error
        self.version = version
        self.calls: Counter[str] = Counter()
        self.count_error: int | None = None

    def install(self, monkeypatch: pytest.MonkeyPatch, missing: tuple[str, ...] = ()) -> FakeDriver:
        for name in FUNCTIONS:
            monkeypatch.setattr(pynvml, name, self._counted(name), raising=False)
        for name in missing:
            monkeypatch.delattr(pynvml, name)
        return self

    def _counted(self, name):
        impl = getattr(self, "_" + name)

        def call(*args):
            self.calls[name] += 1
            return impl(*args)

        return call

    @staticmethod
    def _fail(gpu: FakeGpu, name: str) -> None:
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        err = gpu.errors.get(name)
        if isinstance(err, BaseException):
            raise err
        if err is not None:
            raise pynvml.NVMLError(err)

    def _answer(self, gpu: FakeGpu, name: str, value):
        self._fail(gpu, name)
        return value

    def _nvmlInit(self):
        if self.init_error is not None:
            raise self.init_error

    def _nvmlShutdown(self):
        pass

    def _nvmlSystemGetDriverVersion(self):
        return self.version

    def _nvmlDeviceGetCount(self):
        if self.count_error is not None:
            raise pynvml.NVMLError(self.count_error)
        return len(self.gpus)

    def _nvmlDeviceGetHandleByIndex(self, i):
        return self.gpus[i]

    def _nvmlDeviceGetName(self, g):
        return self._answer(g, "nvmlDeviceGetName", g.name)

    def _nvmlDeviceGetUUID(self, g):
        return self._answer(g, "nvmlDeviceGetUUID", g.uuid)

    def _nvmlDeviceGetMemoryInfo(self, g, version=None):
        free = g.total - g.used - g.reserved
        if version is None:
            return self._answer(
                g, "nvmlDeviceGetMemoryInfo", SimpleNamespace(total=g.total, used=g.used + g.reserved, free=free)
            )
        assert version == pynvml.nvmlMemory_v2
        if not g.has_memory_v2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        memory = SimpleNamespace(total=g.total, reserved=g.reserved, used=g.used, free=free)
        return self._answer(g, "nvmlDeviceGetMemoryInfo", memory)

    def _nvmlDeviceGetUtilizationRates(self, g):
        return self._answer(
            g, "nvmlDeviceGetUtilizationRates", SimpleNamespace(gpu=g.util[0], memory=g.util[1])
        )

    def _nvmlDeviceGetPowerUsage(self, g):
        return self._answer(g, "nvmlDeviceGetPowerUsage", g.power_mw)

    def _nvmlDeviceGetEnforcedPowerLimit(self, g):
        return self._answer(g, "nvmlDeviceGetEnforcedPowerLimit", g.limit_mw)

    def _nvmlDeviceGetPowerManagementLimit(self, g):
        return self._answer(g, "nvmlDeviceGetPowerManagementLimit", g.limit_mw)

    def _nvmlDeviceGetClockInfo(self, g, clock):
        assert clock == pynvml.NVML_CLOCK_SM
        return self._answer(g, "nvmlDeviceGetClockInfo", g.sm_mhz)

    def _nvmlDeviceGetTemperatureV(self, g, sensor):
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._answer(g, "nvmlDeviceGetTemperatureV", g.temp)

    def _nvmlDeviceGetTemperature(self, g, sensor):
        return self._answer(g, "nvmlDeviceGetTemperature", g.temp)

    def _nvmlDeviceGetMigMode(self, g):
        if g.migs is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self._answer(g, "nvmlDeviceGetMigMode", [pynvml.NVML_DEVICE_MIG_ENABLE] * 2)

    def _nvmlDeviceGetMaxMigDeviceCount(self, g):
        return len(g.migs or [])

    def _nvmlDeviceGetMigDeviceHandleByIndex(self, g, i):
        mig = (g.migs or [])[i]
        if mig is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return mig

    def _nvmlDeviceGetComputeRunningProcesses(self, g):
        return self._answer(g, "nvmlDeviceGetComputeRunningProcesses", list(g.compute))

    def _nvmlDeviceGetComputeRunningProcesses_v2(self, g):
        return self._answer(g, "nvmlDeviceGetComputeRunningProcesses_v2", list(g.compute))

    def _nvmlDeviceGetGraphicsRunningProcesses(self, g):
        return self._answer(g, "nvmlDeviceGetGraphicsRunningProcesses", list(g.graphics))

    def _nvmlDeviceGetGraphicsRunningProcesses_v2(self, g):
        return self._answer(g, "nvmlDeviceGetGraphicsRunningProcesses_v2", list(g.graphics))

    def _nvmlDeviceGetTotalEnergyConsumption(self, g):
        return self._answer(g, "nvmlDeviceGetTotalEnergyConsumption", g.energy_mj)

    def _nvmlDeviceGetCurrentClocksEventReasons(self, g):
        return self._answer(g, "nvmlDeviceGetCurrentClocksEventReasons", g.clock_events)

    def _nvmlDeviceGetCurrentClocksThrottleReasons(self, g):
        return self._answer(g, "nvmlDeviceGetCurrentClocksThrottleReasons", g.clock_events)



class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t



def collector(clock: Clock) -> GpuCollector:
    return GpuCollector(Nvml(clock=clock))
