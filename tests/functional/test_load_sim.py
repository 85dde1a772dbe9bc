"""`lpxtop load` against the simulated server: the capacity it finds, the throughput it measures, errors and
hangs. The expected answers are computed from the simulator's parameters; every step is short."""

from __future__ import annotations

from collections import Counter

import pytest

from lpxtop.load.slo import parse_slo
from lpxtop.sim.config import SimConfig
from lpxtop.sim.records import token_times_ns
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.load_runs import plan_for, run_plan

pytestmark = [pytest.mark.timeout(90), pytest.mark.timing]  # measures time against tolerances: runs alone under pytest-xdist


def test_capacity_search_finds_the_concurrency_the_simulator_serves_within_the_slo():
    # A vLLM-like server with 4 slots and known costs. jitter 0: the costs are exact.
    cfg = SimConfig(max_num_seqs=4, itl_ms=12.0, ttft_ms=20.0, batch_factor=0.1, prefill_ms_per_token=0.02,
                    jitter=0.0, kv_tokens=65_536, seed=3)
    n_tokens, prompt = 16, 40  # output tokens; prompt tokens are ~20 (template + random prefix + default prompt)
    slots = cfg.max_num_seqs
    step_full = cfg.itl_ms * (1 + cfg.batch_factor * (slots - 1)) + cfg.ttft_ms + cfg.prefill_ms_per_token * prompt * slots
    # Within the slots a request waits at most the step under way, then has its own prefill step.
    no_queue_ttft = 2 * step_full
    # Past them (closed loop, C > slots): at least one request in C waits for a whole request to finish.
    service = n_tokens * cfg.itl_ms * (1 + cfg.batch_factor * (slots - 1))
    queued_ttft = service
    assert no_queue_ttft < 0.5 * queued_ttft  # the SLO below separates the two with room on both sides
    threshold = (no_queue_ttft + queued_ttft) / 2
    expected = slots  # the highest concurrency with no queueing: the answer the search must find
    with start_sim_in_thread(cfg) as sim:
        plan = plan_for(sim.url, levels=(2.0,), search=True, max_level=64, output_tokens=n_tokens,
                        slo=parse_slo(f"ttft_p95<={threshold:.0f}ms,error_rate<=1%"), duration_s=0.5, warmup_s=0.2)
        run = run_plan(plan, timeout_s=80)
    state = run.state
    tried = [(int(s.level), s.slo_met) for s in state.steps]
    assert state.capacity is not None and state.capacity.level == expected, (tried, state.capacity)
    assert tried[:3] == [(2, True), (4, True), (8, False)], tried
    assert {c for c, _ in tried} <= {2, 4, 5, 6, 8}
    cap_step = state.steps[state.capacity.step_index]
    assert cap_step.ttft_ms.p95 <= threshold
    over = next(s for s in state.steps if s.level == 8)
    # the server's own queue says why: C - slots wait at once past the slots (within them a request that
    # arrives during a step waits for its end, as in vLLM, so a scrape may see a few waiting there too)
    assert over.server.peak_requests_waiting >= over.level - slots
    assert state.capacity.sentence.startswith(f"capacity: {expected} concurrent requests (ttft p95 ")
    assert state.capacity.sentence.endswith("failed ttft p95")
    assert run.controller.outcome == "done"


@pytest.mark.parametrize("load", [{"levels": (3.0,)}, {"mode": "rate", "levels": (12.0,)}],
                         ids=["closed-loop", "open-loop"])
