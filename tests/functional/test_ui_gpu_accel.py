"""The GPU panel with the accelerator fields: vendor, power against its limit, the throttle word and joules
per output token, in a panel as narrow as an 80×24 terminal gives it (36 cells)."""

from __future__ import annotations

from dataclasses import replace

from rich.style import Style

from lpxtop.model.energy import EndpointEnergy
from lpxtop.model.gpu import GpuDevice, GpuSnapshot
from lpxtop.ui.palette import Palette
from lpxtop.ui.widgets.gpu_panel import energy_by_device, render_gpu
from tests.support.energy_data import view

PALETTE = Palette(ok=Style(), warning=Style(), critical=Style(), muted=Style(), accent=Style(), chart=((1, 2, 3),))
GIB = 2**30


def lines(gpu: GpuSnapshot, width: int = 36, energy=None) -> list[str]:
    return render_gpu(gpu, width, {}, PALETTE, energy).plain.splitlines()


def test_amd_device_with_throttle_word_and_joules_per_token_fits_36_cells():
    dev = GpuDevice(index=0, name="Instinct MI300X", uuid="AMD-1", util_pct=87.0, mem_used_bytes=150 * GIB,
                    mem_total_bytes=192 * GIB, temp_c=71.0, power_w=745.0, power_limit_w=750.0, vendor="amd",
                    throttle=("power_cap",))
    head, mem = lines(GpuSnapshot(status="ok", devices=(dev,)), energy={"gpu0": 0.4167})
    assert head.startswith("GPU 0 AMD") and head.endswith("87% 71°C 745/750W pwr-cap")
    assert mem.endswith("150.0G  78% 0.42J/tok") and "…" not in mem
    assert all(len(line) <= 36 for line in (head, mem))


def test_nvidia_names_are_not_prefixed_twice_and_no_word_without_throttling():
    dev = GpuDevice(index=1, name="NVIDIA H100 80GB HBM3", uuid="GPU-1", util_pct=10.0, power_w=100.0,
                    power_limit_w=700.0, vendor="nvidia", throttle=())
    head = lines(GpuSnapshot(status="ok", devices=(dev,)), width=60)[0]
    assert "NVIDIA NVIDIA" not in head and head.startswith("GPU 1 NVIDIA H100") and head.endswith("100/700W")


def test_energy_by_device_takes_each_endpoints_figure():
    a = view("a", 1.0, 1.0)
    b = view("b", 1.0, 1.0)
    a = replace(a, energy=EndpointEnergy(joules_per_output_token=0.5, gpus=("gpu0", "gpu1")))
    b = replace(b, energy=EndpointEnergy(reason="measuring", gpus=("gpu2",)))
    assert energy_by_device([a, b]) == {"gpu0": 0.5, "gpu1": 0.5}
