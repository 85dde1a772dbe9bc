"""Early-warning rules on hand-built snapshot series; expected values worked out by hand."""

from __future__ import annotations

import dataclasses

import pytest

from lpxtop.engine.alerts import THRESHOLD_FLAGS, AlertRules, AlertThresholds, fit_line
from lpxtop.model import (
    GpuDevice,
    GpuProcess,
    GpuSnapshot,
    HostSnapshot,
    PortStatus,
    Snapshot,
)
from tests.support.alerts_data import T0, endpoint, gpu, kinds, snap

GIB = 2**30


# GPU memory level


def test_gpu_memory_levels_with_hysteresis():
    rules = AlertRules()
    series = [  # used GiB of 80 -> expected level
        (72.0, "warning"),  # 90.0 %
        (76.8, "critical"),  # 96.0 %
        (75.2, "critical"),  # 94.0 %: still within 2 points of 95
        (74.0, "warning"),  # 92.5 %
        (70.8, "warning"),  # 88.5 %: within 2 points of 90
        (70.3, None),  # 87.9 %
        (71.9, None),  # 89.9 %
    ]
    for i, (used, level) in enumerate(series):
        alerts = [a for a in rules.evaluate(snap(T0 + i, g=gpu(used))) if a.kind == "gpu_memory"]
        assert [a.severity for a in alerts] == ([level] if level else []), (i, used)


def test_gpu_memory_message_names_the_biggest_holder_and_what_to_do():
    procs = (
        GpuProcess(pid=4121, name="python3", used_bytes=70 * GIB),
        GpuProcess(pid=7, name="x", used_bytes=None),
    )
    (alert,) = AlertRules().evaluate(snap(T0, g=gpu(76.8, procs=procs)))
    assert alert.subject == "gpu0"
    assert alert.message.startswith(
        "GPU 0 memory at 96 % (76.8 of 80.0 GiB; most held by PID 4121 (python3, 70.0 GiB))"
    )
    assert "--gpu-memory-utilization" in alert.message


def test_mig_device_memory_alert():
    mig = GpuDevice(
        index=1,
        name="MIG 1g.10gb",
        uuid="MIG-1",
        mem_used_bytes=int(9.7 * GIB),
        mem_total_bytes=10 * GIB,
        parent_index=0,
    )
    (alert,) = AlertRules().evaluate(snap(T0, g=gpu(20, migs=(mig,))))
    assert (alert.severity, alert.subject) == ("critical", "gpu0/mig1")
    assert alert.message.startswith("GPU 0 MIG 1 memory at 97 %")


def test_unavailable_gpu_raises_nothing():
    assert AlertRules().evaluate(snap(T0, g=GpuSnapshot(status="unavailable: NVML library not found"))) == ()


# GPU memory projection


def test_fit_line_by_hand():
    # x 0..4, y 40 41.5 42 43.5 44: mean x 2, mean y 42.2, Sxx 10, Sxy 10 -> slope 1, intercept 40.2
    intercept, slope = fit_line([(0, 40), (1, 41.5), (2, 42), (3, 43.5), (4, 44)])
    assert slope == pytest.approx(1.0)
    assert intercept == pytest.approx(40.2)
    assert fit_line([(1, 5)]) is None
    assert fit_line([(1, 5), (1, 6)]) is None


def test_projection_on_a_linear_climb():
    # 40 GiB + 1 GiB/s on an 80 GiB GPU, one reading a second
    rules = AlertRules()
    seen = {}
    for i in range(10):
        alerts = rules.evaluate(snap(T0 + i, g=gpu(40 + i, t=T0 + i)))
        seen[i] = [a for a in alerts if a.kind == "gpu_memory_projection"]
    assert all(seen[i] == [] for i in range(5))  # 5 points needed, and two readings in a row
    # t=5: used 45, full at 80 -> 35 s
    assert [a.message for a in seen[5]] == [
        "GPU 0 memory full in ~35 s at +1.0 GiB/s (56 % now): reduce --gpu-memory-utilization or load"
    ]
    # t=9: used 49 -> 31 s
    (last,) = seen[9]
    assert last.message.startswith("GPU 0 memory full in ~31 s at +1.0 GiB/s (61 % now)")
    assert (last.severity, last.subject) == ("warning", "gpu0")


