"""AMD GPUs: the amdgpu sysfs reader against a fake sysfs tree in a temporary directory, the pyrsmi door
against a stand-in package written to disk, and the collector that merges them with NVML's devices."""

from __future__ import annotations

import logging
import os

import pynvml
import pytest

from lpxtop.engine.gpu.accel.amd import NO_AMD, AmdGpuCollector
from lpxtop.engine.gpu.accel.amd_smi import AmdSmi
from lpxtop.engine.gpu.accel.amd_sysfs import SYSFS_ROOT_ENV, find_cards, read_card, same_pci
from lpxtop.engine.gpu.accel.collector import AcceleratorCollector
from lpxtop.engine.gpu.accel.drm_fdinfo import parse_fdinfo
from lpxtop.engine.gpu.collector import GpuCollector
from lpxtop.engine.gpu.nvml import Nvml
from tests.support.amd_fakes import GIB, card, drm_client, install_pyrsmi, mi300x
from tests.support.nvml import Clock, FakeDriver, FakeGpu


@pytest.fixture
def clock() -> Clock:
    return Clock()


def amd(tmp_path, clock, **kw) -> AmdGpuCollector:
    return AmdGpuCollector(root=str(tmp_path), use_smi=kw.pop("use_smi", False), clock=clock, **kw)


def test_sysfs_reader_on_an_mi300x_tree(tmp_path):
    mi300x(tmp_path, 0)
    card(tmp_path, 1, "0000:01:00.0", vendor="0x10de", files={"mem_info_vram_used": 1})  # an NVIDIA card
    (found,) = find_cards(str(tmp_path))
    assert (found.card, found.pci_address) == ("card0", "0000:c1:00.0")
    r = read_card(found)
    assert (r.name, r.unique_id, r.device_id) == ("AMD Instinct MI300X", "4f1a2b3c4d5e6f70", "0x74a1")
    assert (r.vram_used, r.vram_total) == (150 * GIB, 192 * GIB)
    assert (r.busy_pct, r.mem_busy_pct) == (87.0, 41.0)
    assert r.power_w == pytest.approx(612.0)  # power1_input when there is no power1_average
    assert r.power_cap_w == pytest.approx(750.0)
    assert r.temp_c == pytest.approx(71.0)  # junction: MI300 has no edge sensor
    assert r.energy_j == pytest.approx(9_876_543.21)
    assert r.notes == []


def test_power_average_is_preferred_and_edge_temperature(tmp_path):
    mi300x(tmp_path, 0, hwmon={"power1_average": 300_500_000, "temp2_input": 55_000, "temp2_label": "edge"})
    r = read_card(find_cards(str(tmp_path))[0])
    assert r.power_w == pytest.approx(300.5)
    assert r.temp_c == pytest.approx(55.0)


def test_missing_files_are_none_and_unreadable_ones_say_so(tmp_path):
    card(tmp_path, 0, "0000:03:00.0", files={"mem_info_vram_total": 16 * GIB, "gpu_busy_percent": IsADirectoryError})
    r = read_card(find_cards(str(tmp_path))[0])
    assert r.vram_total == 16 * GIB and r.vram_used is None and r.busy_pct is None
    assert r.power_w is None and r.temp_c is None and r.energy_j is None and r.name is None
    assert len(r.notes) == 1 and r.notes[0].startswith("utilization: gpu_busy_percent")


def test_root_comes_from_the_environment(tmp_path, monkeypatch):
    mi300x(tmp_path, 0)
    monkeypatch.setenv(SYSFS_ROOT_ENV, str(tmp_path))
    assert [c.card for c in find_cards()] == ["card0"]


