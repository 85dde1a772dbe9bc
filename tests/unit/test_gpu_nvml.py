"""GpuCollector and the NVML wrapper, with only the lowest layer replaced.

There is no NVIDIA GPU or libnvidia-ml here, so the pynvml functions themselves are swapped for a
small fake driver (monkeypatched on the pynvml module, the same place the wrapper looks them up).
Everything above them — the wrapper, the collector, the psutil join — is the real code. Processes
joined to psutil are real: this test process and a real child.
"""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
import time

import pynvml
import pytest

from lpxtop.engine.gpu.collector import GpuCollector
from tests.support.nvml import GIB, Clock, FakeDriver, FakeGpu, collector, proc


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def child():
    """A real child process of this test, sleeping (bounded) until we end it."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        yield p
    finally:
        p.terminate()
        p.wait(timeout=5)


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(timeout=10)
    return p.pid


# The real path: this machine has no driver


def test_real_no_gpu_host_reports_unavailable_fast():
    gc = GpuCollector()
    started = time.perf_counter()
    snap = gc.collect({os.getpid(): "x"})
    assert time.perf_counter() - started < 1.0
    assert snap.status.startswith("unavailable: ")
    assert "NVML library not found" in snap.status
    assert snap.devices == ()
    gc.close()
    gc.close()  # idempotent


# Init failures


def test_library_not_found_is_remembered_and_retried_every_30_s(monkeypatch, clock):
    drv = FakeDriver([], init_error=pynvml.NVMLError_LibraryNotFound()).install(monkeypatch)
    gc = collector(clock)
    assert not gc.cheap(), "the first collect() tries the driver"
    first = gc.collect()
    assert first.status == (
        "unavailable: NVML library not found: no NVIDIA driver on this host (libnvidia-ml.so.1 is not installed)"
    )
    for _ in range(5):
        clock.t += 5.0
        assert gc.cheap(), "the failure is remembered: collect() needs no worker thread"
        assert gc.collect().status == first.status
    assert drv.calls["nvmlInit"] == 1  # not retried every second
    clock.t += 6.0  # 31 s after the first try
    assert not gc.cheap(), "a retry is due"
    drv.init_error = None
    drv.gpus = [FakeGpu()]
    assert gc.collect().status == "ok"
    assert not gc.cheap()
    assert drv.calls["nvmlInit"] == 2


def test_driver_library_mismatch_says_what_to_do(monkeypatch, clock):
    FakeDriver([], init_error=pynvml.NVMLError(pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)).install(
        monkeypatch
    )
    status = collector(clock).collect().status
    assert status.startswith("unavailable: NVIDIA driver/library version mismatch")
    assert "reboot" in status


def test_driver_not_loaded(monkeypatch, clock):
    FakeDriver([], init_error=pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)).install(monkeypatch)
    status = collector(clock).collect().status
    assert status.startswith("unavailable: NVIDIA driver not loaded")


def test_pynvml_without_nvmlinit(monkeypatch, clock):
    FakeDriver([]).install(monkeypatch, missing=("nvmlInit",))
    status = collector(clock).collect().status
    assert status.startswith("unavailable: the installed `pynvml` module is not nvidia-ml-py")


def test_driver_present_but_no_gpu(monkeypatch, clock):
    FakeDriver([]).install(monkeypatch)
    snap = collector(clock).collect()
    assert snap.status == "unavailable: the NVIDIA driver is loaded but reports no GPU"
    assert snap.driver_version == "550.54.15"


def test_driver_lost_mid_run_then_reinitialised(monkeypatch, clock):
    drv = FakeDriver([FakeGpu()]).install(monkeypatch)
    gc = collector(clock)
    assert gc.collect().status == "ok"
    drv.count_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    assert gc.collect().status.startswith("unavailable: NVIDIA driver not loaded")
    drv.count_error = None
    clock.t += 1.0
    assert gc.collect().status.startswith("unavailable: NVIDIA driver not loaded")  # waits before re-init
    clock.t += 30.0
    assert gc.collect().status == "ok"
    assert drv.calls["nvmlInit"] == 2


# A healthy host


def test_two_gpus_with_processes_joined_to_psutil_and_endpoints(monkeypatch, clock, child):
    me = os.getpid()
    gone = dead_pid()
    gpu0 = FakeGpu(
        uuid="GPU-0000",
        used=70 * GIB,
        compute=[proc(me, 1 * GIB), proc(child.pid, 60 * GIB)],
        graphics=[proc(me, 1 * GIB)],
    )
    gpu1 = FakeGpu(
        name="NVIDIA L4",
        uuid="GPU-1111",
        used=3 * GIB,
        total=24 * GIB,
        util=(0, 0),
        temp=38,
        power_mw=17_000,
        limit_mw=72_000,
        sm_mhz=210,
        compute=[proc(gone, None)],
    )
    FakeDriver([gpu0, gpu1]).install(monkeypatch)
    gc = collector(clock)
    snap = gc.collect({me: "local-vllm"})
    assert snap.status == "ok" and not snap.simulated
    assert snap.driver_version == "550.54.15"
    d0, d1 = snap.devices
    assert (d0.index, d0.name, d0.uuid) == (0, "NVIDIA H100 80GB HBM3", "GPU-0000")
    assert (d0.util_pct, d0.mem_util_pct, d0.temp_c, d0.sm_clock_mhz) == (57.0, 23.0, 61.0, 1980)
    assert d0.power_w == pytest.approx(312.5)
    assert d0.power_limit_w == pytest.approx(700.0)
    assert (d0.mem_used_bytes, d0.mem_total_bytes) == (70 * GIB, 80 * GIB)
    assert d0.mem_used_pct == pytest.approx(87.5)
    assert d0.notes == () and d0.mig_devices == () and not d0.lost

    by_pid = {p.pid: p for p in d0.processes}
    mine = by_pid[me]
    assert mine.kind == "compute+graphics"
    assert mine.used_bytes == 1 * GIB  # same allocation in both lists: not doubled
    assert mine.endpoint == "local-vllm"
    assert mine.user == getpass.getuser()
    assert mine.name and "python" in mine.name.lower()
    kid = by_pid[child.pid]
    assert kid.used_bytes == 60 * GIB
    assert kid.endpoint == "local-vllm"  # a child of the server counts for its endpoint
    assert kid.cmdline is not None and "time.sleep(30)" in kid.cmdline

    assert (d1.name, d1.power_w, d1.power_limit_w, d1.util_pct) == ("NVIDIA L4", 17.0, 72.0, 0.0)
    (ghost,) = d1.processes
    assert (ghost.pid, ghost.name, ghost.user, ghost.cmdline, ghost.used_bytes, ghost.endpoint) == (
        gone,
        None,
        None,
        None,
        None,
        None,
    )

    j = d0.to_json()
    for key in (
        "index",
        "name",
        "uuid",
        "util_pct",
        "mem_used_bytes",
        "mem_total_bytes",
        "temp_c",
        "power_w",
    ):
        assert key in j
    assert j["processes"][0].keys() >= {"pid", "name", "used_bytes"}
    assert snap.to_json()["devices"][1]["uuid"] == "GPU-1111"


def test_not_available_process_memory_sentinel(monkeypatch, clock):
    # older bindings hand back (unsigned long long)-1 instead of None
    FakeDriver([FakeGpu(compute=[proc(os.getpid(), 2**64 - 1)])]).install(monkeypatch)
    (p,) = collector(clock).collect().devices[0].processes
    assert p.used_bytes is None


# Degraded drivers and devices


def test_missing_functions_become_na_with_one_note(monkeypatch, clock):
    gpu = FakeGpu(
        errors={
            "nvmlDeviceGetTemperatureV": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
            "nvmlDeviceGetComputeRunningProcesses": pynvml.NVMLLibraryMismatchError("old driver"),
        },
        compute=[proc(os.getpid(), 5 * GIB)],
    )
    drv = FakeDriver([gpu]).install(monkeypatch, missing=("nvmlDeviceGetPowerUsage",))
    gc = collector(clock)
    dev = gc.collect().devices[0]
    assert dev.power_w is None
    assert dev.temp_c == 61.0  # fell back to the pre-R535 call
    assert [p.used_bytes for p in dev.processes] == [5 * GIB]  # fell back to _v2
    power_notes = [n for n in dev.notes if n.startswith("power draw:")]
    assert len(power_notes) == 1
    assert "nvmlDeviceGetPowerUsage is missing from the installed NVIDIA driver" in power_notes[0]
    assert "update the driver" in power_notes[0]
    assert not any("temperature" in n or "processes" in n for n in dev.notes)  # the fallbacks worked
    gc.collect()
    gc.collect()
    assert drv.calls["nvmlDeviceGetTemperatureV"] == 1  # a missing function is not asked again
    assert drv.calls["nvmlDeviceGetComputeRunningProcesses"] == 1
    assert drv.calls["nvmlDeviceGetTemperature"] == 3


def test_memory_used_leaves_the_driver_reservation_out_like_nvidia_smi(monkeypatch, clock):
    # R510+ drivers reserve some memory for themselves; nvidia-smi's "used" leaves it out (v2 call)
    idle = FakeGpu(used=0, reserved=512 * 2**20)
    drv = FakeDriver([idle]).install(monkeypatch)
    gc = collector(clock)
    dev = gc.collect().devices[0]
    assert dev.mem_used_bytes == 0 and dev.mem_total_bytes == 80 * GIB
    assert dev.notes == ()
    gc.collect()
    assert drv.calls["nvmlDeviceGetMemoryInfo"] == 2  # the v2 call each time, no v1 fallback


def test_memory_falls_back_to_v1_on_a_driver_without_v2_silently(monkeypatch, clock):
    old = FakeGpu(used=10 * GIB, reserved=512 * 2**20, has_memory_v2=False)
    drv = FakeDriver([old]).install(monkeypatch)
    gc = collector(clock)
    dev = gc.collect().devices[0]
    assert dev.mem_used_bytes == 10 * GIB + 512 * 2**20  # v1 counts the reservation: all it can say
    assert dev.notes == ()
    gc.collect()
    gc.collect()
    # v2 asked once, then remembered as missing; v1 asked every time
    assert drv.calls["nvmlDeviceGetMemoryInfo"] == 1 + 3


def test_not_supported_values_are_na(monkeypatch, clock):
    gpu = FakeGpu(
        name="NVIDIA GeForce RTX 3060",
        errors={
            "nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_NOT_SUPPORTED,
            "nvmlDeviceGetEnforcedPowerLimit": pynvml.NVML_ERROR_NOT_SUPPORTED,
            "nvmlDeviceGetPowerManagementLimit": pynvml.NVML_ERROR_NOT_SUPPORTED,
            "nvmlDeviceGetUtilizationRates": pynvml.NVML_ERROR_NO_PERMISSION,
        },
    )
    FakeDriver([gpu]).install(monkeypatch)
    dev = collector(clock).collect().devices[0]
    assert (dev.power_w, dev.power_limit_w, dev.util_pct) == (None, None, None)
    assert dev.mem_used_bytes == 40 * GIB and dev.temp_c == 61.0
    assert "power draw: not supported on this GPU" in dev.notes
    assert "power limit: not supported on this GPU" in dev.notes
    assert any(n.startswith("utilization: permission denied") for n in dev.notes)


def test_lost_gpu_is_flagged_and_others_still_read(monkeypatch, clock):
    FakeDriver([FakeGpu(uuid="GPU-0"), FakeGpu(uuid="GPU-1", lost=True)]).install(monkeypatch)
    snap = collector(clock).collect()
    assert snap.status == "ok"
    ok, lost = snap.devices
    assert not ok.lost and ok.mem_used_bytes == 40 * GIB
    assert lost.lost and lost.index == 1
    assert lost.mem_used_bytes is None and lost.power_w is None
    assert len(lost.notes) == 1 and lost.notes[0].startswith("GPU is lost (fell off the bus)")


def test_unexpected_exception_from_bindings_never_escapes(monkeypatch, clock):
    bad = UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
    FakeDriver([FakeGpu(errors={"nvmlDeviceGetName": bad})]).install(monkeypatch)
    dev = collector(clock).collect().devices[0]
    assert dev.name == "unknown GPU"
    assert any(n.startswith("name: unexpected UnicodeDecodeError from nvmlDeviceGetName") for n in dev.notes)


def test_mig_devices_listed_under_their_parent(monkeypatch, clock):
    me = os.getpid()
    slice0 = FakeGpu(name="NVIDIA A100-SXM4-80GB MIG 3g.40gb", uuid="MIG-0", used=30 * GIB, total=40 * GIB)
    slice0.compute = [proc(me, 29 * GIB)]
    slice2 = FakeGpu(name="NVIDIA A100-SXM4-80GB MIG 1g.10gb", uuid="MIG-2", used=1 * GIB, total=10 * GIB)
    parent = FakeGpu(name="NVIDIA A100-SXM4-80GB", uuid="GPU-A", used=31 * GIB, migs=[slice0, None, slice2])
    drv = FakeDriver([parent]).install(monkeypatch)
    snap = collector(clock).collect({me: "mig-endpoint"})
    (dev,) = snap.devices
    assert dev.name == "NVIDIA A100-SXM4-80GB" and dev.processes == ()
    assert drv.calls["nvmlDeviceGetComputeRunningProcesses"] == 2  # per MIG device, not the parent
    assert [m.index for m in dev.mig_devices] == [0, 2]
    m0, m2 = dev.mig_devices
    assert (m0.parent_index, m0.uuid, m0.mem_used_bytes, m0.mem_total_bytes) == (
        0,
        "MIG-0",
        30 * GIB,
        40 * GIB,
    )
    assert m0.label == "GPU 0 MIG 0" and m2.key == "gpu0/mig2"
    assert m0.is_mig and not dev.is_mig
    assert [(p.pid, p.used_bytes, p.endpoint) for p in m0.processes] == [(me, 29 * GIB, "mig-endpoint")]
    assert [d.key for d in snap.all_devices()] == ["gpu0", "gpu0/mig0", "gpu0/mig2"]
    assert [p.pid for _, p in snap.all_processes()] == [me]
    assert dev.to_json()["mig_devices"][1]["parent_index"] == 0


def test_close_shuts_nvml_down_once(monkeypatch, clock):
    drv = FakeDriver([FakeGpu()]).install(monkeypatch)
    gc = collector(clock)
    gc.collect()
    gc.close()
    gc.close()
    assert drv.calls["nvmlShutdown"] == 1
    assert gc.collect().status.startswith("unavailable:")  # closed stays closed, quietly


def test_close_without_init_does_not_call_the_driver(monkeypatch, clock):
    drv = FakeDriver([FakeGpu()]).install(monkeypatch)
    collector(clock).close()
    assert drv.calls["nvmlShutdown"] == 0
