"""The demo's simulated GPU: memory follows the KV cache, a surge provokes the warnings."""

from __future__ import annotations

import pytest

from lpxtop.engine.gpu.simulated import SimulatedGpuCollector

GIB = 2**30


class Clock:
    def __init__(self) -> None:
        self.t = 50.0

    def __call__(self) -> float:
        return self.t


def test_memory_is_weights_plus_kv_share_and_clearly_simulated():
    kv = [0.0]
    sim = SimulatedGpuCollector(lambda: kv[0], pid=4242)
    snap = sim.collect()
    assert snap.status == "ok" and snap.simulated
    (dev,) = snap.devices
    assert "Simulated" in dev.name
    # 80 GiB card, 80 % share: a 64 GiB budget; 16 GiB weights + 2 GiB overhead leave a 46 GiB KV pool
    assert dev.mem_total_bytes == 80 * GIB
    assert dev.mem_used_bytes == 18 * GIB
    kv[0] = 0.5
    assert sim.collect().devices[0].mem_used_bytes == 18 * GIB + 23 * GIB
    kv[0] = 1.0
    full = sim.collect().devices[0]
    assert full.mem_used_bytes == 64 * GIB
    assert full.util_pct == pytest.approx(98.0)
    assert 0 < full.temp_c < 90 and 0 < full.power_w <= full.power_limit_w


def test_process_entry_joins_the_endpoint():
    sim = SimulatedGpuCollector(lambda: 0.25, pid=4242, process_name="lpxtop-sim")
    (p,) = sim.collect({4242: "demo"}).devices[0].processes
    assert (p.pid, p.name, p.endpoint, p.used_bytes) == (4242, "lpxtop-sim", "demo", 18 * GIB + 46 * GIB // 4)
    (p,) = sim.collect().devices[0].processes
    assert p.endpoint is None


def test_surge_climbs_then_releases():
    clock = Clock()
    sim = SimulatedGpuCollector(lambda: 0.0, surge_rate_bytes_s=1 * GIB, clock=clock)
    sim.surge(True)
    assert sim.surging
    clock.t += 10.0
    assert sim.collect().devices[0].mem_used_bytes == 28 * GIB
    sim.surge(True)  # already on: keeps its start
    clock.t += 1000.0
    assert sim.collect().devices[0].mem_used_bytes == 80 * GIB - 256 * 2**20  # capped just short of full
    sim.surge(False)
    assert sim.collect().devices[0].mem_used_bytes == 18 * GIB


def test_broken_kv_source_reads_as_idle():
    def broken() -> float:
        raise RuntimeError("sim not started")

    assert SimulatedGpuCollector(broken).collect().devices[0].mem_used_bytes == 18 * GIB
    assert SimulatedGpuCollector(lambda: float("nan")).collect().devices[0].mem_used_bytes == 18 * GIB
    assert SimulatedGpuCollector(lambda: 7.0).collect().devices[0].mem_used_bytes == 64 * GIB


def test_power_energy_counter_and_throttle_under_surge():
    clock = Clock()
    sim = SimulatedGpuCollector(lambda: 0.5, clock=clock, power_limit_w=700.0)
    first = sim.collect().devices[0]
    assert first.vendor == "simulated" and first.throttle == () and first.throttle_word is None
    assert 0 < first.power_w < 700.0
    clock.t += 2.0
    second = sim.collect().devices[0]
    assert second.energy_j - first.energy_j == pytest.approx(2.0 * first.power_w)
    sim.surge(True)
    clock.t += 1.0
    hot = sim.collect().devices[0]
    assert hot.throttle == ("power_cap",) and hot.throttle_word == "pwr-cap"
    assert hot.power_w == pytest.approx(696.5)
    assert hot.energy_j > second.energy_j
    sim.surge(False)
    assert sim.collect().devices[0].throttle == ()
