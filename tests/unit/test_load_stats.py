"""A step's statistics: vllm bench serve's definitions, held to the standard library's quantiles."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lpxtop.load.stepstats import RequestRecord, StepRequests, client_health, summarize
from lpxtop.model.load import Dist, StepResult
from lpxtop.model.probe import Sample


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=2, max_size=300))
def test_dist_matches_numpys_linear_quantiles_and_population_std(values):
    d = Dist.of(values)
    assert d is not None
    # statistics.quantiles(method="inclusive") is numpy's default ("linear") interpolation
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    for q in (50, 90, 95, 99):
        assert d.quantile(q) == pytest.approx(cuts[q - 1], rel=1e-9, abs=1e-9)
    assert d.mean == pytest.approx(statistics.fmean(values), rel=1e-9, abs=1e-9)
    assert d.std == pytest.approx(statistics.pstdev(values), rel=1e-6, abs=1e-6)
    assert d.max == max(values) and d.count == len(values)


def sample(start_ns: int, ttft: float, gaps: list[float], tokens: int | None, ok: bool = True,
           kind: str | None = None, prompt: int | None = 100) -> Sample:
    events = [ttft]
    for g in gaps:
        events.append(events[-1] + g)
    return Sample(endpoint="load", wall_time=start_ns / 1e9, start_ns=start_ns, ok=ok, error_kind=kind,
                  ttft_ms=ttft if ok else None, e2e_ms=events[-1] if ok else None,
                  token_event_ms=tuple(events) if ok else (), tokens_per_event=(1,) * len(events) if ok else (),
                  output_tokens=tokens, prompt_tokens=prompt)


def base_step() -> StepResult:
    return StepResult(index=0, mode="concurrency", level=2.0, concurrency=2, request_rate=None, burstiness=None,
                      max_concurrency=None, input_tokens_target=None, output_tokens_target=4, status="running",
                      started_at=0.0, duration_s=0.0, completed=0, failed=0)


def test_definitions_are_vllm_bench_serves():
    requests = StepRequests()
    s1 = sample(0, 100.0, [10.0, 20.0, 30.0], tokens=4)  # E2E 160, TPOT (160-100)/3 = 20
    s2 = sample(50_000_000, 200.0, [40.0], tokens=3)  # usage says 3 tokens in 2 events: TPOT (240-200)/2 = 20
    s3 = sample(100_000_000, 0.0, [], tokens=None, ok=False, kind="http_5xx")
    ends = {0: 300_000_000, 50_000_000: 400_000_000, 100_000_000: 2_000_000_000}
    for s in (s1, s2, s3):
        requests.add(RequestRecord.of(s, ends[s.start_ns], 0.5, "measured"), s)
    assert requests.duration_s == pytest.approx(2.0)  # first send (0) to last completion (2 s, the failure)
    step = summarize(base_step(), requests.records, requests.gaps, requests.duration_s,
                     goodput_bounds={"ttft": 150.0})
    assert (step.completed, step.failed, dict(step.errors)) == (2, 1, {"http_5xx": 1})
    assert step.total_output_tokens == 7 and step.total_input_tokens == 200
    assert step.request_throughput == pytest.approx(1.0)
    assert step.output_throughput == pytest.approx(3.5)
    assert step.total_token_throughput == pytest.approx(103.5)
    assert step.request_goodput == pytest.approx(0.5)  # only s1 has TTFT <= 150
    assert step.ttft_ms.p50 == pytest.approx(150.0)
    assert step.tpot_ms.mean == pytest.approx(20.0)
    assert sorted(requests.gaps) == [10.0, 20.0, 30.0, 40.0]  # ITL pooled over requests, per gap
    assert step.itl_ms.mean == pytest.approx(25.0)
    assert step.e2el_ms.max == pytest.approx(240.0)
    assert step.error_rate == pytest.approx(1 / 3)
    data = step.to_json()
    for key in ("completed", "failed", "duration", "request_throughput", "output_throughput", "total_output_tokens",
                "mean_ttft_ms", "median_ttft_ms", "p95_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_itl_ms",
                "p99_e2el_ms", "concurrency", "request_rate", "errors", "slo_met", "server"):
        assert key in data, key
    assert data["median_ttft_ms"] == 150.0 and data["errors"] == {"http_5xx": 1}


def test_a_request_record_keeps_what_the_jsonl_needs():
    s = sample(0, 12.5, [5.0], tokens=2)
    line = RequestRecord.of(s, 30_000_000, 1.25, "measured").to_json(3, "concurrency", 8.0)
    assert line["step"] == 3 and line["concurrency"] == 8 and line["counted"] is True
    assert line["latency_ms"] == 30.0 and line["ttft_ms"] == 12.5 and line["client_lag_ms"] == 1.25


def test_client_health_flags_a_late_loop_and_a_thread_short_of_cpu():
    calm = client_health([0.2] * 99 + [3.0], 0.01, lag_limit_ms=20, cpu_wait_limit=0.1)
    assert not calm.limited and calm.reason is None
    late = client_health([0.2] * 90 + [45.0] * 10, 0.01, lag_limit_ms=20, cpu_wait_limit=0.1)
    assert late.limited and "event loop" in late.reason
    starved = client_health([0.2] * 100, 0.3, lag_limit_ms=20, cpu_wait_limit=0.1)
    assert starved.limited and "waited for a CPU 30 %" in starved.reason