def test_projection_uses_the_least_squares_line_not_the_last_point():
    # t 0..5, used 40 41.5 42 43.5 44 45.5 GiB. By hand: mean t 2.5, mean y 42.75, Sxx 17.5,
    # Sxy 18.25 -> slope 1.042857 GiB/s; line at t=5: 42.75 + 1.042857*2.5 = 45.357;
    # (80 - 45.357) / 1.042857 = 33.2 s
    rules = AlertRules()
    for i, used in enumerate([40, 41.5, 42, 43.5, 44, 45.5]):
        alerts = rules.evaluate(snap(T0 + i, g=gpu(used, t=T0 + i)))
    (alert,) = [a for a in alerts if a.kind == "gpu_memory_projection"]
    assert alert.message.startswith("GPU 0 memory full in ~33 s at +1.0 GiB/s")


def test_projection_critical_when_very_close():
    # 70 GiB + 1 GiB/s: at t=5, 75 GiB used, 5 s left (<= 60/4) -> critical
    rules = AlertRules()
    for i in range(6):
        alerts = rules.evaluate(snap(T0 + i, g=gpu(70 + i, t=T0 + i)))
    (proj,) = [a for a in alerts if a.kind == "gpu_memory_projection"]
    assert proj.severity == "critical"
    assert "full in ~5 s" in proj.message


def test_projection_clears_once_growth_stops():
    rules = AlertRules()
    active = []
    for i in range(25):
        used = 40 + min(i, 9)  # climbs to 49 GiB at t=9, then flat
        alerts = rules.evaluate(snap(T0 + i, g=gpu(used, t=T0 + i)))
        active.append(any(a.kind == "gpu_memory_projection" for a in alerts))
    # the rise 48 -> 49 at t=9 is inside the "still growing" window [t-5, t] up to t=13; t=14 is the
    # first flat reading (not enough alone to clear), t=15 the second
    assert active[5:14] == [True] * 9
    assert active[14] is True
    assert active[15:] == [False] * 10


def test_one_noisy_point_raises_no_projection():
    rules = AlertRules()
    for i in range(20):
        used = 68.0 if i == 10 else 50.0  # 85 %: below the level alerts too
        alerts = rules.evaluate(snap(T0 + i, g=gpu(used, t=T0 + i)))
        assert alerts == (), i


def test_same_gpu_reading_fed_twice_counts_once():
    rules = AlertRules()
    for i in range(5):
        rules.evaluate(snap(T0 + i, g=gpu(40 + i, t=T0 + i)))
        # the engine may publish twice per GPU reading: same collected_at, later wall time
        alerts = rules.evaluate(snap(T0 + i + 0.5, g=gpu(40 + i, t=T0 + i)))
    assert not any(a.kind == "gpu_memory_projection" for a in alerts)  # one holding reading, not two


# KV cache saturation


def test_kv_saturated_while_preemptions_rise():
    rules = AlertRules()
    assert rules.evaluate(snap(T0, endpoints=[endpoint(kv=0.95, preempt=10)])) == ()
    assert rules.evaluate(snap(T0 + 2, endpoints=[endpoint(kv=0.97, preempt=10)])) == ()  # none new
    (alert,) = rules.evaluate(snap(T0 + 4, endpoints=[endpoint(kv=0.86, preempt=14)]))
    assert (alert.severity, alert.kind, alert.subject) == ("warning", "kv_saturated", "vllm")
    assert alert.message.startswith(
        "vllm: requests are being preempted: the KV cache is saturated (97 % used, +4 preemptions in 30 s)"
    )
    assert "--max-num-seqs" in alert.message
    # no new preemptions: it clears once the rise leaves the 30 s window
    assert rules.evaluate(snap(T0 + 20, endpoints=[endpoint(kv=0.5, preempt=14)]))
    assert rules.evaluate(snap(T0 + 40, endpoints=[endpoint(kv=0.5, preempt=14)])) == ()


