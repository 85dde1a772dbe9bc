"""The rhythm of `lpxtop load`'s sends as the simulated server receives them: a closed loop goes in rounds
exactly as a client written like `vllm bench serve` does (a semaphore of C over tasks that all exist from
the start), `--stagger` keeps its workers apart, and the report says which ran and how synchronised it was.

Behaviour, not timing: with one output length and a constant step time (no batch slowdown, no jitter), the
requests of a round are decoded in the same steps and end in the same step, whatever the machine's load;
the figures compared are far apart (rounds: three quarters or more of the other workers within 50 ms, seen 0.6-0.9 as a round
splits where the server admits its first request alone; staggered: seen 0.03-0.1).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from lpxtop.load.rhythm import synchrony
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.load_runs import plan_for, run_plan

pytestmark = [pytest.mark.timeout(120), pytest.mark.timing]  # measures time against tolerances: runs alone under pytest-xdist
WORKERS = 8
TOKENS = 24  # at 30 ms a step: a request ~0.75 s, so staggered workers are ~95 ms apart
SIM = dict(max_num_seqs=64, itl_ms=30.0, ttft_ms=5.0, batch_factor=0.0, prefill_ms_per_token=0.0, jitter=0.0)


async def bench_shaped_client(url: str, model: str, workers: int, prompts: int) -> None:
    """Closed loop as `vllm bench serve --max-concurrency` at `--request-rate inf` runs it: every request a
    task from the start, a semaphore of `workers`, one aiohttp session."""
    import aiohttp

    semaphore = asyncio.Semaphore(workers)
    body = {"model": model, "messages": [{"role": "user", "content": "the of and to in"}], "max_tokens": TOKENS,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}

    async def one(session: aiohttp.ClientSession) -> None:
        async with semaphore, session.post(f"{url}/chat/completions", json=body) as response:
            async for _ in response.content.iter_any():
                pass

    connector = aiohttp.TCPConnector(limit=workers, limit_per_host=workers, keepalive_timeout=60)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.wait_for(asyncio.gather(*(one(session) for _ in range(prompts))), 60)


def test_a_closed_loop_goes_in_rounds_like_vllm_bench_serve_and_stagger_keeps_its_workers_apart():
    with start_sim_in_thread(SimConfig(model="m", seed=31, **SIM)) as sim:
        # the reference's shape, as the server receives it (its first round left out: the start)
        asyncio.run(bench_shaped_client(sim.url, "m", WORKERS, WORKERS * 3))  # three rounds
        bench = sorted(r.t_received_ns for r in sim.server.records)[WORKERS:]

        results = {}
        for stagger in (False, True):
            plan = plan_for(sim.url, levels=(float(WORKERS),), output_tokens=TOKENS, ignore_eos=True,
                            duration_s=1.5, warmup_s=1.0, stagger=stagger)  # two rounds measured
            run = run_plan(plan, timeout_s=60)
            (step,) = run.state.steps
            ids = {line["response_id"] for line in run.lines() if line["counted"]}
            seen = [r.t_received_ns for r in sim.server.records if r.response_id in ids]
            results[stagger] = (step, run, seen)

    together, run_together, seen_together = results[False]
    staggered, run_staggered, seen_staggered = results[True]
    # the server was offered rounds by both closed loops alike, and spread sends with --stagger
    assert synchrony(bench, WORKERS) >= 0.5
    assert synchrony(seen_together, WORKERS) >= 0.5
    assert synchrony(seen_staggered, WORKERS) <= 0.25
    # the report's own figure, from lpxtop's send times, says the same, and names the schedule
    assert together.rhythm.schedule == "together" and together.rhythm.synchrony >= 0.5
    assert staggered.rhythm.schedule == "staggered" and staggered.rhythm.synchrony <= 0.25
    assert together.rhythm.dispersion > staggered.rhythm.dispersion
    assert json.loads(json.dumps(together.to_json()))["rhythm"]["schedule"] == "together"
    assert run_staggered.controller.plan.summary()["schedule"] == "staggered"
    assert run_together.controller.plan.summary()["schedule"] == "together"
    # a closed loop all the same: every worker counted, never more than C in flight
    assert together.completed >= WORKERS and staggered.completed >= WORKERS
