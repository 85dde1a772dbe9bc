"""lpxtop on a real NVIDIA GPU: NVML readings, per-process memory, the endpoint join, the early warning.

These tests need the NVIDIA driver (libnvidia-ml.so.1 and libcuda.so.1) and skip cleanly without it,
as on CI. Run them on a GPU machine with

    python -m pytest -n 0 -m gpu tests/gpu

GPU memory is taken by tests/gpu/cuda_holder.py, a child process that allocates through the CUDA
driver API (no PyTorch needed). Nothing is mocked here: NVML, nvidia-smi, psutil, sockets and the
lpxtop CLI are all real. The early-warning test fills the GPU to 92 % for a few seconds; it skips
when the GPU is already in use by someone else.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from lpxtop.engine.alerts import AlertRules
from lpxtop.engine.gpu.collector import GpuCollector
from lpxtop.model.gpu import GpuSnapshot
from lpxtop.model.snapshot import Snapshot
from tests.support.ports import free_port

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(240)]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
HOLDER = HERE / "cuda_holder.py"
GIB = 2**30
MIB = 2**20


@pytest.fixture(scope="module")
def collector() -> Iterator[GpuCollector]:
    gc = GpuCollector()
    snap = gc.collect()
    if not snap.ok:
        gc.close()
        pytest.skip(f"no NVIDIA GPU here: {snap.status}")
    yield gc
    gc.close()


@dataclass
class Holder:
    proc: subprocess.Popen
    ready: dict

    @property
    def pid(self) -> int:
        return self.proc.pid


@contextmanager
def hold_gpu_memory(*args: str, ready_timeout_s: float = 60.0) -> Iterator[Holder]:
    """Run cuda_holder.py with `args`; yields once it holds its memory; always ends it."""
    proc = subprocess.Popen(
        [sys.executable, str(HOLDER), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        # readline blocks; the holder prints "ready" within seconds or dies (then readline returns "")
        start = time.monotonic()
        line = proc.stdout.readline()
        assert line, f"cuda_holder.py exited with {proc.wait(10)} before holding memory"
        assert time.monotonic() - start < ready_timeout_s
        yield Holder(proc, json.loads(line))
    finally:
        if proc.stdin is not None:
            proc.stdin.close()  # the holder exits when its stdin closes
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def nvidia_smi(*fields: str) -> list[dict[str, str]]:
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return [dict(zip(fields, (v.strip() for v in line.split(",")))) for line in out.strip().splitlines()]


def test_every_gpu_reads_as_nvidia_smi_shows_it(collector: GpuCollector) -> None:
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi is not installed")
    fields = ("index", "name", "uuid", "memory.total", "memory.used", "temperature.gpu", "power.limit",
              "driver_version")
    before = nvidia_smi(*fields)
    snap = collector.collect()
    after = nvidia_smi(*fields)
    print("nvidia-smi:", before)
    print("lpxtop:", json.dumps(snap.to_json(), indent=1))
    assert snap.status == "ok"
    assert len(snap.devices) == len(before)
    for dev, smi, smi2 in zip(snap.devices, before, after):
        assert dev.index == int(smi["index"])
        assert dev.name == smi["name"]
        assert dev.uuid == smi["uuid"]
        assert dev.mem_total_bytes is not None and dev.mem_total_bytes // MIB == int(smi["memory.total"])
        # "used" as nvidia-smi counts it (the driver's reservation left out), within what moved meanwhile
        lo = min(int(smi["memory.used"]), int(smi2["memory.used"])) - 64
        hi = max(int(smi["memory.used"]), int(smi2["memory.used"])) + 64
        assert dev.mem_used_bytes is not None and lo <= dev.mem_used_bytes // MIB <= hi
        assert dev.temp_c is not None and abs(dev.temp_c - float(smi["temperature.gpu"])) <= 3
        if smi["power.limit"] not in ("[N/A]", "[Not Supported]"):
            assert dev.power_limit_w is not None and abs(dev.power_limit_w - float(smi["power.limit"])) <= 1
        assert dev.power_w is not None and dev.power_w > 0
        assert dev.util_pct is not None and 0 <= dev.util_pct <= 100
        assert dev.sm_clock_mhz is not None and dev.sm_clock_mhz > 0
        assert not dev.lost
    assert snap.driver_version == before[0]["driver_version"]


def test_a_process_holding_gpu_memory_is_joined_to_its_endpoint(collector: GpuCollector) -> None:
    """`lpxtop once --json` on a server that holds GPU memory: the GPU row lists that PID with its
    memory, name, command line and the endpoint it serves (through the port it listens on)."""
    port = free_port()
    with hold_gpu_memory("--gib", "2", "--sim-port", str(port)) as holder:
        url = f"http://127.0.0.1:{port}/v1"
        run = subprocess.run(
            [sys.executable, "-m", "lpxtop", "once", url, "--samples", "2", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert run.returncode == 0, run.stderr
        data = json.loads(run.stdout)
    assert data["gpu_status"] == "ok" and data["gpu_simulated"] is False
    (endpoint,) = data["endpoints"]
    mine = [(d, p) for d in data["gpus"] for p in d["processes"] if p["pid"] == holder.pid]
    seen = [(d["index"], p["pid"], p["used_bytes"]) for d in data["gpus"] for p in d["processes"]]
    assert mine, f"PID {holder.pid} not among the GPU processes {seen}"
    device, process = mine[0]
    assert device["index"] == 0
    assert process["used_bytes"] >= 2 * GIB  # its 2 GiB plus the CUDA context
    assert process["name"].startswith("python")
    assert "cuda_holder.py" in process["cmdline"]
    assert process["endpoint"] == endpoint["name"]
    assert process["kind"] in ("compute", "compute+graphics")
    ports = {p["port"]: p for p in data["ports"]}
    assert ports[port]["pid"] == holder.pid
    # energy per output token: the holder's GPU, tied through its process; a figure, or why there is none
    assert device["vendor"] == "nvidia" and device["energy_j"] is not None
    energy = endpoint["energy"]
    print("energy:", energy)
    assert energy["gpus"] == ["gpu0"] and energy["basis"] == "processes"
    assert energy["joules_per_output_token"] is not None or energy["reason"]
    if energy["joules_per_output_token"] is not None:
        assert energy["joules_per_output_token"] > 0 and energy["source"] == "counter"


def _nvidia_smi_events() -> list[dict[str, str]] | None:
    """The clock-event reasons as nvidia-smi sees them (its R535+ names, else the throttle-era ones)."""
    for prefix in ("clocks_event_reasons", "clocks_throttle_reasons"):
        try:
            return [{"active": row[f"{prefix}.active"]} for row in nvidia_smi(f"{prefix}.active")]
        except subprocess.CalledProcessError:
            continue
    return None


def test_power_energy_and_clock_events_read_as_nvidia_smi_shows_them(collector: GpuCollector) -> None:
    """The NVML calls energy per token and the throttle word stand on: power draw and its enforced limit,
    nvmlDeviceGetTotalEnergyConsumption (it grows by about the power drawn), the clock-event reasons (the
    same bits nvidia-smi shows), and the same devices through AcceleratorCollector with their vendor."""
    from lpxtop.engine.gpu.accel.collector import AcceleratorCollector
    from lpxtop.engine.gpu.accel.throttle import nvml_throttle

    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi is not installed")
    first = collector.collect()
    t0 = time.monotonic()
    time.sleep(2.0)
    events_before = _nvidia_smi_events()
    second = collector.collect()
    events_after = _nvidia_smi_events()
    dt = time.monotonic() - t0
    limits = nvidia_smi("power.limit", "enforced.power.limit")
    for a, b, smi in zip(first.devices, second.devices, limits):
        print(f"{b.label}: {b.power_w} W of {b.power_limit_w} W, energy {a.energy_j} -> {b.energy_j} J in "
              f"{dt:.2f} s, throttle {b.throttle}")
        assert b.vendor == "nvidia"
        if smi["enforced.power.limit"] not in ("[N/A]", "[Not Supported]"):
            assert abs(b.power_limit_w - float(smi["enforced.power.limit"])) <= 1
        if a.energy_j is None:
            continue  # before Volta: no counter (energy per token integrates the power readings)
        used = b.energy_j - a.energy_j
        low = min(a.power_w, b.power_w) * dt * 0.5
        high = max(a.power_w, b.power_w) * dt * 2.0 + 50
        assert low <= used <= high, (used, low, high)
    if events_before is not None and events_after is not None:
        for dev, before, after in zip(second.devices, events_before, events_after):
            allowed = {nvml_throttle(int(x["active"], 16)) for x in (before, after)}
            assert dev.throttle in allowed, (dev.throttle, allowed)
    accelerators = AcceleratorCollector(nvidia=GpuCollector())
    try:
        both = accelerators.collect()
        assert [(d.uuid, d.vendor) for d in both.devices[: len(second.devices)]] == [
            (d.uuid, "nvidia") for d in second.devices]
    finally:
        accelerators.close()


def test_early_warning_comes_before_the_gpu_fills(collector: GpuCollector) -> None:
    """A process grows by 4 GiB/s towards 92 %: the projection alert ("memory full in ~N s") must show
    while there is still headroom, well before the 90 % warning itself."""
    idle = collector.collect().devices[0]
    assert idle.mem_used_pct is not None
    if idle.mem_used_pct > 10 or idle.processes:
        pytest.skip(f"GPU 0 is in use ({idle.mem_used_pct:.0f} % used, {len(idle.processes)} processes)")
    rules = AlertRules()
    started = time.time()
    first_projection: tuple[float, float, str] | None = None  # (seconds in, used %, message)
    first_warning: tuple[float, float, str] | None = None
    readings = 0
    with hold_gpu_memory("--gib", "1", "--ramp-gib-s", "4", "--ramp-to-pct", "92", "--max-life-s", "120") as holder:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and readings < 400 and first_warning is None:
            gpu: GpuSnapshot = collector.collect({holder.pid: "holder"})
            readings += 1
            snap = Snapshot(wall_time=time.time(), host_name="test", version="test", started_at=started,
                            paused=False, interval_s=1.0, gpu=gpu)
            dev = gpu.devices[0]
            for alert in rules.evaluate(snap):
                at = (time.time() - started, dev.mem_used_pct or 0.0, alert.message)
                if alert.kind == "gpu_memory_projection" and first_projection is None:
                    first_projection = at
                if alert.kind == "gpu_memory" and first_warning is None:
                    first_warning = at
                    assert f"most held by PID {holder.pid}" in alert.message, alert.message
            time.sleep(0.5)
    print(f"{readings} readings; projection: {first_projection}; warning: {first_warning}")
    assert first_projection is not None, "no projection alert while the GPU filled"
    assert first_warning is not None, "the 90 % warning never came"
    assert first_projection[1] < 90.0
    lead_s = first_warning[0] - first_projection[0]
    assert lead_s >= 5.0, f"the projection came only {lead_s:.1f} s before the warning"


async def test_dashboard_shows_the_real_gpu_and_who_holds_it(collector: GpuCollector) -> None:
    """The real app, real engine and real NVML: the GPU panel names the card and the holder's PID.

    With LPXTOP_SCREENSHOT_DIR set, it also saves gpu-live.svg there (how screenshots/gpu-live.svg
    was made on a real GPU)."""
    import os

    from lpxtop.cli.assemble import build_engine
    from lpxtop.model.endpoint import EndpointConfig
    from lpxtop.ui.app import create_app
    from lpxtop.ui.widgets.gpu_panel import GpuPanel
    from tests.support.ui import text_of

    name = collector.collect().devices[0].name
    port = free_port()
    with hold_gpu_memory("--gib", "8", "--sim-port", str(port)) as holder:
        engine = build_engine([EndpointConfig(name="gpu-holder", url=f"http://127.0.0.1:{port}/v1")])
        app = create_app(engine, theme="lpxtop-dark", ssh=False, on_ready=engine.start)
        try:
            async with app.run_test(size=(160, 48)) as pilot:
                panel = app.screen.query_one(GpuPanel)
                text = ""
                for _ in range(60):  # at most ~30 s
                    await pilot.pause(0.5)
                    text = text_of(panel)
                    snap = engine.snapshot()
                    if str(holder.pid) in text and snap.endpoints and snap.endpoints[0].probes_ok >= 5:
                        break
                print(text)
                assert name in text
                assert str(holder.pid) in text, text
                assert "gpu-holder" in text  # the endpoint the process serves
                out = os.environ.get("LPXTOP_SCREENSHOT_DIR")
                if out:
                    await pilot.pause(1.0)
                    app.save_screenshot(str(Path(out) / "gpu-live.svg"))
        finally:
            engine.stop()