def test_preemptions_without_a_full_cache_or_after_restart_do_not_alert():
    rules = AlertRules()
    rules.evaluate(snap(T0, endpoints=[endpoint(kv=0.5, preempt=1)]))
    assert rules.evaluate(snap(T0 + 1, endpoints=[endpoint(kv=0.6, preempt=9)])) == ()
    other = AlertRules()
    other.evaluate(snap(T0, endpoints=[endpoint(kv=0.99, preempt=50)]))
    assert other.evaluate(snap(T0 + 1, endpoints=[endpoint(kv=0.99, preempt=2)])) == ()  # counter reset
    assert AlertRules().evaluate(snap(T0, endpoints=[endpoint(kv=None, preempt=None)])) == ()


# Host memory


def test_host_memory_available_and_pressure():
    total = 64 * GIB
    rules = AlertRules()

    def host(avail_pct: float, pressure: float | None = None) -> HostSnapshot:
        avail = int(total * avail_pct / 100)
        return HostSnapshot(
            mem_total_bytes=total,
            mem_used_bytes=total - avail,
            mem_available_bytes=avail,
            mem_pressure_avg10=pressure,
        )

    (alert,) = rules.evaluate(snap(T0, host=host(3.0)))
    assert (alert.severity, alert.kind, alert.subject) == ("critical", "host_memory", "host")
    assert alert.message.startswith("host memory nearly exhausted: 3.0 % available (1.9 of 64.0 GiB)")
    assert len(rules.evaluate(snap(T0 + 1, host=host(6.0)))) == 1  # clears only above 5 + 2
    assert rules.evaluate(snap(T0 + 2, host=host(8.0))) == ()
    assert rules.evaluate(snap(T0 + 3, host=host(50.0, pressure=10.0))) == ()
    (alert,) = rules.evaluate(snap(T0 + 4, host=host(50.0, pressure=23.5)))
    assert alert.severity == "warning"
    assert alert.message.startswith("host memory pressure: tasks stalled on memory 24 % of the last 10 s")
    assert len(rules.evaluate(snap(T0 + 5, host=host(50.0, pressure=9.0)))) == 1  # hysteresis
    assert rules.evaluate(snap(T0 + 6, host=host(50.0, pressure=7.9))) == ()


# A server that vanished while its GPU memory was high


def serving(t: float, used_gib: float, *, pid=4121, worker=4122) -> Snapshot:
    procs = (
        GpuProcess(
            pid=worker, name="VLLM::EngineCore", used_bytes=int(used_gib * GIB) - GIB, endpoint="vllm"
        ),
    )
    return snap(
        t,
        g=gpu(used_gib, procs=procs, t=t),
        endpoints=[endpoint()],
        ports=[PortStatus(port=8000, status="ok", detail="", pid=pid, process="vllm", endpoint="vllm")],
    )


def gone(t: float) -> Snapshot:
    return snap(
        t,
        g=gpu(0.5, t=t),
        endpoints=[endpoint()],
        ports=[PortStatus(port=8000, status="down", detail="nothing listens on 8000", endpoint="vllm")],
    )


