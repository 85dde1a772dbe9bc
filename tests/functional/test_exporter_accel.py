"""The exporter's accelerator families, beside a real engine probing the simulated server with the demo's
simulated GPU: vendor, power against its limit, the energy counter, the throttle reasons and energy per
output token reach /metrics, and promtool accepts the exposition."""

from __future__ import annotations

import subprocess

from lpxtop.cli.assemble import build_engine
from lpxtop.engine.gpu.simulated import SimulatedGpuCollector
from lpxtop.export.exporter import Exporter
from lpxtop.export.settings import ExporterSettings
from lpxtop.model.gpu import THROTTLE_WORDS
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.prometheus import binary, scrape, series, value
from tests.support.sim import endpoint
from tests.support.waiting import wait_for


def test_gpu_power_energy_throttle_and_joules_per_token_families():
    with start_sim_in_thread(SimConfig(model="sim-x", ttft_ms=20, itl_ms=3)) as sim:
        gpu = SimulatedGpuCollector(kv_usage=lambda: sim.server.kv_cache_usage, power_limit_w=700.0)
        gpu.surge(True)
        config = endpoint(sim.url, model=None, interval_s=0.25, metrics_interval_s=0.3)
        engine = build_engine([config], window_s=300, gpu=gpu)
        exporter = Exporter(engine, ExporterSettings(listen_port=0, host_label="test-host"))
        exporter.start()
        engine.start()
        try:
            wait_for(lambda: (v := engine.snapshot().endpoints) and v[0].energy is not None
                     and v[0].energy.joules_per_output_token is not None, timeout=20)
            text = scrape(exporter).text
        finally:
            exporter.stop()
            engine.stop()
    samples = series(text)
    dev = {"host": "test-host", "gpu": "gpu0", "uuid": "GPU-00000000-0000-0000-0000-5133d0000000"}
    assert value(samples, "lpxtop_gpu_info", vendor="simulated", **dev) == 1.0
    assert value(samples, "lpxtop_gpu_power_limit_watts", **dev) == 700.0
    assert value(samples, "lpxtop_gpu_power_watts", **dev) == 696.5
    assert value(samples, "lpxtop_gpu_energy_joules_total", **dev) > 1_000_000
    assert value(samples, "lpxtop_gpu_clock_throttle", reason="power_cap", **dev) == 1.0
    for reason in THROTTLE_WORDS:
        assert value(samples, "lpxtop_gpu_clock_throttle", reason=reason, **dev) is not None
    ident = {"host": "test-host", "endpoint": config.name, "model": "sim-x", "server_kind": "vllm"}
    jpt = value(samples, "lpxtop_endpoint_energy_joules_per_output_token", **ident)
    assert jpt is not None and jpt > 0
    result = subprocess.run([binary("promtool"), "check", "metrics"], input=text, capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
