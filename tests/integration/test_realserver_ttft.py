"""lpxtop's probe TTFT agrees with vLLM's own TTFT histogram over the same requests.

vLLM starts its TTFT clock when the request arrives and stops it when the first token leaves the engine;
the probe starts before sending and stops when the first token-bearing event arrives. So each client TTFT
is at least the server's TTFT, and sorting preserves that: the k-th smallest client TTFT is at least the
lower bound of the histogram bucket holding the k-th smallest server TTFT, and the client's mean is at
least the server's exact mean (the histogram's _sum / _count). The other way, the client adds only HTTP,
streaming and scheduling overhead, bounded by the slacks below.
"""

from __future__ import annotations

import asyncio
import time
from types import ModuleType

import httpx
import pytest

from lpxtop.model.endpoint import EndpointConfig
from tests.support.realservers import (
    STARVED_MS,
    VLLM_MODEL,
    LoopLag,
    RawScrape,
    import_lpxtop,
    raw_scrape,
    wait_idle,
)

pytestmark = [pytest.mark.realserver, pytest.mark.timeout(600)]

PROBES = 8
BATCHES = 6  # batches tried, for one without an empty answer or a starved process
TTFT = "vllm:time_to_first_token_seconds"
# Measured here (small-llama, 16 tokens, idle server): server TTFT 58-74 ms mean per batch of 8, in the
# (40, 60] and (60, 80] ms buckets; the client's mean was 7-14 ms above the server's over 10 batches, and
# 27 ms while a C++ build kept both cores busy (single requests up to 67 ms over their bucket). That
# overhead is HTTP parsing before vLLM's clock starts, and detokenizing + streaming after it stops.
# MEAN_SLACK_MS allows 5x the loaded figure; a TTFT taken at the end of the stream instead (E2E ~370 ms)
# would exceed it. WORST_SLACK_MS only catches absurd single values (a request that lost the CPU for a
# second is still plausible on a shared 2-core machine).
MEAN_SLACK_MS = 150.0
WORST_SLACK_MS = 1000.0


def bucket_bounds(delta: dict[float, float], k: int) -> tuple[float, float]:
    """(lower, upper) bound in ms of the bucket holding the k-th smallest (1-based) observation."""
    lower = 0.0
    for le in sorted(delta):
        if delta[le] >= k:
            return lower * 1000, le * 1000
        lower = le
    raise AssertionError(f"the histogram holds fewer than {k} observations: {delta}")


def histogram_delta(before: RawScrape, after: RawScrape) -> dict[float, float]:
    b, a = before.buckets(TTFT), after.buckets(TTFT)
    return {le: a[le] - b.get(le, 0.0) for le in a}


async def probe_batch(
    probe: ModuleType, client: httpx.AsyncClient, ours: object, endpoint: EndpointConfig, origin: str
):
    """PROBES sequential probes over lpxtop's client `ours`; (samples, /metrics before, /metrics after,
    TTFT histogram delta), the raw scrapes over httpx's `client`."""
    before = await raw_scrape(client, origin)
    samples = [await probe.run_probe(ours, endpoint) for _ in range(PROBES)]
    # vLLM records TTFT before streaming the token, so the delta is complete by now; allow a moment.
    deadline = time.monotonic() + 5.0
    while True:
        after = await raw_scrape(client, origin)
        delta = histogram_delta(before, after)
        if delta[float("inf")] >= PROBES or time.monotonic() > deadline:
            return samples, before, after, delta
        await asyncio.sleep(0.2)


async def test_probe_ttft_matches_server_histogram(vllm_server) -> None:
    probe = import_lpxtop("lpxtop.engine.probe", "run_probe")
    httpclient = import_lpxtop("lpxtop.http", "HttpClient")
    endpoint = EndpointConfig(name="vllm", url=vllm_server.api_url, model=VLLM_MODEL, max_tokens=16)
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0)) as client, httpclient.HttpClient(timeout=30.0) as ours:
        await wait_idle(client, vllm_server.origin, "vllm:num_requests_running", "vllm:num_requests_waiting")
        for _ in range(3):  # opens the pooled connection, warms the engine
            warm = await probe.run_probe(ours, endpoint)
            if warm.ok:
                break
        assert warm.ok, warm.error_text
        # The random-weight model picks end-of-sequence as its very first token in ~1.3% of requests
        # (measured: 2 of 150), which the probe rightly reports as `empty`. Such a request has a server
        # TTFT but no client TTFT, so the pairing below would not hold: redo the batch.
        # A batch in which the machine kept this process off the CPU for a second or more (see STARVED_MS)
        # measures the machine, not lpxtop: redo it too.
        tried = []
        async with LoopLag() as lag:
            for _ in range(BATCHES):
                samples, before, after, delta = await probe_batch(probe, client, ours, endpoint, vllm_server.origin)
                held_ms, waited_ms = lag.take()
                empty = any(s.error_kind == "empty" for s in samples)
                tried.append(f"empty answer: {empty}, loop held up {held_ms:.0f} ms, off the CPU {waited_ms:.0f} ms")
                # healthy here: held up 2-4 ms, off the CPU 2-4 ms per batch; starved by a full-weight vLLM:
                # off the CPU 2.2-2.9 s per batch (loop held up ~350 ms at a time), client TTFTs ~280 ms late
                starved = held_ms >= STARVED_MS or waited_ms >= STARVED_MS
                if not empty and not starved:
                    break
        assert not starved, "this process was starved in every batch:\n" + "\n".join(tried)

    assert all(s.ok for s in samples), [s.error_text for s in samples]
    assert delta[float("inf")] == PROBES, f"server counted {delta[float('inf')]} requests, we sent {PROBES}"
    # Output and prompt tokens come from `usage`; the server's own counters must say the same.
    assert all(s.output_tokens and not s.output_tokens_approx for s in samples)
    generated = after.value("vllm:generation_tokens_total") - before.value("vllm:generation_tokens_total")
    assert sum(s.output_tokens for s in samples) == generated
    prompted = after.value("vllm:prompt_tokens_total") - before.value("vllm:prompt_tokens_total")
    assert sum(s.prompt_tokens for s in samples) == prompted

    client_ttft = sorted(s.ttft_ms for s in samples)
    rows = []
    for k, ttft in enumerate(client_ttft, start=1):
        lower, upper = bucket_bounds(delta, k)
        rows.append((ttft, lower, upper))
    table = "\n".join(f"client {t:8.1f} ms   server bucket ({lo:g}, {hi:g}] ms" for t, lo, hi in rows)
    for ttft, lower, _ in rows:
        assert ttft >= lower, f"a client TTFT below the server's:\n{table}"
    server_mean = (after.value(f"{TTFT}_sum") - before.value(f"{TTFT}_sum")) * 1000 / PROBES
    client_mean = sum(client_ttft) / PROBES
    table += f"\nmean: client {client_mean:.1f} ms, server {server_mean:.1f} ms"
    assert server_mean <= client_mean <= server_mean + MEAN_SLACK_MS, table
    for ttft, _, upper in rows:
        assert ttft <= upper + WORST_SLACK_MS, f"a client TTFT far above the server's:\n{table}"
    assert all(s.e2e_ms >= s.ttft_ms > 0 for s in samples)
