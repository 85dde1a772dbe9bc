"""Under real load, lpxtop's queue depth and running counts equal what the server's /metrics says.

vLLM (small-llama, 2 sequences at a time) and llama-server (4 slots) each get more concurrent long streams
than they have slots, so requests queue; each stream is followed at once by another, so the queue
lasts however fast the model is. Each comparison is a sandwich: a raw GET /metrics parsed with
prometheus_client, then lpxtop's ServerScraper, then another raw GET; when the two raw reads agree, the
gauges did not move in between and lpxtop's value must equal them exactly.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from dataclasses import dataclass

import httpx
import pytest

from lpxtop.model.endpoint import EndpointConfig
from tests.support.realservers import (
    LLAMA_MODEL,
    LLAMA_SLOTS,
    STARVED_MS,
    VLLM_MAX_NUM_SEQS,
    VLLM_MODEL,
    LoopLag,
    RawScrape,
    import_lpxtop,
    raw_scrape,
    stream_load,
    wait_idle,
)

pytestmark = [pytest.mark.realserver, pytest.mark.timeout(600)]

MAX_ROUNDS = 120  # sandwiches per test, whatever happens
# Normally 5 conclusive sandwiches take 5-15 s. The budget is wide so that one stalled sandwich (seen
# once on CI: a single sandwich that took 60 s, while the server drained its queue) does not use it up.
ROUND_BUDGET_S = 150.0
ENOUGH_QUEUED = 5  # conclusive sandwiches with a queue > 0 before stopping early


@dataclass(frozen=True)
class Case:
    """One server kind under load: which fixture, its gauge names, slots, and the load to apply."""

    fixture: str
    kind: str
    model: str
    running: str
    waiting: str
    kv: str | None
    slots: int
    streams: int
    max_tokens: int


CASES = [
    Case("vllm_server", "vllm", VLLM_MODEL, "vllm:num_requests_running", "vllm:num_requests_waiting",
         "vllm:kv_cache_usage_perc", VLLM_MAX_NUM_SEQS, streams=6, max_tokens=900),
    # Each slot holds LLAMA_CTX / LLAMA_SLOTS = 4096 tokens of context: prompt + 3800 fits. The tiny model
    # writes about 4000 tokens a second, so each stream holds its slot for about a second.
    Case("llama_server", "llamacpp", LLAMA_MODEL, "llamacpp:requests_processing", "llamacpp:requests_deferred",
         None, LLAMA_SLOTS, streams=8, max_tokens=3800),
]


@dataclass(frozen=True)
class Sandwich:
    before: RawScrape
    ours: object  # lpxtop.model.server.ServerMetrics
    after: RawScrape
    ours_s: tuple[float, float]  # when lpxtop's scrape was started and returned (time.monotonic())
    lag_ms: float  # the longest this test's event loop was held up during the sandwich
    waited_ms: float  # how long this process was runnable but not running, during the sandwich

    def steady(self, case: Case) -> bool:
        """The raw gauges read the same before and after lpxtop's scrape, and this process was not starved.

        A sandwich in which it was starved (see STARVED_MS) says nothing about lpxtop: it is shown in the
        failure message but not judged, and lpxtop may have timed out in it.
        """
        same = all(self.before.value(n) == self.after.value(n) for n in (case.running, case.waiting))
        return same and self.lag_ms < STARVED_MS

    @property
    def span_ms(self) -> float:
        return (self.after.answered - self.before.sent) * 1000

    def describe(self, case: Case) -> str:
        """One line: the three reads, and where the time went (for a failure message)."""
        ours = self.ours
        return (
            f"raw {self.before.value(case.running)}/{self.before.value(case.waiting)} -> "
            f"lpxtop {ours.requests_running}/{ours.requests_waiting} -> "
            f"raw {self.after.value(case.running)}/{self.after.value(case.waiting)} in {self.span_ms:.0f} ms "
            f"(raw {(self.before.answered - self.before.sent) * 1000:.0f}, "
            f"lpxtop {(self.ours_s[1] - self.ours_s[0]) * 1000:.0f} [GET {ours.scrape_ms or 0:.0f}, {ours.status}], "
            f"raw {(self.after.answered - self.after.sent) * 1000:.0f} ms; loop held up {self.lag_ms:.0f} ms, "
            f"off the CPU while runnable {self.waited_ms:.0f} ms)"
        )


async def lpxtop_scrape(scraper: object, client: object) -> object:
    result = scraper.scrape(client)
    return await result if inspect.isawaitable(result) else result


@pytest.mark.parametrize("case", CASES, ids=[c.kind for c in CASES])
async def test_queue_and_running_agree_with_direct_scrape(case: Case, request: pytest.FixtureRequest) -> None:
    servers = import_lpxtop("lpxtop.engine.scrape.servers", "ServerScraper")
    httpclient = import_lpxtop("lpxtop.http", "HttpClient")
    server = request.getfixturevalue(case.fixture)
    scraper = servers.ServerScraper(EndpointConfig(name=case.kind, url=server.api_url, model=case.model))
    sandwiches: list[Sandwich] = []
    async with httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as client, httpclient.HttpClient(timeout=10.0) as lpx:
        await wait_idle(client, server.origin, case.running, case.waiting)
        # lpxtop is connected before the load comes, as when it watches a server: llama-server serves
        # each connection on one of its n_parallel + 4 HTTP threads (8 here), so a new connection made
        # while the 8 streams hold them waits for one to finish (a first scrape then timed out at 3 s).
        await lpxtop_scrape(scraper, lpx)
        async with stream_load(server.api_url, case.model, case.streams, case.max_tokens) as load, LoopLag() as lag:
            deadline = time.monotonic() + ROUND_BUDGET_S
            for _ in range(MAX_ROUNDS):
                if time.monotonic() > deadline or all(t.done() for t in load.tasks):
                    break
                lag.take()
                before = await raw_scrape(client, server.origin)
                started = time.monotonic()
                ours = await lpxtop_scrape(scraper, lpx)
                returned = time.monotonic()
                after = await raw_scrape(client, server.origin)
                sandwiches.append(Sandwich(before, ours, after, (started, returned), *lag.take()))
                queued = [s for s in sandwiches if s.steady(case) and s.before.value(case.waiting)]
                if len(queued) >= ENOUGH_QUEUED:
                    break
                await asyncio.sleep(0.2)
    table = "\n".join(s.describe(case) for s in sandwiches)
    table += f"\nload: {load.finished} streams finished, {load.timeouts} timed out and started again"
    assert not load.errors, f"load streams failed: {load.errors[:3]}\n{table}"

    steady = [s for s in sandwiches if s.steady(case)]
    assert steady, f"the gauges moved (or this process was starved) during every sandwich:\n{table}"
    for s in sandwiches:
        assert s.ours.kind == case.kind, table
        if s.lag_ms < STARVED_MS:
            assert s.ours.status == "ok", table
        else:
            assert s.ours.status == "ok" or "timed out" in s.ours.status, table
    for s in steady:
        assert s.ours.requests_running == s.before.value(case.running), table
        assert s.ours.requests_waiting == s.before.value(case.waiting), table
        assert 0 <= s.ours.requests_running <= case.slots, table
        if case.kv is None:
            assert s.ours.kv_cache_usage is None, "llama-server has no KV-cache gauge: show --, never 0"
        else:
            lo, hi = sorted((s.before.value(case.kv), s.after.value(case.kv)))
            # KV use moves with every block the streams fill; lpxtop's read lies between the raw reads.
            assert lo - 0.01 <= s.ours.kv_cache_usage <= hi + 0.01, table
    queued = [s for s in steady if s.before.value(case.waiting) > 0]
    assert len(queued) >= 3, f"{case.streams} streams on {case.slots} slots should queue:\n{table}"
    assert max(s.ours.requests_running for s in queued) == case.slots, table
