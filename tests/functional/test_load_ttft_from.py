"""Where a request's clock starts: when it goes out (lpxtop's default) or when it is made (`--ttft-from
call`, the clock of `vllm bench serve`, which stamps a request before its own event loop and pool have sent
it). Behaviour, not timing: a pool of one connection makes the second of two requests wait a whole request
(~0.7 s) for lpxtop's own pool; only the reference clock counts that wait in its TTFT.
"""

from __future__ import annotations

import asyncio

import pytest

from lpxtop.engine.probe import run_probe
from lpxtop.http import HttpClient
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.load_runs import plan_for, run_plan

pytestmark = [pytest.mark.timeout(120), pytest.mark.timing]  # measures time against tolerances: runs alone under pytest-xdist
SIM = dict(max_num_seqs=8, itl_ms=30.0, ttft_ms=5.0, batch_factor=0.0, prefill_ms_per_token=0.0, jitter=0.0)
TOKENS = 24  # ~0.7 s a request at 30 ms a token


def pair(url: str, ttft_from: str):
    """Two requests at once through a pool of one connection: the second waits for the first."""
    endpoint = EndpointConfig(name="sim", url=url, model="m", max_tokens=TOKENS, extra_body=(("ignore_eos", True),))

    async def both():
        async with HttpClient(max_connections=1) as client:
            return await asyncio.wait_for(asyncio.gather(
                run_probe(client, endpoint, ttft_from=ttft_from), run_probe(client, endpoint, ttft_from=ttft_from)), 30)

    return asyncio.run(both())


def test_the_reference_clock_counts_lpxtops_own_wait_and_the_default_does_not():
    with start_sim_in_thread(SimConfig(model="m", seed=5, **SIM)) as sim:
        sent = pair(sim.url, "sent")
        call = pair(sim.url, "call")
    for first, second in (sent, call):
        assert first.ok and second.ok, (first.error_message, second.error_message)
    waited = max(sent, key=lambda s: s.pool_wait_ms or 0.0)
    first = min(sent, key=lambda s: s.pool_wait_ms or 0.0)
    assert waited.pool_wait_ms >= 0.5 * first.e2e_ms  # the pool made it wait about a whole request
    assert waited.ttft_ms < 0.5 * first.e2e_ms  # ... and its TTFT does not hold that wait
    waited_call = max(call, key=lambda s: s.pool_wait_ms or 0.0)
    first_call = min(call, key=lambda s: s.pool_wait_ms or 0.0)
    assert waited_call.pool_wait_ms >= 0.5 * first_call.e2e_ms
    assert waited_call.ttft_ms >= waited_call.pool_wait_ms  # the reference clock holds it


def test_the_report_says_which_clock_ran():
    with start_sim_in_thread(SimConfig(model="m", seed=6, **SIM)) as sim:
        plan = plan_for(sim.url, levels=(2.0,), output_tokens=8, ignore_eos=True, ttft_from="call")
        run = run_plan(plan, timeout_s=60)
    (step,) = run.state.steps
    assert step.completed >= 2
    assert step.rhythm.to_json()["ttft_from"] == "call" and step.rhythm.describe().endswith(" call")
    assert run.controller.plan.summary()["ttft_from"] == "call"
    with pytest.raises(ValueError, match="--ttft-from"):
        plan_for("http://127.0.0.1:9/v1", ttft_from="queued")