def test_collector_devices_processes_and_vendor(tmp_path, clock):
    mi300x(tmp_path, 0)
    mi300x(tmp_path, 1, "0000:c2:00.0", files={"mem_info_vram_used": 1 * GIB, "product_name": ""})
    me = os.getpid()
    other, foreign = [pid for pid in (4242, 4243, 4244) if pid != me][:2]  # never this test's own pid
    drm_client(tmp_path, me, 5, "0000:c1:00.0", client_id=7, vram="146800640 KiB")  # 140 GiB
    drm_client(tmp_path, me, 6, "0000:c1:00.0", client_id=7, vram="146800640 KiB")  # the same client again
    drm_client(tmp_path, other, 9, "0000:c1:00.0", client_id=8, vram="2048 MiB", key="drm-memory-vram")
    drm_client(tmp_path, foreign, 3, "0000:c1:00.0", client_id=9, vram="5 MiB", driver="i915")  # not amdgpu
    snap = amd(tmp_path, clock).collect(first_index=2)
    assert snap.status == "ok" and snap.driver_version == "amdgpu"
    d0, d1 = snap.devices
    assert (d0.index, d0.vendor, d0.name, d0.uuid) == (2, "amd", "AMD Instinct MI300X", "AMD-4f1a2b3c4d5e6f70")
    assert (d0.mem_used_bytes, d0.mem_total_bytes, d0.util_pct, d0.mem_util_pct) == (150 * GIB, 192 * GIB, 87.0, 41.0)
    assert (d0.power_w, d0.power_limit_w, d0.temp_c) == (pytest.approx(612.0), pytest.approx(750.0), pytest.approx(71.0))
    assert d0.energy_j == pytest.approx(9_876_543.21) and d0.throttle is None
    # ordered by pid, whichever this test's own pid is
    assert [(p.pid, p.used_bytes) for p in d0.processes] == sorted([(other, 2 * GIB), (me, 140 * GIB)])
    assert d1.name == "AMD GPU 0x74a1" and d1.processes == () and d1.key == "gpu3"


def test_no_amd_gpu_is_remembered(tmp_path, clock):
    card(tmp_path, 0, "0000:01:00.0", vendor="0x10de")
    gc = amd(tmp_path, clock)
    assert not gc.cheap()
    assert gc.collect().status == f"unavailable: {NO_AMD}"
    assert gc.cheap()
    clock.t += 31
    assert not gc.cheap()
    assert AmdGpuCollector(root=str(tmp_path / "nothing"), use_smi=False).collect().status.startswith("unavailable")


def test_pyrsmi_figures_stand_and_sysfs_fills_what_it_lacks(tmp_path, monkeypatch, clock, caplog):
    mi300x(tmp_path, 0)
    mi300x(tmp_path, 1, "0000:c2:00.0")
    rocml = install_pyrsmi(tmp_path, monkeypatch)
    # listed in the other order than the cards: paired by PCI address, not by position
    rocml.DEVICES = [
        {"name": "AMD Instinct MI300X OAM", "uuid": "GPU-bbbb", "bdf": (0xC2 << 8), "used": 10 * GIB, "total": 192 * GIB,
         "util": 12, "busy": 3, "power": 250.0},
        {"name": "AMD Instinct MI300X OAM", "uuid": "GPU-aaaa", "bdf": (0xC1 << 8), "used": -1, "total": 192 * GIB,
         "util": -1, "busy": -1, "power": -1},
    ]
    root_logger = logging.getLogger()
    caplog.set_level(logging.ERROR)
    gc = AmdGpuCollector(root=str(tmp_path), clock=clock)
    snap = gc.collect()
    d0, d1 = snap.devices
    assert (d0.uuid, d0.mem_used_bytes, d0.util_pct, d0.power_w) == ("GPU-aaaa", 150 * GIB, 87.0, pytest.approx(612.0))
    assert (d1.uuid, d1.mem_used_bytes, d1.util_pct, d1.power_w) == ("GPU-bbbb", 10 * GIB, 12.0, 250.0)
    assert d0.name == "AMD Instinct MI300X OAM" and d0.temp_c == pytest.approx(71.0)  # temperature: sysfs only
    assert snap.notes == ()
    # pyrsmi's own logging.error for every -1 never reaches lpxtop's log
    assert not [r for r in caplog.records if "Error getting" in r.getMessage()]
    assert any(type(f).__name__ == "_QuietPyrsmi" for f in root_logger.filters)
    gc.close()
    assert rocml.calls.count("smi_initialize") == 1 and rocml.calls.count("smi_shutdown") == 1


