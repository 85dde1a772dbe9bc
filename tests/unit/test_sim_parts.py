"""The sim's parts without HTTP: config, faults, prefix cache, buckets, and the scheduler's batching."""

from __future__ import annotations

import asyncio
import statistics

import pytest

from lpxtop.sim.config import SimConfig, load_function, parse_background_load
from lpxtop.sim.faults import Faults, FaultState, validate_faults
from lpxtop.sim.metrics import SimMetrics, build_1_2_5_buckets
from lpxtop.sim.prefix_cache import PrefixCache
from lpxtop.sim.scheduler import BatchScheduler, SimRequest


def test_config_clamps_the_context_to_the_kv_cache_and_rejects_nonsense() -> None:
    assert SimConfig(kv_tokens=1000, max_model_len=4096).max_model_len == 1000
    for bad in ({"max_num_seqs": 0}, {"tokens_per_chunk": 0}, {"fail_rate": 1.5}, {"role_chunk_at": "never"},
                {"empty_chunk_rate": -0.1}, {"empty_chunk_rate": 1.5}):
        with pytest.raises(ValueError):
            SimConfig(**bad)


def test_the_empty_chunk_rate_is_a_command_line_flag() -> None:
    import argparse

    from lpxtop.cli.sim import add_sim_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_sim_arguments(parser)
    assert config_from_args(parser.parse_args([])).empty_chunk_rate == 0.0
    assert config_from_args(parser.parse_args(["--empty-chunk-rate", "0.2"])).empty_chunk_rate == 0.2
    with pytest.raises(ValueError):
        config_from_args(parser.parse_args(["--empty-chunk-rate", "2"]))


def test_background_load_parsing_and_sine() -> None:
    assert parse_background_load("off") is None
    assert parse_background_load(" 2, 24 ,60") == (2.0, 24.0, 60.0)
    for bad in ("2,24", "a,b,c", "5,2,60", "1,2,0"):
        with pytest.raises(ValueError):
            parse_background_load(bad)
    sine = load_function((2.0, 24.0, 60.0))
    assert sine is not None
    assert sine(0) == pytest.approx(2.0)
    assert sine(15) == pytest.approx(13.0)
    assert sine(30) == pytest.approx(24.0)
    assert sine(60) == pytest.approx(2.0)
    assert load_function(None) is None


def test_fault_validation() -> None:
    assert validate_faults({"fail_rate": 1, "cut_after_tokens": None}) == {
        "fail_rate": 1.0,
        "cut_after_tokens": None,
    }
    for bad in (
        {"nope": 1},
        {"fail_rate": 2},
        {"cut_after_tokens": -1},
        {"rate_limit": "yes"},
        {"api_key": ""},
    ):
        with pytest.raises(ValueError):
            validate_faults(bad)


def test_one_shot_faults_apply_to_the_next_n_requests_on_top_of_standing_ones() -> None:
    state = FaultState(SimConfig(fail_rate=0.25))
    state.set(rate_limit=True)
    state.set(count=2, cut_after_tokens=3)
    state.set(count=1, empty=True)
    taken = [state.take() for _ in range(4)]
    assert [f.cut_after_tokens for f in taken] == [3, 3, None, None]
    assert [f.empty for f in taken] == [False, False, True, False]
    assert all(f.rate_limit and f.fail_rate == 0.25 for f in taken)
    assert state.peek() == taken[-1]
    state.reset()
    assert state.take() == Faults(fail_rate=0.25)
    with pytest.raises(ValueError):
        state.set(count=0, empty=True)


def test_faults_never_show_the_api_key() -> None:
    state = FaultState(SimConfig(api_key="sk-secret"))
    state.set(count=1, api_key="sk-other")
    text = repr(state.to_json())
    assert "sk-secret" not in text and "sk-other" not in text
    assert Faults(api_key="k", bad_json=True).active() == ["api_key", "bad_json"]


def test_prefix_cache_hits_only_a_shared_prefix_of_full_blocks() -> None:
    cache = PrefixCache(block_tokens=4, max_blocks=100)
    first = [f"t{i}" for i in range(10)]  # blocks t0-t3, t4-t7 (t8, t9 not a full block)
    assert cache.lookup_and_insert(first) == 0
    assert cache.lookup_and_insert(first) == 8
    other_start = ["x"] + first[1:]
    assert cache.lookup_and_insert(other_start) == 0  # chained hashes: no hit after a different start
    assert cache.lookup_and_insert(first[:8]) == 7  # the last token is always computed
    small = PrefixCache(block_tokens=4, max_blocks=2)
    small.lookup_and_insert(first)
    small.lookup_and_insert([f"u{i}" for i in range(8)])  # evicts the first prompt's blocks
    assert small.lookup_and_insert(first) == 0


def test_token_buckets_follow_vllms_1_2_5_rule() -> None:
    # vllm-0.32.0 capture (--max-model-len 1024): 1, 2, 5, ... 1000.
    assert build_1_2_5_buckets(1024) == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
    assert build_1_2_5_buckets(4096) == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]


def _engine(**kw) -> BatchScheduler:
    config = SimConfig(**{"model": "m", "jitter": 0.0, "prefill_ms_per_token": 0.0, **kw})
    return BatchScheduler(config, SimMetrics("m", config.max_model_len, config.kv_tokens))


