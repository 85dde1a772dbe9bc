"""A load step's energy per output token: the GPUs' energy between the step's two counter readings over the
server's generated tokens between the same readings (ServerWatch.during), in the step's JSON and CSV."""

from __future__ import annotations

import csv
import io
from dataclasses import replace

import pytest

from lpxtop.load.report import steps_csv
from lpxtop.load.server_window import CounterReading, ServerWatch
from lpxtop.model.events import GpuEvent
from lpxtop.model.gpu import GpuDevice, GpuProcess, GpuSnapshot
from tests.support.load_snapshot_data import done_state


def reading(t: float, tokens: float | None) -> CounterReading:
    return CounterReading(wall_time=t, kind="vllm", generation_tokens=tokens)


def feed(watch: ServerWatch, *, energy=lambda t: 500.0 * t, power=None, endpoint=None, until: int = 30) -> None:
    for t in range(until):
        devices = (GpuDevice(index=0, name="g", uuid="GPU-0", energy_j=energy(t) if energy else None,
                             power_w=power, processes=(GpuProcess(pid=1, name="p", used_bytes=1, endpoint=endpoint),)),
                   GpuDevice(index=1, name="g", uuid="GPU-1", energy_j=100.0 * t if energy else None, power_w=power))
        watch.on_engine_event(GpuEvent(float(t), GpuSnapshot(status="ok", devices=devices, collected_at=float(t))))


def test_step_energy_over_the_same_two_readings():
    watch = ServerWatch("load", "http://127.0.0.1:1/metrics")
    feed(watch)
    d = watch.during(10.0, 20.0, reading(10.5, 1000.0), reading(20.5, 7000.0))
    # 600 W for 10 s over 6000 tokens, every GPU (one endpoint, no process tied to it)
    assert d.energy_j == pytest.approx(6000.0)
    assert d.joules_per_output_token == pytest.approx(1.0)
    assert d.energy_gpus == ("gpu0", "gpu1") and d.energy_note == "all GPUs: the one endpoint"
    j = d.to_json()
    assert (j["joules_per_output_token"], j["energy_gpus"]) == (1.0, ["gpu0", "gpu1"])


def test_the_endpoints_own_gpu_when_its_process_is_tied():
    watch = ServerWatch("load", "http://127.0.0.1:1/metrics")
    feed(watch, endpoint="load")
    d = watch.during(10.0, 20.0, reading(10.0, 0.0), reading(20.0, 5000.0))
    assert d.energy_gpus == ("gpu0",) and d.joules_per_output_token == pytest.approx(1.0) and d.energy_note is None


def test_missing_pieces_are_none_with_a_note_never_zero():
    watch = ServerWatch("load", "http://127.0.0.1:1/metrics")
    assert watch.during(10.0, 20.0, reading(10.0, 0.0), reading(20.0, 10.0)).energy_note is None  # no GPU at all
    feed(watch)
    d = watch.during(10.0, 20.0, reading(10.0, None), reading(20.0, None))
    assert d.joules_per_output_token is None and d.energy_note == "no generated-token counter read at both ends of the window"
    d = watch.during(10.0, 20.0, reading(10.0, 50.0), reading(20.0, 50.0))
    assert d.joules_per_output_token is None and d.energy_j == pytest.approx(6000.0)
    assert d.energy_note == "no tokens generated in the window"
    d = watch.during(40.0, 50.0, reading(40.0, 0.0), reading(50.0, 10.0))  # after the last GPU reading
    assert d.energy_j is None and d.energy_note.startswith("gpu0: no reading before and after the window")


def test_a_reset_inside_the_window_gives_no_figure_and_power_is_integrated():
    watch = ServerWatch("load", "http://127.0.0.1:1/metrics")
    feed(watch, energy=lambda t: 500.0 * t if t < 15 else 500.0 * (t - 15))
    d = watch.during(10.0, 20.0, reading(10.0, 0.0), reading(20.0, 100.0))
    assert d.joules_per_output_token is None and "reset" in d.energy_note
    watch = ServerWatch("load", "http://127.0.0.1:1/metrics")
    feed(watch, energy=None, power=300.0)
    d = watch.during(10.0, 20.0, reading(10.0, 0.0), reading(20.0, 6000.0))
    assert d.joules_per_output_token == pytest.approx(1.0)
    assert d.energy_note == "all GPUs: the one endpoint; integrated power readings"


def test_csv_has_the_energy_columns():
    state = done_state()
    step = state.steps[0]
    step = replace(step, server=replace(step.server, energy_j=1234.5, joules_per_output_token=0.42))
    (row,) = csv.DictReader(io.StringIO(steps_csv((step,))))
    assert (row["server_energy_j"], row["server_joules_per_output_token"]) == ("1234.5", "0.42")
    (row,) = csv.DictReader(io.StringIO(steps_csv(state.steps)))
    assert row["server_joules_per_output_token"] == ""  # unknown: empty, never 0