def test_throughput_and_tokens_per_step_equal_what_the_simulator_recorded(load):
    cfg = SimConfig(max_num_seqs=8, itl_ms=8.0, ttft_ms=15.0, jitter=0.05, random_stop=True, seed=5)
    with start_sim_in_thread(cfg) as sim:
        plan = plan_for(sim.url, output_tokens=24, duration_s=0.8, **load)
        run = run_plan(plan)
        records = {r.response_id: r for r in sim.server.records}
    (step,) = run.state.steps
    if step.concurrency is not None:
        # never more than the set concurrency in flight, as the server saw it (every request of the run)
        edges = sorted([(r.t_received_ns, 1) for r in records.values()]
                       + [(r.t_done_ns, -1) for r in records.values() if r.t_done_ns is not None])
        in_flight = most = 0
        for _, change in edges:
            in_flight += change
            most = max(most, in_flight)
        assert most == step.concurrency
    counted = [line for line in run.lines() if line["counted"]]
    assert step.completed == len(counted) > 5 and step.failed == 0
    truth = [records[line["response_id"]] for line in counted]
    # random_stop: output lengths differ per request; the step's count is the server's usage, never estimated
    assert step.total_output_tokens == sum(r.completion_tokens for r in truth)
    assert len({r.completion_tokens for r in truth}) > 1
    assert step.total_input_tokens == sum(r.prompt_tokens for r in truth)
    assert not step.output_tokens_approx and step.input_tokens_from_usage
    # duration: the client's first send to its last completion; the server's: first request in to last byte out
    server_span_s = (max(r.t_done_ns for r in truth) - min(r.t_received_ns for r in truth)) / 1e9
    assert step.duration_s == pytest.approx(server_span_s, rel=0.03, abs=0.01)
    assert step.output_throughput == pytest.approx(step.total_output_tokens / server_span_s, rel=0.03)
    # TTFT of each request against the record: the byte-arrival measurement of the probes
    errors = []
    for line in counted:
        r = records[line["response_id"]]
        first_token_ns = token_times_ns(r.events)[0]
        server_ttft_ms = (first_token_ns - r.t_received_ns) / 1e6
        errors.append(line["ttft_ms"] - server_ttft_ms)  # >= 0: includes the request's trip to the server
    assert min(errors) > -1.0 and sorted(errors)[len(errors) // 2] < 15.0


def test_a_server_failing_a_fifth_of_requests_fails_error_rate_with_the_kinds_counted():
    cfg = SimConfig(max_num_seqs=8, itl_ms=2.0, ttft_ms=5.0, jitter=0.0, fail_rate=0.2, seed=11)
    with start_sim_in_thread(cfg) as sim:
        plan = plan_for(sim.url, levels=(4.0,), output_tokens=8, slo=parse_slo("error_rate<=1%"), warmup_requests=2,
                        duration_s=0.6)
        run = run_plan(plan)
    (step,) = run.state.steps
    assert step.requests >= 40
    assert dict(step.errors) == {"http_5xx": step.failed}
    assert 0.08 <= step.error_rate <= 0.35  # 20 % by the simulator's seeded coin, binomial spread allowed
    assert step.slo_met is False and [r.metric for r in step.slo if not r.met] == ["error_rate"]
    kinds = Counter(line["error"] for line in run.lines() if line["counted"] and not line["ok"])
    assert kinds == Counter({"http_5xx": step.failed})
    assert run.state.capacity.level is None and "failed error rate" in run.state.capacity.sentence


def test_a_server_that_hangs_times_the_step_out_bounded():
    cfg = SimConfig(max_num_seqs=8, itl_ms=2.0, ttft_ms=5.0, jitter=0.0, seed=2)
    with start_sim_in_thread(cfg) as sim:
        def hang_once_the_step_starts(kind: str, payload: dict, wall_time: float) -> None:
            if kind == "load_step_start":  # after the warm-up requests, which must succeed
                sim.server.set_faults(slow_headers_s=30.0)

        plan = plan_for(sim.url, levels=(2.0,), duration_s=0.5, warmup_s=0.2,
                        endpoint={"first_token_timeout_s": 0.5, "timeout_s": 1.0})
        run = run_plan(plan, on_mark=hang_once_the_step_starts, timeout_s=30)
    (step,) = run.state.steps
    assert step.completed == 0 and step.failed >= 2
    assert dict(step.errors) == {"first_token_timeout": step.failed}
    # bounded: warm-up + window + one request's timeout + the drain's grace, whatever the server does
    assert step.wall_s <= 0.2 + 0.5 + 1.0 + 2.0
    assert step.status == "done" and step.ttft_ms is None


def test_input_token_sweep_aims_at_the_servers_own_prompt_counts_and_prefill_shows_in_ttft():
    cfg = SimConfig(max_num_seqs=4, itl_ms=2.0, ttft_ms=5.0, prefill_ms_per_token=0.1, jitter=0.0,
                    kv_tokens=65_536, max_model_len=8192, seed=6)
    with start_sim_in_thread(cfg) as sim:
        plan = plan_for(sim.url, mode="input_tokens", levels=(64.0, 1024.0), concurrency=1, output_tokens=8,
                        duration_s=0.6, warmup_s=0.1)
        run = run_plan(plan)
    short, long = run.state.steps
    for step in (short, long):
        # the simulator counts one token per word: the calibration hits the target exactly
        assert step.total_input_tokens == step.completed * step.level
    # prefill: 0.1 ms per token, so ~96 ms more TTFT at 1024 tokens than at 64
    assert long.ttft_ms.p50 - short.ttft_ms.p50 == pytest.approx((1024 - 64) * cfg.prefill_ms_per_token, abs=30)


def test_without_the_random_prefix_the_prefix_cache_hides_prefill_and_lpxtop_says_so():
    cfg = SimConfig(max_num_seqs=4, itl_ms=2.0, ttft_ms=5.0, jitter=0.0, seed=7)
    with start_sim_in_thread(cfg) as sim:
        plan = plan_for(sim.url, levels=(2.0,), output_tokens=8, input_tokens=512, duration_s=0.6, warmup_s=0.1,
                        endpoint={"random_prefix": False})
        run = run_plan(plan)
    (step,) = run.state.steps
    assert step.server.prefix_cache_hit_rate > 0.9
    assert "prefix cache hit" in run.controller.prefix_cache_warning


def test_a_step_whose_generator_was_late_is_client_limited_and_never_the_capacity():
    cfg = SimConfig(max_num_seqs=4, itl_ms=5.0, ttft_ms=5.0, jitter=0.0, seed=9)
    with start_sim_in_thread(cfg) as sim:
        def hog_the_loop(kind: str, payload: dict, wall_time: float) -> None:
            # runs on the generator's loop: hold it 60 ms out of every 100 ms during the step
            if kind != "load_step_start":
                return
            import asyncio
            import time

            loop = asyncio.get_running_loop()
            until = time.monotonic() + 1.5

            def hog() -> None:
                time.sleep(0.06)
                if time.monotonic() < until:
                    loop.call_later(0.04, hog)

            loop.call_later(0.05, hog)

        plan = plan_for(sim.url, levels=(2.0,), output_tokens=16, duration_s=0.8, warmup_s=0.1,
                        slo=parse_slo("error_rate<=1%"), lag_limit_ms=20.0)
        run = run_plan(plan, on_mark=hog_the_loop)
    (step,) = run.state.steps
    assert step.slo_met is True and step.client.limited
    assert step.client.lag_p99_ms >= 40 and "event loop" in step.client.reason
    assert run.state.capacity.level is None
    assert "client-limited" in run.state.capacity.sentence


def test_requests_longer_than_the_window_still_give_every_worker_a_counted_request():
    # 8 tokens at 60 ms: ~0.45 s a request, a 0.1-s window: the workers are busy with warm-up requests all
    # through it. The window stays open until each has sent a counted request.
    cfg = SimConfig(max_num_seqs=4, itl_ms=60.0, ttft_ms=5.0, batch_factor=0.0, jitter=0.0, seed=12)
    with start_sim_in_thread(cfg) as sim:
        plan = plan_for(sim.url, levels=(2.0,), output_tokens=8, duration_s=0.1, warmup_s=0.05)
        run = run_plan(plan)
    (step,) = run.state.steps
    assert step.completed >= 2 and step.window_extended_s > 0.2
    assert step.to_json()["window_extended_s"] == pytest.approx(step.window_extended_s, abs=0.001)


def test_an_open_loop_past_its_cap_holds_arrivals_back_and_says_the_load_was_not_offered():
    # ~0.1 s a request, 2 at most in flight: ~20 req/s can be served; 40 req/s arrive
    cfg = SimConfig(max_num_seqs=8, itl_ms=10.0, ttft_ms=10.0, batch_factor=0.0, jitter=0.0, seed=13)
    with start_sim_in_thread(cfg) as sim:
        plan = plan_for(sim.url, mode="rate", levels=(40.0,), max_concurrency=2, output_tokens=8, duration_s=0.8,
                        warmup_s=0.1)
        run = run_plan(plan)
        records = sim.server.records
    (step,) = run.state.steps
    assert step.arrivals_delayed > 0 and step.max_concurrency == 2
    assert step.saturated is not None
    assert max(sum(1 for r in records if r.t_received_ns <= t < (r.t_done_ns or t + 1)) for t in
               (r.t_received_ns for r in records)) <= 2
