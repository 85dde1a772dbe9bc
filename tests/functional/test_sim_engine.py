"""The sim's scheduler seen from outside: queueing, preemption, background load, and /metrics."""

from __future__ import annotations

import asyncio
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from lpxtop.sim import SimConfig, start_sim_in_thread
from tests.support.sim import chat_body, fixture_path
from tests.support.waiting import wait_for

CAPTURE = "metrics/vllm-0.32.0-cpu-local-capture-after-load.txt"
LABELS = {"engine": "0", "model_name": "sim-test"}


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(families: dict, family: str, sample: str | None = None, **labels: str) -> float:
    want = {**LABELS, **labels}
    for s in families[family].samples:
        if s.name == (sample or family) and s.labels == want:
            return s.value
    raise KeyError(f"{sample or family} {want}")


async def _stream_ttft_ms(client: httpx.AsyncClient, url: str, body: dict) -> tuple[float, int]:
    """Client-side TTFT (first non-empty content) and completion tokens of one streamed request."""
    start = time.perf_counter()
    ttft = None
    tokens = 0
    async with client.stream("POST", url, json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = httpx.Response(200, content=line[6:]).json()
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content") and ttft is None:
                ttft = (time.perf_counter() - start) * 1000
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    assert ttft is not None
    return ttft, tokens


async def test_requests_beyond_max_num_seqs_wait_and_their_ttft_grows() -> None:
    config = SimConfig(model="sim-test", ttft_ms=10, itl_ms=5, max_num_seqs=2, jitter=0.0)
    with start_sim_in_thread(config) as sim:
        seen: list[tuple[float, float]] = []  # (running, waiting) per scrape
        async with httpx.AsyncClient(timeout=10) as client:

            async def scrape_while_loaded() -> None:
                # Requests are admitted at the engine's next step, so a scrape can see 4 waiting beside
                # only 1 running (one finished or not yet admitted; seen on CI): wait for the full state.
                for _ in range(200):  # bounded: at most ~2 s
                    families = _families((await client.get(sim.base_url + "/metrics")).text)
                    seen.append(
                        (_value(families, "vllm:num_requests_running"), _value(families, "vllm:num_requests_waiting"))
                    )
                    assert sim.server.requests_running <= 2  # never more than max_num_seqs
                    if seen[-1] == (2, 4):
                        return
                    await asyncio.sleep(0.01)

            body = chat_body(max_tokens=30)
            results = await asyncio.gather(
                *[_stream_ttft_ms(client, sim.url + "/chat/completions", body) for _ in range(6)],
                scrape_while_loaded(),
            )
        ttfts = sorted(r[0] for r in results[:6])
        assert [r[1] for r in results[:6]] == [30] * 6
        assert (2, 4) in seen, seen
        assert all(running <= 2 for running, _ in seen), seen
        # Two run at once; the next two wait one ~30-step generation (>= 150 ms), the last two two of them.
        assert ttfts[2] - ttfts[1] > 100
        assert ttfts[4] - ttfts[3] > 100
        wait_for(lambda: sim.server.requests_running == 0 and sim.server.requests_waiting == 0)
        families = _families((await asyncio.to_thread(httpx.get, sim.base_url + "/metrics")).text)
        # The server-side queue-time histogram saw the waits too.
        assert (
            _value(families, "vllm:request_queue_time_seconds", "vllm:request_queue_time_seconds_count") == 6
        )
        queued = _value(families, "vllm:request_queue_time_seconds", "vllm:request_queue_time_seconds_sum")
        assert queued > 2 * 0.1 + 2 * 0.2


async def test_a_small_kv_cache_preempts_and_every_request_still_completes() -> None:
    # 4 requests of ~16 prompt + 60 generated tokens need ~300 KV tokens; there are 160.
    config = SimConfig(model="sim-test", ttft_ms=2, itl_ms=1, max_num_seqs=4, kv_tokens=160, jitter=0.0)
    with start_sim_in_thread(config) as sim:
        async with httpx.AsyncClient(timeout=20) as client:
            body = chat_body(max_tokens=60)
            results = await asyncio.gather(
                *[_stream_ttft_ms(client, sim.url + "/chat/completions", body) for _ in range(4)]
            )
            metrics = (await client.get(sim.base_url + "/metrics")).text
        assert [tokens for _, tokens in results] == [60] * 4
        preemptions = sim.server.preemptions_total
        assert preemptions > 0
        families = _families(metrics)
        assert _value(families, "vllm:num_preemptions", "vllm:num_preemptions_total") == preemptions
        # Each preemption is counted again on the request it hit, when that request finishes.
        assert (
            _value(families, "vllm:request_num_preemptions", "vllm:request_num_preemptions_sum")
            == preemptions
        )
        assert sim.server.kv_cache_usage == 0.0
        # Every record still carries all 60 tokens: a preempted request resumes, it does not restart.
        assert all(r.tokens_sent == 60 for r in sim.server.records)


async def test_kv_cache_usage_follows_the_running_requests() -> None:
    config = SimConfig(model="sim-test", ttft_ms=2, itl_ms=20, kv_tokens=1000, jitter=0.0)
    with start_sim_in_thread(config) as sim:
        async with httpx.AsyncClient(timeout=10) as client:
            task = asyncio.ensure_future(
                _stream_ttft_ms(client, sim.url + "/chat/completions", chat_body(max_tokens=40))
            )
            used: list[float] = []
            for _ in range(100):  # bounded, ~1 s
                await asyncio.sleep(0.01)
                used.append(sim.server.kv_cache_usage)
                if task.done():
                    break
            await task
        prompt = sim.server.records[-1].prompt_tokens
        # Holds the prompt, then grows by one token per step, then is freed.
        assert min(u for u in used if u > 0) >= prompt / 1000
        assert max(used) <= (prompt + 40) / 1000
        assert max(used) > min(u for u in used if u > 0)
        assert sim.server.kv_cache_usage == 0.0


def test_queue_cap_answers_503_and_counts_a_rejection() -> None:
    config = SimConfig(model="sim-test", ttft_ms=2, itl_ms=50, max_num_seqs=1, max_waiting=1)
    with start_sim_in_thread(config) as sim, httpx.Client(timeout=10) as client:
        with client.stream("POST", sim.url + "/chat/completions", json=chat_body(max_tokens=20)) as first:
            wait_for(lambda: sim.server.requests_running == 1)
            with client.stream(
                "POST", sim.url + "/chat/completions", json=chat_body(max_tokens=20)
            ) as second:
                wait_for(lambda: sim.server.requests_waiting == 1)
                third = client.post(sim.url + "/chat/completions", json=chat_body(max_tokens=20))
                assert third.status_code == 503
                assert third.json()["error"]["code"] == 503
                second.close()
            first.close()
        families = _families(client.get(sim.base_url + "/metrics").text)
        rejected = families["vllm:admission_rejections"].samples
        assert [(s.labels, s.value) for s in rejected if s.name.endswith("_total")] == [
            ({"model_name": "sim-test", "reason": "max_num_queued_reqs"}, 1.0),
            ({"model_name": "sim-test", "reason": "max_num_queued_tokens"}, 0.0),
        ]
        # The client that went away is aborted, not left running.
        wait_for(lambda: sim.server.requests_running == 0 and sim.server.requests_waiting == 0)
        families = _families(client.get(sim.base_url + "/metrics").text)
        assert (
            _value(families, "vllm:request_success", "vllm:request_success_total", finished_reason="abort")
            == 2
        )


def test_background_load_fills_the_queue_and_the_prefix_cache_hits() -> None:
    config = SimConfig(model="sim-test", ttft_ms=5, itl_ms=5, max_num_seqs=2, background_load=lambda t: 5)
    with start_sim_in_thread(config) as sim:
        wait_for(lambda: sim.server.requests_running == 2 and sim.server.requests_waiting == 3, 3.0)
        assert sim.server.kv_cache_usage > 0
        assert sim.server.records == []  # virtual requests have no HTTP side

        def prefix_hits() -> float:
            families = _families(httpx.get(sim.base_url + "/metrics", timeout=5).text)
            return _value(families, "vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total")

        # Virtual requests share a 64-token system prompt: the second and later ones hit it.
        wait_for(lambda: prefix_hits() >= 64, 2.0)


def test_metrics_use_vllm_v1_names_help_labels_and_buckets() -> None:
    # The capture's server ran with --max-model-len 1024, which sets vLLM's token-count buckets.
    config = SimConfig(model="sim-test", ttft_ms=2, itl_ms=1, max_model_len=1024)
    captured = _families(fixture_path(CAPTURE).read_text(encoding="utf-8"))
    with start_sim_in_thread(config) as sim, httpx.Client(timeout=10) as client:
        for _ in range(3):
            response = client.post(sim.url + "/chat/completions", json=chat_body(max_tokens=5, stream=False))
            assert response.status_code == 200
        scrape = client.get(sim.base_url + "/metrics")
        records = sim.server.records
    assert scrape.headers["content-type"].startswith("text/plain")
    ours = _families(scrape.text)
    vllm_families = sorted(name for name in captured if name.startswith("vllm:"))
    assert len(vllm_families) == 72  # `grep -c "^# TYPE vllm:"` on the capture (with the _created gauges)
    for name in vllm_families:
        assert name in ours, f"missing family {name}"
        theirs, mine = captured[name], ours[name]
        assert (mine.type, mine.documentation) == (theirs.type, theirs.documentation), name
        their_samples = {(s.name, tuple(sorted(k for k in s.labels if k != "le"))) for s in theirs.samples}
        my_samples = {(s.name, tuple(sorted(k for k in s.labels if k != "le"))) for s in mine.samples}
        assert my_samples == their_samples, name
        if theirs.type == "histogram":
            their_le = [s.labels["le"] for s in theirs.samples if s.name.endswith("_bucket")]
            my_le = [s.labels["le"] for s in mine.samples if s.name.endswith("_bucket")]
            assert my_le == their_le, name
    for family in ("process_resident_memory_bytes", "python_gc_objects_collected", "python_info"):
        assert family in ours
    # Hand-written checks of a few values after 3 requests of 5 tokens.
    assert _value(ours, "vllm:generation_tokens", "vllm:generation_tokens_total") == 15
    prompt_total = sum(r.prompt_tokens for r in records)
    assert _value(ours, "vllm:prompt_tokens", "vllm:prompt_tokens_total") == prompt_total
    assert _value(ours, "vllm:request_success", "vllm:request_success_total", finished_reason="length") == 3
    assert _value(ours, "vllm:time_to_first_token_seconds", "vllm:time_to_first_token_seconds_count") == 3
    assert _value(ours, "vllm:inter_token_latency_seconds", "vllm:inter_token_latency_seconds_count") == 12
    assert _value(ours, "vllm:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds_count") == 3
    assert _value(ours, "vllm:num_requests_running") == 0
    assert _value(ours, "vllm:kv_cache_usage_perc") == 0
    assert _value(ours, "vllm:engine_sleep_state", sleep_state="awake") == 1


def test_histograms_observe_the_real_timings() -> None:
    config = SimConfig(model="sim-test", ttft_ms=30, itl_ms=10, jitter=0.0)
    with start_sim_in_thread(config) as sim, httpx.Client(timeout=10) as client:
        for _ in range(2):
            response = client.post(sim.url + "/chat/completions", json=chat_body(max_tokens=10, stream=False))
            assert response.status_code == 200
        families = _families(client.get(sim.base_url + "/metrics").text)
        records = sim.server.records
    ttft_sum = _value(families, "vllm:time_to_first_token_seconds", "vllm:time_to_first_token_seconds_sum")
    e2e_sum = _value(families, "vllm:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds_sum")
    itl_sum = _value(families, "vllm:inter_token_latency_seconds", "vllm:inter_token_latency_seconds_sum")
    # Prefill 30 ms; 9 decode steps of 10 ms; sleeps only ever run late, by a little on an idle machine.
    assert 2 * 0.030 <= ttft_sum < 2 * 0.030 + 0.2
    assert 2 * 9 * 0.010 <= itl_sum < 2 * 9 * 0.010 + 0.3
    # The e2e the engine saw ends before the body was written: it fits inside the record's times.
    wall = sum((r.events[-1][0] - r.t_received_ns) / 1e9 for r in records)
    assert 2 * (0.030 + 0.090) <= e2e_sum <= wall


def test_pages_of_a_loaded_sim_reparse_as_they_parse_whole() -> None:
    """The scraper re-parses only the lines that changed since its last scrape (server_reparse); on a
    live page sequence under load it must read what prometheus_client reads from each page whole."""
    from lpxtop.engine.scrape.exposition import Exposition
    from lpxtop.engine.scrape.metric_names import VLLM, family_names, keep_families
    from lpxtop.engine.scrape.reparse import ReParser

    config = SimConfig(model="sim-test", ttft_ms=5, itl_ms=2, max_num_seqs=4, background_load=lambda t: 6)
    families = family_names(VLLM)
    parser = ReParser(families)
    with start_sim_in_thread(config) as sim, httpx.Client(timeout=5) as client:
        pages = []
        for _ in range(6):
            pages.append(client.get(sim.base_url + "/metrics").text)
            time.sleep(0.3)
    assert len(set(pages)) > 1  # the load moved something between scrapes
    for text in pages:
        assert dict(parser.parse(text).by_name) == dict(Exposition.parse(keep_families(text, families)).by_name)