def test_server_exit_while_gpu_memory_high_is_reported_as_likely_oom():
    rules = AlertRules()
    rules.evaluate(serving(T0, 72.0))  # 90 %
    rules.evaluate(serving(T0 + 1, 73.6))  # 92 %
    (alert,) = rules.evaluate(gone(T0 + 2))
    assert (alert.severity, alert.kind, alert.subject) == ("critical", "server_exited", "vllm")
    assert alert.message.startswith(
        "vllm: server exited (PID 4121) while GPU 0 memory was at 92 % — if you did not stop it, likely out of memory"
    )
    assert "CUDA out of memory" in alert.message
    assert kinds(rules.evaluate(gone(T0 + 200))) == [("critical", "server_exited")]  # held, not a 1 s blip
    assert rules.evaluate(gone(T0 + 303)) == ()  # hold (300 s) over


def test_engine_worker_dying_counts_even_if_the_port_stays():
    rules = AlertRules()
    rules.evaluate(serving(T0, 70.0))  # 87.5 %
    still_listening = snap(
        T0 + 1,
        g=gpu(0.5, t=T0 + 1),
        endpoints=[endpoint()],
        ports=[PortStatus(port=8000, status="ok", detail="", pid=4121, endpoint="vllm")],
    )
    (alert,) = rules.evaluate(still_listening)
    assert alert.kind == "server_exited" and "(PID 4122)" in alert.message


def test_server_exit_with_moderate_memory_or_unknown_owner_is_quiet():
    rules = AlertRules()
    rules.evaluate(serving(T0, 40.0))  # 50 %
    assert rules.evaluate(gone(T0 + 1)) == ()
    rules = AlertRules()
    rules.evaluate(serving(T0, 76.0))
    unknown = snap(
        T0 + 1,
        g=GpuSnapshot(status="unavailable: NVIDIA driver not loaded"),
        endpoints=[endpoint()],
        ports=[PortStatus(port=8000, status="unknown_owner", detail="held by another user", endpoint="vllm")],
    )
    assert [a.kind for a in rules.evaluate(unknown)] == []  # can't tell: don't cry wolf


# Thresholds


def test_thresholds_from_mapping():
    th = AlertThresholds.from_mapping(
        {"gpu_mem_warning_pct": 85, "gpu-mem-critical-pct": 97.5, "projection_min_points": 3}
    )
    assert (th.gpu_mem_warning_pct, th.gpu_mem_critical_pct, th.projection_min_points) == (85.0, 97.5, 3)
    assert th.projection_horizon_s == 60.0
    with pytest.raises(ValueError, match="gpu_mem_warn"):
        AlertThresholds.from_mapping({"gpu_mem_warn": 80})
    with pytest.raises(ValueError, match="kv_saturation"):
        AlertThresholds.from_mapping({"kv_saturation": 90})
    with pytest.raises(ValueError, match="projection_horizon_s"):
        AlertThresholds.from_mapping({"projection_horizon_s": True})
    with pytest.raises(ValueError, match="gpu_mem_warning_pct"):
        AlertThresholds.from_mapping({"gpu_mem_warning_pct": 96})
    with pytest.raises(ValueError, match="projection_min_points"):
        AlertThresholds.from_mapping({"projection_min_points": 2.5})


def test_threshold_flags_name_real_attributes():
    names = {f.name for f in dataclasses.fields(AlertThresholds)}
    flags = [flag for flag, _, _ in THRESHOLD_FLAGS]
    assert len(set(flags)) == len(flags)
    for flag, attr, help_text in THRESHOLD_FLAGS:
        assert flag.startswith("--") and attr in names and help_text


def test_custom_thresholds_apply():
    rules = AlertRules(AlertThresholds(gpu_mem_warning_pct=50, gpu_mem_critical_pct=60))
    assert kinds(rules.evaluate(snap(T0, g=gpu(44)))) == [("warning", "gpu_memory")]


def test_alerts_sorted_worst_first():
    host = HostSnapshot(
        mem_total_bytes=100, mem_used_bytes=50, mem_available_bytes=50, mem_pressure_avg10=50.0
    )
    alerts = AlertRules().evaluate(snap(T0, g=gpu(77), host=host))
    assert kinds(alerts) == [("critical", "gpu_memory"), ("warning", "host_memory")]
