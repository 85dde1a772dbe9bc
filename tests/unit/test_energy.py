"""Energy per output token (engine/gpu/accel/energy.py): the GPUs' energy counters against the servers'
generated-token counters over one interval, with resets, missing counters and shared GPUs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lpxtop.engine.gpu.accel.energy import Cumulative, EnergyMeter, PowerIntegral
from lpxtop.model.gpu import GpuSnapshot
from lpxtop.model.ports import PortStatus
from lpxtop.model.snapshot import Snapshot
from tests.support.energy_data import gpu, view

T0 = 1_800_000_000.0


def snap(t: float, views: tuple, devices: tuple, ports: tuple = ()) -> Snapshot:
    return Snapshot(wall_time=t, host_name="h", version="x", started_at=T0, paused=False, interval_s=1.0,
                    endpoints=views, gpu=GpuSnapshot(status="ok", devices=devices, collected_at=t), ports=ports)


def test_joules_per_token_over_the_same_interval_one_endpoint_all_gpus():
    meter = EnergyMeter()
    out = None
    # two GPUs at 400 W and 300 W; the server makes 1000 tokens/s, scraped half a second off the GPU reads
    for i in range(11):
        t = T0 + i
        devices = (gpu(0, 1e6 + 400.0 * i), gpu(1, 5e5 + 300.0 * i))
        out = meter.observe(snap(t, (view("solo", 1000.0 * (i - 0.5), t - 0.5),), devices))
    e = out["solo"]
    assert e.joules_per_output_token == pytest.approx(0.7)
    assert e.mean_power_w == pytest.approx(700.0)
    assert e.span_s == pytest.approx(9.5)  # from the first scrape to the newest moment every counter reached
    assert (e.gpus, e.basis, e.source, e.reason, e.shared_with) == (("gpu0", "gpu1"), "only_endpoint", "counter", None, ())
    j = e.to_json()
    assert j["joules_per_output_token"] == 0.7 and j["gpus"] == ["gpu0", "gpu1"]


def test_endpoints_get_their_own_gpus_from_processes_and_ports():
    meter = EnergyMeter()
    out = {}
    for i in range(6):
        t = T0 + i
        devices = (gpu(0, 100.0 * i, pids=(11,), endpoint="a"),  # tied through GpuProcess.endpoint
                   gpu(1, 50.0 * i, pids=(22,)))  # tied through the PID holding b's port
        ports = (PortStatus(port=8001, pid=22, process="python", cmdline=None, status="ok", detail="", endpoint="b"),)
        out = meter.observe(snap(t, (view("a", 10.0 * i, t), view("b", 100.0 * i, t)), devices, ports))
    assert (out["a"].gpus, out["a"].basis, out["a"].joules_per_output_token) == (("gpu0",), "processes", pytest.approx(10.0))
    assert (out["b"].gpus, out["b"].joules_per_output_token) == (("gpu1",), pytest.approx(0.5))


def test_a_shared_gpu_divides_by_every_endpoints_tokens():
    meter = EnergyMeter()
    out = {}
    for i in range(6):
        t = T0 + i
        devices = (gpu(0, 300.0 * i, pids=(11, 12)),)
        ports = (PortStatus(port=8001, pid=11, process="p", cmdline=None, status="ok", detail="", endpoint="a"),
                 PortStatus(port=8002, pid=12, process="p", cmdline=None, status="ok", detail="", endpoint="b"))
        out = meter.observe(snap(t, (view("a", 100.0 * i, t), view("b", 200.0 * i, t)), devices, ports))
    assert out["a"].joules_per_output_token == pytest.approx(1.0)
    assert out["a"].shared_with == ("b",) and out["b"].shared_with == ("a",)


def test_several_endpoints_and_no_tie_says_why():
    meter = EnergyMeter()
    out = meter.observe(snap(T0, (view("a", 1.0, T0), view("b", 1.0, T0)), (gpu(0, 1.0),)))
    assert out["a"].joules_per_output_token is None
    assert out["a"].reason.startswith("no GPU is tied to this endpoint")


def test_missing_counters_are_none_with_a_reason_never_zero():
    meter = EnergyMeter()
    for i in range(5):
        t = T0 + i
        out = meter.observe(snap(t, (view("ollama", None, t),), (gpu(0, 10.0 * i),)))
    assert out["ollama"].joules_per_output_token is None
    assert out["ollama"].reason == "ollama: its server has no generated-token counter on /metrics"
    meter = EnergyMeter()
    out = meter.observe(snap(T0, (view("x", 5.0, T0, status="no /metrics: HTTP 404"),), (gpu(0, 1.0),)))
    assert out["x"].reason == "x: no /metrics: HTTP 404"
    meter = EnergyMeter()
    for i in range(5):
        t = T0 + i
        out = meter.observe(snap(t, (view("x", 10.0 * i, t),), (gpu(0, None),)))
    assert out["x"].reason == "gpu0 reports neither an energy counter nor its power draw"
    assert meter.observe(snap(T0 + 9, (), (gpu(0, 1.0),))) == {}
    assert meter.observe(snap(T0 + 9, (view("x", 1.0, T0 + 9),), ())) == {}


def test_idle_server_has_energy_but_no_figure():
    meter = EnergyMeter()
    for i in range(5):
        t = T0 + i
        out = meter.observe(snap(t, (view("x", 500.0, t),), (gpu(0, 80.0 * i),)))
    e = out["x"]
    assert e.joules_per_output_token is None and e.mean_power_w == pytest.approx(80.0)
    assert e.reason == "no output tokens in the last 4 s"


def test_server_restart_and_gpu_reset_start_the_interval_afresh():
    meter = EnergyMeter()
    for i in range(5):
        t = T0 + i
        meter.observe(snap(t, (view("x", 1000.0 + 100.0 * i, t),), (gpu(0, 5000.0 + 100.0 * i),)))
    # the server restarts: its counter falls to 0 and climbs at 50 tokens/s; the GPU counter resets too
    for i in range(5, 11):
        t = T0 + i
        out = meter.observe(snap(t, (view("x", 50.0 * (i - 5), t),), (gpu(0, 200.0 * (i - 5)),)))
    e = out["x"]
    assert e.joules_per_output_token == pytest.approx(4.0)  # 200 J/s over 50 tokens/s, nothing across the reset
    assert e.span_s == pytest.approx(5.0)


def test_a_gpu_swapped_under_the_same_key_starts_afresh():
    meter = EnergyMeter()
    meter.observe(snap(T0, (view("x", 0.0, T0),), (gpu(0, 10.0, uuid="GPU-old"),)))
    out = meter.observe(snap(T0 + 2, (view("x", 10.0, T0 + 2),), (gpu(0, 1e9, uuid="GPU-new"),)))
    assert out["x"].joules_per_output_token is None and "measuring" in out["x"].reason


def test_power_is_integrated_for_a_gpu_without_a_counter():
    meter = EnergyMeter()
    for i in range(11):
        t = T0 + i
        out = meter.observe(snap(t, (view("amd", 20.0 * i, t),), (gpu(0, None, power_w=600.0),)))
    e = out["amd"]
    assert e.source == "power" and e.joules_per_output_token == pytest.approx(30.0)


def test_stale_readings_give_no_figure():
    meter = EnergyMeter()
    for i in range(5):
        t = T0 + i
        meter.observe(snap(t, (view("x", 10.0 * i, t),), (gpu(0, 10.0 * i),)))
    s = snap(T0 + 100, (view("x", 40.0, T0 + 4),), (gpu(0, 40.0),))
    out = meter.observe(replace(s, gpu=replace(s.gpu, collected_at=T0 + 4)))
    assert out["x"].reason == "no fresh reading for 96 s"


def test_counter_series_bounds_and_interpolation():
    c = Cumulative(keep_s=10.0)
    for i in range(10_000):
        c.add(float(i), float(i))
    assert len(c.points) <= 12
    assert c.at(9_995.5) == pytest.approx(9_995.5) and c.at(1.0) is None
    c.add(5.0, 0.0)  # out of order: ignored
    assert c.last_t == 9_999.0
    p = PowerIntegral(keep_s=100.0)
    p.add_power(0.0, 100.0)
    p.add_power(1.0, 300.0)
    assert p.points[-1][1] == pytest.approx(200.0)
    p.add_power(50.0, 300.0)  # a long gap: not integrated across
    assert list(p.points) == [(50.0, 0.0)]


def test_apply_puts_the_figure_in_the_endpoint_json():
    meter = EnergyMeter()
    for i in range(4):
        t = T0 + i
        s = meter.apply(snap(t, (view("x", 10.0 * i, t),), (gpu(0, 20.0 * i),)))
    j = s.to_json()["endpoints"][0]["energy"]
    assert j["joules_per_output_token"] == pytest.approx(2.0) and j["basis"] == "only_endpoint"
    bare = meter.apply(snap(T0 + 5, (view("x", 50.0, T0 + 5),), ()))
    assert bare.endpoints[0].energy is None and bare.to_json()["endpoints"][0]["energy"] is None