def test_pyrsmi_without_rocm_falls_back_to_sysfs_with_a_note(tmp_path, monkeypatch, clock):
    mi300x(tmp_path, 0)
    rocml = install_pyrsmi(tmp_path, monkeypatch)
    rocml.INIT_ERROR = RuntimeError("AMD SMI library (libamd_smi.so) not found. Please ensure ROCm is installed")
    gc = AmdGpuCollector(root=str(tmp_path), clock=clock)
    snap = gc.collect()
    assert snap.devices[0].mem_used_bytes == 150 * GIB
    assert snap.notes == ("AMD SMI: AMD SMI could not start: AMD SMI library (libamd_smi.so) not found. Please ensure "
                          "ROCm is installed; figures from the amdgpu sysfs files",)
    gc.collect()
    assert rocml.calls.count("smi_initialize") == 1  # retried only after 30 s
    clock.t += 31
    gc.collect()
    assert rocml.calls.count("smi_initialize") == 2


def test_pyrsmi_not_installed(clock):
    smi = AmdSmi(clock=clock)
    assert smi.ensure() == "pyrsmi is not installed (pip install 'lpxtop[rocm]'; it needs ROCm 6 or newer)"
    assert smi.known_unavailable()
    assert smi.call("smi_get_device_count") is None


def test_no_gpu_of_either_vendor_keeps_nvml_status_line(tmp_path, monkeypatch, clock):
    FakeDriver([], init_error=pynvml.NVMLError_LibraryNotFound()).install(monkeypatch)
    gc = AcceleratorCollector(GpuCollector(Nvml(clock=clock)), amd(tmp_path, clock))
    snap = gc.collect()
    assert snap.status == ("unavailable: NVML library not found: no NVIDIA driver on this host "
                           "(libnvidia-ml.so.1 is not installed)")
    assert snap.notes == (f"AMD: {NO_AMD}",)
    assert gc.cheap()


def test_an_amd_box_reads_as_ok_without_nvml_noise_and_joins_endpoints(tmp_path, monkeypatch, clock):
    FakeDriver([], init_error=pynvml.NVMLError_LibraryNotFound()).install(monkeypatch)
    mi300x(tmp_path, 0)
    me = os.getpid()
    drm_client(tmp_path, me, 5, "0000:c1:00.0", client_id=1, vram="1 MiB")
    snap = AcceleratorCollector(GpuCollector(Nvml(clock=clock)), amd(tmp_path, clock)).collect({me: "mi300-vllm"})
    assert snap.status == "ok" and snap.notes == ()
    (dev,) = snap.devices
    (proc,) = dev.processes
    assert (proc.pid, proc.used_bytes, proc.endpoint) == (me, 2**20, "mi300-vllm")
    assert proc.name and "python" in proc.name.lower()


def test_nvidia_and_amd_on_one_host(tmp_path, monkeypatch, clock):
    FakeDriver([FakeGpu(uuid="GPU-N0")]).install(monkeypatch)
    mi300x(tmp_path, 0)
    snap = AcceleratorCollector(GpuCollector(Nvml(clock=clock)), amd(tmp_path, clock)).collect()
    assert [(d.key, d.vendor) for d in snap.devices] == [("gpu0", "nvidia"), ("gpu1", "amd")]
    assert snap.driver_version == "550.54.15 + amdgpu"
    assert [d["vendor"] for d in snap.to_json()["devices"]] == ["nvidia", "amd"]


def test_fdinfo_parsing_and_bdf_pairing():
    assert parse_fdinfo("drm-driver: amdgpu\ndrm-pdev: 0000:c1:00.0\ndrm-memory-vram: 12 KiB\n") == (
        "0000:c1:00.0", None, 12 * 1024)
    assert parse_fdinfo("drm-driver: amdgpu\ndrm-pdev: 0000:c1:00.0\ndrm-memory-vram: lots\n") == (
        "0000:c1:00.0", None, None)
    assert parse_fdinfo("drm-driver: xe\ndrm-pdev: 0000:03:00.0\n") is None
    assert parse_fdinfo("pos: 0\n") is None
    assert same_pci(0xC1 << 8, "0000:c1:00.0")
    assert same_pci((1 << 32) | (0xC1 << 8) | (2 << 3) | 1, "0001:c1:02.1")  # domain as rocm_smi put it
    assert same_pci((1 << 16) | (0xC1 << 8), "0001:c1:00.0")  # as amdsmi_bdf_t puts it
    assert not same_pci(0xC2 << 8, "0000:c1:00.0") and not same_pci(-1, "0000:c1:00.0")
    assert not same_pci(0xC1 << 8, None)
