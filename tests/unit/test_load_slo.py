"""The SLO parser and judge of `lpxtop load`."""

from __future__ import annotations

import pytest

from lpxtop.load.slo import SloError, parse_slo
from lpxtop.model.load import Dist, StepResult


def step(**kw) -> StepResult:
    values = dict(index=0, mode="concurrency", level=4.0, concurrency=4, request_rate=None, burstiness=None,
                  max_concurrency=None, input_tokens_target=None, output_tokens_target=16, status="done",
                  started_at=0.0, duration_s=10.0, completed=99, failed=1)
    values.update(kw)
    return StepResult(**values)


def dist(p50: float, p95: float) -> Dist:
    return Dist(count=100, mean=p50, std=1.0, p50=p50, p90=p95, p95=p95, p99=p95 * 1.1, max=p95 * 1.2)


def test_the_issue_example_parses_into_base_units():
    slo = parse_slo("ttft_p95<=500ms,e2e_p95<=10s,error_rate<=1%")
    assert [(o.metric, o.op, o.threshold) for o in slo.objectives] == [
        ("ttft_p95", "<=", 500.0), ("e2e_p95", "<=", 10_000.0), ("error_rate", "<=", 0.01)]
    assert slo.text == "ttft_p95<=500ms,e2e_p95<=10s,error_rate<=1%"


@pytest.mark.parametrize("text, metric, threshold", [
    ("TTFT_P99 <= 0.5s", "ttft_p99", 500.0),
    ("itl_median<20", "itl_p50", 20.0),
    ("e2el_p90<=2500us", "e2e_p90", 2.5),
    ("tpot_mean<=45", "tpot_mean", 45.0),
    ("error_rate<=0.02", "error_rate", 0.02),
    ("output_throughput>=1200tok/s", "output_throughput", 1200.0),
    ("request_throughput>3", "request_throughput", 3.0),
])
def test_each_objective_form(text, metric, threshold):
    (objective,) = parse_slo(text).objectives
    assert objective.metric == metric
    assert objective.threshold == pytest.approx(threshold)


@pytest.mark.parametrize("text, words", [
    ("", "empty SLO"),
    ("ttft_p96<=1s", "unknown metric"),
    ("ttft_p95>=1s", "upper bounds"),
    ("error_rate<=5", "5%"),
    ("output_throughput<=100", "lower bound"),
    ("ttft_p95<=1h", "time unit"),
    ("ttft_p95 is small", "expected METRIC<=VALUE"),
])
def test_mistakes_say_what_to_write(text, words):
    with pytest.raises(SloError, match=words):
        parse_slo(text)


def test_judge_reads_the_steps_figures():
    slo = parse_slo("ttft_p95<=500ms,e2e_p95<=10s,error_rate<=1%,output_throughput>=100")
    good = step(ttft_ms=dist(200, 450), e2el_ms=dist(4000, 9000), output_throughput=150.0)
    results, met = slo.judge(good)
    assert met and [r.value for r in results] == [450, 9000, 0.01, 150.0]
    bad = step(ttft_ms=dist(200, 650), e2el_ms=dist(4000, 9000), output_throughput=90.0, completed=90, failed=10)
    results, met = slo.judge(bad)
    assert not met
    assert [r.met for r in results] == [False, True, False, False]
    assert slo.failed_names(results) == "ttft p95, error rate, output throughput"


def test_a_step_without_successful_requests_meets_no_latency_bound():
    results, met = parse_slo("ttft_p95<=500ms").judge(step(completed=0, failed=10))
    assert not met and results[0].value is None


def test_per_request_bounds_for_the_goodput_are_the_tightest_latency_bounds():
    slo = parse_slo("ttft_p95<=500ms,ttft_p99<=400ms,tpot_p50<=50ms,e2e_p95<=10s,itl_p95<=80ms,error_rate<=1%")
    assert slo.request_bounds() == {"ttft": 400.0, "tpot": 50.0, "e2e": 10_000.0}
