"""Measured TTFT and ITL agree with what the simulated server recorded sending (real loopback HTTP)."""

from __future__ import annotations

import pytest

from lpxtop.engine.probe import run_probe
from lpxtop.http import HttpClient
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.sim import endpoint, fidelity_errors, p

pytestmark = pytest.mark.timing  # measures time against tolerances: runs alone under pytest-xdist

TOLERANCE_MS = 3.0


async def _probe_n(url: str, n: int, **kw):
    async with HttpClient() as client:
        return [await run_probe(client, endpoint(url, **kw)) for _ in range(n)]


@pytest.mark.parametrize(
    ("label", "config"),
    [
        ("role-only first chunk", SimConfig(model="m", ttft_ms=25, itl_ms=6, role_chunk_at="received")),
        ("several tokens per chunk", SimConfig(model="m", ttft_ms=25, itl_ms=6, tokens_per_chunk=3)),
    ],
)
async def test_ttft_and_itl_match_the_servers_record(label, config):
    with start_sim_in_thread(config) as sim:
        samples = await _probe_n(sim.url, 12, max_tokens=18)
        assert all(s.ok for s in samples), [s.error_text for s in samples]
        ttft_err, itl_err = fidelity_errors(samples, sim.server)
    # A role-only chunk arrives first, but TTFT is the first token.
    for s in samples:
        assert s.first_event_ms is not None and s.first_event_ms <= s.ttft_ms
        assert s.output_tokens == 18 and not s.output_tokens_approx
    assert abs(p(ttft_err, 0.5)) < TOLERANCE_MS, (label, ttft_err)
    assert abs(p(itl_err, 0.5)) < TOLERANCE_MS, (label, itl_err)
    assert min(ttft_err) > -0.5, "a token cannot arrive before the server sent it"


async def test_role_only_first_chunk_is_not_the_first_token():
    # The first token is held back 150 ms; the role chunk comes at once. TTFT must wait for the token.
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=2, first_token_delay_ms=150,
                                       role_chunk_at="received")) as sim:
        (sample,) = await _probe_n(sim.url, 1)
    assert sample.ok
    assert sample.first_event_ms < 100
    assert sample.ttft_ms >= 150


async def test_tokens_per_chunk_are_counted_from_usage():
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=2, tokens_per_chunk=4)) as sim:
        (sample,) = await _probe_n(sim.url, 1, max_tokens=20)
    assert sample.ok and sample.output_tokens == 20 and not sample.output_tokens_approx
    assert len(sample.token_event_ms) == 5
    # TPOT divides the decode time by the tokens, not by the events.
    assert sample.tpot_ms == pytest.approx((sample.e2e_ms - sample.ttft_ms) / 19)


async def test_without_a_usage_chunk_the_count_is_approximate():
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=2, send_usage=False)) as sim:
        # Several probes, judged by the median as above: one probe can lose the CPU on a busy machine.
        samples = await _probe_n(sim.url, 5, max_tokens=10)
        ttft_err, itl_err = fidelity_errors(samples, sim.server)
    for sample in samples:
        assert sample.ok
        assert sample.output_tokens == 10 and sample.output_tokens_approx
    assert abs(p(ttft_err, 0.5)) < TOLERANCE_MS and abs(p(itl_err, 0.5)) < TOLERANCE_MS


async def test_completions_api():
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=2)) as sim:
        # Judged by the median of several probes: a single one was 4.9 ms off with both cores loaded.
        samples = await _probe_n(sim.url, 5, api="completions", max_tokens=8)
        ttft_err, _ = fidelity_errors(samples, sim.server)
    assert all(s.ok and s.output_tokens == 8 for s in samples), [s.error_text for s in samples]
    assert abs(p(ttft_err, 0.5)) < TOLERANCE_MS, ttft_err
    assert min(ttft_err) > -0.5, "a token cannot arrive before the server sent it"


async def test_probes_reuse_one_connection():
    """After [DONE] the probe reads the body's end, so the pooled connection is reused: a new TCP
    connection per probe would cost CPU on both sides and is not what a client with a pool does."""
    import psutil

    with start_sim_in_thread(SimConfig(model="m", ttft_ms=2, itl_ms=1)) as sim:
        local_ports: set[int] = set()
        async with HttpClient() as client:
            for _ in range(5):
                sample = await run_probe(client, endpoint(sim.url, max_tokens=6))
                assert sample.ok, sample.error_text
                local_ports |= {
                    c.laddr.port
                    for c in psutil.Process().net_connections("tcp")
                    if c.raddr and c.raddr.port == sim.port and c.status == psutil.CONN_ESTABLISHED
                }
    assert len(local_ports) == 1, local_ports
