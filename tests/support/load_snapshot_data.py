"""A fixed load test, written by hand, for the load screen's Pilot and SVG snapshot tests.

Four finished steps of a concurrency sweep (1, 2, 4, 8) with an SLO, the capacity at 4, the knee at 4,
and a fifth step (16 concurrent) running, laid over the main screen's fixed snapshot (its vLLM endpoint's
/metrics, GPU, host and alerts).
"""

from __future__ import annotations

from dataclasses import replace

from lpxtop.load.search import capacity
from lpxtop.load.slo import parse_slo
from lpxtop.model.load import Capacity, ClientHealth, Dist, LoadState, ServerDuringStep, StepResult
from lpxtop.model.snapshot import Snapshot
from tests.support.snapshot_data import NOW, fixed_snapshot

SLO = parse_slo("ttft_p95<=500ms,e2e_p95<=10s,error_rate<=1%")


def _dist(p50: float, spread: float) -> Dist:
    return Dist(count=100, mean=p50 * 1.05, std=p50 * spread / 3, p50=p50, p90=p50 * (1 + spread * 0.8),
                p95=p50 * (1 + spread), p99=p50 * (1 + spread * 1.5), max=p50 * (1 + spread * 2))


# (concurrency, completed, failed, ttft p50, ttft spread, tpot p50, e2e p50, output tok/s, peak waiting, kv)
ROWS = (
    (1, 52, 0, 120.0, 0.10, 14.0, 1900.0, 67.0, 0, 0.08),
    (2, 101, 0, 135.0, 0.20, 15.0, 2050.0, 124.0, 0, 0.15),
    (4, 190, 0, 180.0, 1.20, 17.0, 2350.0, 217.0, 1, 0.31),
    (8, 205, 3, 1450.0, 0.50, 18.0, 3800.0, 231.0, 4, 0.52),
)


def _step(index: int, row: tuple) -> StepResult:
    c, ok, failed, ttft, spread, tpot, e2e, tput, waiting, kv = row
    step = StepResult(
        index=index, mode="concurrency", level=float(c), concurrency=c, request_rate=None, burstiness=None,
        max_concurrency=None, input_tokens_target=None, output_tokens_target=128, status="done",
        started_at=NOW - 300 + 65 * index, duration_s=60.0, completed=ok, failed=failed,
        errors=(("http_5xx", failed),) if failed else (), total_input_tokens=ok * 40, total_output_tokens=ok * 128,
        request_throughput=ok / 60.0, output_throughput=tput, total_token_throughput=tput * 1.3,
        request_goodput=(ok - failed) / 60.0,
        ttft_ms=_dist(ttft, spread), tpot_ms=_dist(tpot, 0.1), itl_ms=_dist(tpot - 0.5, 0.3), e2el_ms=_dist(e2e, 0.2),
        client=ClientHealth(lag_p99_ms=0.8, lag_max_ms=2.1, cpu_wait_share=0.01),
        server=ServerDuringStep(kind="vllm", scrapes=60, peak_requests_waiting=float(waiting),
                                peak_requests_running=float(min(c, 4)), peak_kv_cache_usage=kv, preemptions=0.0),
        wall_s=66.0,
    )
    results, met = SLO.judge(step)
    return replace(step, slo=results, slo_met=met)


def load_state() -> LoadState:
    steps = tuple(_step(i, row) for i, row in enumerate(ROWS))
    live = replace(_step(4, (16, 40, 2, 3100.0, 0.3, 19.0, 5600.0, 228.0, 12, 0.71)), status="running", slo=(),
                   slo_met=None)
    cap = capacity("concurrency", steps, True, "every listed step ran")
    return LoadState(
        target="http://127.0.0.1:8000/v1", model="meta-llama/Llama-3.1-8B-Instruct", mode="concurrency",
        search=False, planned_levels=(1.0, 2.0, 4.0, 8.0, 16.0), slo_text=SLO.text, duration_s=60.0, warmup_s=5.0,
        phase="measuring", step_index=4, level=16.0, phase_started=NOW - 18.0, phase_ends=NOW + 42.0,
        in_flight=16, sent=61, live=live, live_recent=42, steps=steps, capacity=None, knee_index=2,
        message="", seq=7,
    ), cap


def load_snapshot(*, finished: bool = False) -> Snapshot:
    state, cap = load_state()
    if finished:
        state = replace(state, phase="done", live=None, capacity=cap, message=cap.sentence, phase_ends=None,
                        step_index=3, in_flight=0)
    base = fixed_snapshot()
    return replace(base, load=state, seq=base.seq + state.seq)


def done_state() -> LoadState:
    s1 = StepResult(index=0, mode="concurrency", level=1.0, concurrency=1, request_rate=None, burstiness=None,
                    max_concurrency=None, input_tokens_target=None, output_tokens_target=8, status="done",
                    started_at=5.0, duration_s=2.0, completed=4, failed=1, errors=(("http_5xx", 1),),
                    output_throughput=16.0, server=ServerDuringStep(kind="vllm", peak_requests_waiting=2.0))
    return LoadState(target="http://127.0.0.1:8000/v1", model="m", mode="concurrency", search=False,
                     planned_levels=(1.0,), slo_text=None, duration_s=2.0, warmup_s=0.0, phase="done",
                     steps=(s1,), capacity=Capacity("concurrency", None, None, "no --slo given", "capacity: not judged"))
