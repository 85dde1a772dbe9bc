"""`once --json` on a GPU box (the demo's simulated GPU beside the simulated server): the GPU's vendor, power,
limit, energy counter and throttle reasons, and the endpoint's energy per output token over the run."""

from __future__ import annotations

import json

from lpxtop.cli.assemble import build_engine
from lpxtop.engine.gpu.simulated import SimulatedGpuCollector
from lpxtop.report import render_table
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.sim import endpoint


def test_once_json_has_the_gpu_fields_and_joules_per_token():
    with start_sim_in_thread(SimConfig(model="sim-x", ttft_ms=20, itl_ms=5)) as sim:
        gpu = SimulatedGpuCollector(kv_usage=lambda: sim.server.kv_cache_usage)
        engine = build_engine([endpoint(sim.url, model=None)], gpu=gpu)
        snap = engine.collect_once(samples=6, timeout_s=30, interval_s=0.3)
    data = json.loads(json.dumps(snap.to_json()))
    (dev,) = data["gpus"]
    assert (dev["vendor"], dev["throttle"], dev["power_limit_w"]) == ("simulated", [], 700.0)
    assert dev["energy_j"] > 1_000_000 and dev["power_w"] > 0
    energy = data["endpoints"][0]["energy"]
    assert (energy["joules_per_output_token"] or 0) > 0, energy
    assert energy["gpus"] == ["gpu0"] and energy["source"] == "counter" and energy["span_s"] >= 1.0
    assert energy["output_tokens"] > 0 and energy["reason"] is None
    text = render_table(snap)
    assert "energy per output token" in text and "gpu0" in text