def _request(name: str, prompt: int = 8, tokens: int = 5) -> SimRequest:
    return SimRequest(
        request_id=name,
        prompt=[f"{name}{i}" for i in range(prompt)],
        max_tokens=tokens,
        target_tokens=tokens,
        events=asyncio.Queue(),
    )


async def _drain(request: SimRequest, timeout_s: float = 5.0) -> list[tuple]:
    assert request.events is not None
    events = []
    while True:
        event = await asyncio.wait_for(request.events.get(), timeout_s)
        events.append(event)
        if event[0] == "finished" or (event[0] == "tokens" and event[3] is not None):
            return events


async def test_step_time_grows_with_the_batch() -> None:
    engine = _engine(ttft_ms=20, itl_ms=10, batch_factor=0.5)
    engine.start()
    try:
        a, b = _request("a", tokens=6), _request("b", tokens=6)
        engine.submit(a)
        engine.submit(b)
        events_a, _ = await asyncio.gather(_drain(a), _drain(b))
    finally:
        await engine.stop()
    admitted = events_a[0][1]
    token_times = [e[2] for e in events_a if e[0] == "tokens"]
    assert token_times[0] - admitted >= 0.020  # one batched prefill of 20 ms
    gaps = [y - x for x, y in zip(token_times, token_times[1:])]
    # Two decoding: 10 ms * (1 + 0.5 * (2 - 1)) = 15 ms per step.
    assert min(gaps) >= 0.015
    assert statistics.median(gaps) < 0.030
    assert events_a[-1][3] == "length" and a.generated == 6


def test_a_step_costs_its_decodes_and_its_prefills_not_a_decode_slot_for_each_prefill() -> None:
    # the SimConfig timing rule, step by step (jitter 0): decode term over the requests decoding in the step,
    # prefill term once for the prompts prefilled in it
    engine = _engine(ttft_ms=20, itl_ms=40, batch_factor=0.05, prefill_ms_per_token=0.02)

    def requests(n: int, tokens: int = 19) -> list[SimRequest]:
        made = [_request(f"r{i}", prompt=tokens) for i in range(n)]
        for r in made:
            r.prefill_uncached = tokens
        return made

    ms = lambda prefilling, decoding: engine._step_seconds(prefilling, decoding) * 1000  # noqa: E731
    assert ms([], requests(100)) == pytest.approx(40 * (1 + 0.05 * 99))  # a decode step of 100
    assert ms(requests(100), []) == pytest.approx(20 + 0.02 * 1900)  # a round's prefills alone
    # a round of 99 prompts beside one decoding request: one decode slot, not 100
    assert ms(requests(99), requests(1)) == pytest.approx(40 + 20 + 0.02 * 99 * 19)
    assert ms(requests(3), requests(97)) == pytest.approx(40 * (1 + 0.05 * 96) + 20 + 0.02 * 3 * 19)


async def test_fifo_admission_and_waiting_beyond_max_num_seqs() -> None:
    engine = _engine(ttft_ms=1, itl_ms=1, max_num_seqs=1)
    engine.start()
    try:
        requests = [_request(name, tokens=3) for name in "abc"]
        for r in requests:
            engine.submit(r)
        assert (engine.requests_running, engine.requests_waiting) == (0, 3)  # the loop has not run yet
        results = await asyncio.gather(*[_drain(r) for r in requests])
    finally:
        await engine.stop()
    admitted = [events[0][1] for events in results]
    finished = [events[-1][2] for events in results]
    assert admitted == sorted(admitted)
    assert admitted[1] >= finished[0] and admitted[2] >= finished[1]


async def test_preemption_hits_the_newest_request_and_it_resumes() -> None:
    # Two requests of 8 + 20 tokens need 56 KV tokens; 40 forces one out.
    engine = _engine(ttft_ms=1, itl_ms=1, max_num_seqs=2, kv_tokens=40)
    engine.start()
    try:
        old, new = _request("old", tokens=20), _request("new", tokens=20)
        engine.submit(old)
        engine.submit(new)
        await asyncio.gather(_drain(old), _drain(new))
    finally:
        await engine.stop()
    assert old.num_preemptions == 0 and new.num_preemptions >= 1
    assert engine.preemptions_total == new.num_preemptions
    assert (old.generated, new.generated) == (20, 20)
    assert engine.kv_tokens_used == 0


async def test_abort_frees_the_slot_and_counts_abort() -> None:
    engine = _engine(ttft_ms=1, itl_ms=50, max_num_seqs=1)
    engine.start()
    try:
        long, queued = _request("long", tokens=100), _request("queued", tokens=2)
        engine.submit(long)
        engine.submit(queued)
        await asyncio.sleep(0.02)
        assert engine.requests_running == 1 and engine.requests_waiting == 1
        engine.abort(long)
        events = await _drain(queued)
    finally:
        await engine.stop()
    assert events[-1][3] == "length"
    labels = {"engine": "0", "model_name": "m", "finished_reason": "abort"}
    assert engine.metrics.registry.get_sample_value("vllm:request_success_total", labels) == 1
