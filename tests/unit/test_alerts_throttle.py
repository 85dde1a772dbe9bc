"""The gpu_throttled alert: a GPU holding its clocks down while the latency of an endpoint it serves rose."""

from __future__ import annotations

from dataclasses import replace

from lpxtop.engine.alerts import AlertRules, AlertThresholds
from lpxtop.model import GpuDevice, GpuProcess, GpuSnapshot, PortStatus, Sample
from tests.support.alerts_data import T0, endpoint, kinds, snap


def sample(t: float, tpot: float, tokens: int = 11) -> Sample:
    # TPOT = (e2e - ttft) / (tokens - 1)
    return Sample(endpoint="vllm", wall_time=t, start_ns=0, ok=True, ttft_ms=50.0, e2e_ms=50.0 + tpot * (tokens - 1),
                  output_tokens=tokens)


def slowing(endpoint_view, now: float, before: float = 10.0, after: float = 16.0):
    old = tuple(sample(now - 60 + i, before) for i in range(10))
    new = tuple(sample(now - 20 + i, after) for i in range(5))
    return replace(endpoint_view, samples=old + new)


def device(throttle=("power_cap",), pids=()) -> GpuSnapshot:
    dev = GpuDevice(index=0, name="NVIDIA H100", uuid="GPU-0", power_w=699.0, power_limit_w=700.0, temp_c=71.0,
                    throttle=throttle, processes=tuple(GpuProcess(pid=p, name="python", used_bytes=1) for p in pids))
    return GpuSnapshot(status="ok", devices=(dev,), collected_at=T0)


def test_throttling_while_latency_rises_warns_with_the_reason_and_advice():
    ep = slowing(endpoint(), T0)
    (alert,) = AlertRules().evaluate(snap(T0, g=device(), endpoints=[ep]))
    assert (alert.severity, alert.kind, alert.subject) == ("warning", "gpu_throttled", "gpu0")
    assert alert.message == (
        "GPU 0 is throttling (power cap: drawing the power limit, so the clocks come down) while vllm's TPOT p50 "
        "rose from 10 to 16 ms in the last 30 s: it draws its power limit (699 of 700 W): raise the limit "
        "(nvidia-smi -pl, rocm-smi --setpoweroverdrive) if the board allows it, or expect this speed at this load")


def test_no_alert_without_a_rise_or_without_throttling():
    steady = slowing(endpoint(), T0, before=10.0, after=11.0)  # +10 %: below the 20 % line
    assert AlertRules().evaluate(snap(T0, g=device(), endpoints=[steady])) == ()
    rising = slowing(endpoint(), T0)
    assert AlertRules().evaluate(snap(T0, g=device(throttle=()), endpoints=[rising])) == ()
    assert AlertRules().evaluate(snap(T0, g=device(throttle=None), endpoints=[rising])) == ()
    few = replace(rising, samples=rising.samples[-2:])  # too few probes to say
    assert AlertRules().evaluate(snap(T0, g=device(), endpoints=[few])) == ()


def test_thermal_advice_and_only_endpoints_served_by_that_gpu():
    a = slowing(endpoint("a", 8001), T0)
    b = slowing(endpoint("b", 8002), T0)
    ports = [PortStatus(port=8001, pid=11, process="python", cmdline=None, status="ok", detail="", endpoint="a"),
             PortStatus(port=8002, pid=12, process="python", cmdline=None, status="ok", detail="", endpoint="b")]
    (alert,) = AlertRules().evaluate(snap(T0, g=device(("hw_thermal",), pids=(11,)), endpoints=[a, b], ports=ports))
    assert "a's TPOT" in alert.message and "b's" not in alert.message
    assert "it is too hot (71 °C): check the cooling and airflow" in alert.message
    # two endpoints, no GPU tied to either: nothing is said about whom the GPU serves
    assert AlertRules().evaluate(snap(T0, g=device(), endpoints=[a, b])) == ()


def test_threshold_is_configurable():
    ep = slowing(endpoint(), T0, before=10.0, after=11.0)
    rules = AlertRules(AlertThresholds.from_mapping({"throttle_latency_rise_pct": 5}))
    assert kinds(rules.evaluate(snap(T0, g=device(), endpoints=[ep]))) == [("warning", "gpu_throttled")]
