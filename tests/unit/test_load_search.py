"""The capacity search, the over-saturation signs, the knee and the one-sentence answer."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lpxtop.load.search import CapacitySearch, Walk, capacity, knee, saturation
from lpxtop.load.slo import parse_slo
from lpxtop.model.load import ClientHealth, Dist, ServerDuringStep, StepResult

SLO = parse_slo("ttft_p95<=500ms,error_rate<=1%")


def dist(v: float) -> Dist:
    return Dist(count=10, mean=v, std=0.0, p50=v, p90=v, p95=v, p99=v, max=v)


def step(level: float, ttft: float, *, mode: str = "concurrency", index: int = 0, **kw) -> StepResult:
    s = StepResult(index=index, mode=mode, level=level, concurrency=int(level) if mode == "concurrency" else None,
                   request_rate=level if mode == "rate" else None, burstiness=None, max_concurrency=None,
                   input_tokens_target=None, output_tokens_target=16, status="done", started_at=0.0, duration_s=10.0,
                   completed=100, failed=0, ttft_ms=dist(ttft), e2el_ms=dist(ttft + 1000),
                   output_throughput=100.0 * level, request_throughput=level)
    s = replace(s, **kw)
    results, met = SLO.judge(s)
    return replace(s, slo=results, slo_met=met)


def run_search(search: CapacitySearch, ttft_at) -> list[StepResult]:
    steps: list[StepResult] = []
    for _ in range(40):
        level = search.next_level(steps)
        if level is None:
            return steps
        steps.append(step(level, ttft_at(level), mode=search.mode, index=len(steps)))
    raise AssertionError("the search did not end")


@pytest.mark.parametrize("true_capacity", [1, 2, 3, 7, 12, 33, 100])
def test_concurrency_search_finds_the_highest_passing_level(true_capacity):
    search = CapacitySearch("concurrency", 1, 512)
    steps = run_search(search, lambda c: 100.0 if c <= true_capacity else 900.0)
    cap = capacity("concurrency", steps, True, search.stop_reason(steps))
    if true_capacity < 10:
        assert cap.level == true_capacity and "neighbours" in cap.reason
    else:  # within --precision (10 %) below the truth
        assert true_capacity * 0.9 <= cap.level <= true_capacity
    assert len(steps) <= 2 * (true_capacity.bit_length() + 1)


def test_concurrency_search_stops_at_the_highest_level_allowed():
    search = CapacitySearch("concurrency", 1, 20)
    steps = run_search(search, lambda c: 100.0)
    assert [s.level for s in steps] == [1, 2, 4, 8, 16, 20]
    assert capacity("concurrency", steps, True, search.stop_reason(steps)).level == 20


def test_rate_search_bisects_to_the_precision():
    search = CapacitySearch("rate", 1.0, 1000.0, precision=0.1)
    steps = run_search(search, lambda r: 100.0 if r <= 13.7 else 900.0)
    cap = capacity("rate", steps, True, search.stop_reason(steps))
    assert 13.7 * 0.9 <= cap.level <= 13.7
    assert cap.sentence.startswith(f"capacity: {cap.level:g} requests/s (ttft p95 100 ms, 0 errors);")


def test_a_client_limited_pass_bounds_the_search_and_is_never_the_answer():
    search = CapacitySearch("concurrency", 1, 512)
    steps: list[StepResult] = []
    while (level := search.next_level(steps)) is not None:
        s = step(level, 100.0, index=len(steps))
        if level >= 8:
            s = replace(s, client=ClientHealth(limited=True, reason="late"))
        steps.append(s)
    cap = capacity("concurrency", steps, True, search.stop_reason(steps))
    assert cap.level == 7
    assert "8 was client-limited" in cap.sentence


def test_a_partial_step_ends_the_search_and_does_not_count():
    search = CapacitySearch("concurrency", 1, 512)
    steps = [step(1, 100.0), replace(step(2, 100.0, index=1), status="partial")]
    assert search.next_level(steps) is None
    assert capacity("concurrency", steps, True, "stopped").level == 1


def test_the_capacity_sentence_names_the_first_failure():
    steps = [step(c, t, index=i) for i, (c, t) in enumerate([(1, 120), (2, 180), (4, 430), (8, 700)])]
    cap = capacity("concurrency", steps, True, "every listed step ran")
    assert cap.sentence == "capacity: 4 concurrent requests (ttft p95 430 ms, 0 errors); 8 failed ttft p95"
    assert cap.to_json()["concurrency"] == 4 and cap.to_json()["request_rate"] is None


def test_a_pass_above_a_fail_is_not_believed():
    steps = [step(c, t, index=i) for i, (c, t) in enumerate([(1, 100), (2, 900), (4, 100)])]
    assert capacity("concurrency", steps, True, "").level == 1


def test_no_slo_no_verdict_and_no_pass_no_capacity():
    steps = [step(1, 900.0)]
    assert capacity("concurrency", steps, False, "").level is None
    cap = capacity("concurrency", steps, True, "")
    assert cap.level is None and "no step met the SLO" in cap.sentence


def test_walk_runs_the_list_in_order():
    walk = Walk((1, 5, 10))
    assert walk.next_level([]) == 1
    assert walk.next_level([step(1, 100)]) == 5
    assert walk.next_level([step(1, 100), step(5, 100), step(10, 100)]) is None


def test_saturation_signs():
    # open loop: completions far below the offered rate
    s = step(20, 100, mode="rate", completed=100, duration_s=10.0)
    assert "kept up with 10 of 20 req/s" in saturation(None, s)
    # errors climbing
    a, b = step(4, 100), step(8, 100, failed=20, completed=80)
    assert "errors climbing: 20 %" in saturation(a, b)
    # closed loop: flat throughput while the queue grows
    a = step(4, 100, output_throughput=400.0, server=ServerDuringStep(peak_requests_waiting=0))
    b = step(8, 300, output_throughput=405.0, server=ServerDuringStep(peak_requests_waiting=4))
    assert "throughput flat" in saturation(a, b)
    # growth with throughput: fine
    b = step(8, 150, output_throughput=700.0, server=ServerDuringStep(peak_requests_waiting=0))
    assert saturation(a, b) is None


def test_knee_is_where_throughput_per_latency_peaks():
    steps = [step(c, 50, index=i, output_throughput=tp, e2el_ms=dist(e2e))
             for i, (c, tp, e2e) in enumerate([(1, 70, 450), (2, 120, 500), (4, 235, 550), (8, 205, 1000)])]
    assert knee(steps) == 2
    assert knee(steps[:3]) is None  # still rising: no knee yet


def test_a_client_limited_step_is_never_the_knee():
    limited = ClientHealth(lag_p99_ms=80.0, limited=True, reason="loop lag")
    steps = [step(c, 50, index=i, output_throughput=tp, e2el_ms=dist(e2e))
             for i, (c, tp, e2e) in enumerate([(1, 70, 450), (2, 120, 500), (4, 235, 550), (8, 205, 1000),
                                               (16, 210, 1900)])]
    steps[2] = replace(steps[2], client=limited)  # its figures are partly lpxtop's own: not trusted
    assert knee(steps) != 2


def test_the_stop_reason_agrees_with_a_client_limited_step_above_the_capacity():
    """The step above the capacity was client-limited: the reason must not call it a failure, as the
    sentence says it was client-limited."""
    limited = ClientHealth(lag_p99_ms=80.0, limited=True, reason="loop lag")
    search = CapacitySearch("concurrency", 8, 64)
    steps = [step(8, 100, index=0), step(16, 100, index=1, client=limited)]
    search.next_level(steps)  # bisects: 12
    steps.append(step(12, 100, index=2, client=limited))
    steps.append(step(10, 100, index=3, client=limited))
    steps.append(step(9, 100, index=4, client=limited))
    assert search.next_level(steps) is None
    reason = search.stop_reason(steps)
    cap = capacity("concurrency", steps, True, reason)
    assert "fail" not in reason and "8 met the SLO and 9 did not" in reason
    assert "9 was client-limited" in cap.sentence
