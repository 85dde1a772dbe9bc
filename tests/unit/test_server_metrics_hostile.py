"""Hostile /metrics pages over a real loopback socket (the /metrics part).

Each page is legal or nearly so, and each used to bend or crash something: +Inf gauges reached the
dashboard's sparkline, a line with leading blanks was read by the first scrape and dropped by every
later one, a duplicated series was summed. Every case is scraped twice or more, so the first scrape
(which detects the kind) and the later ones (ReParser, the fast path) are both held to one reading.
"""

from __future__ import annotations

import json
import math

import pytest
from aiohttp import web

from lpxtop.engine.scrape.servers import MAX_METRICS_BYTES, ServerScraper
from lpxtop.model.server import ServerMetrics
from tests.support.metrics_server import capture, endpoint, http_client, serve

LABELS = 'engine="0",model_name="m"'


def gauges(running: str = "3", waiting: str = "1", kv: str = "0.5") -> str:
    return (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{LABELS}}} {running}\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{{{LABELS}}} {waiting}\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f"vllm:kv_cache_usage_perc{{{LABELS}}} {kv}\n"
    )


def counter(value: str, name: str = "vllm:generation_tokens_total") -> str:
    return f"# TYPE {name} counter\n{name}{{{LABELS}}} {value}\n"


def ttft(counts: tuple[str, str, str], total: str) -> str:
    le01, le02, inf = counts
    name = "vllm:time_to_first_token_seconds"
    return (
        f"# TYPE {name} histogram\n"
        f'{name}_bucket{{{LABELS},le="0.1"}} {le01}\n'
        f'{name}_bucket{{{LABELS},le="0.2"}} {le02}\n'
        f'{name}_bucket{{{LABELS},le="+Inf"}} {inf}\n'
        f"{name}_count{{{LABELS}}} {inf}\n"
        f"{name}_sum{{{LABELS}}} {total}\n"
    )


async def scrape_pages(pages: list[str], headers: dict[str, str] | None = None) -> list[ServerMetrics]:
    """Serve `pages` one per request and scrape each once, 2 s apart on the scraper's clock."""
    queue = list(pages)

    async def handle(request: web.Request) -> web.Response:
        return web.Response(text=queue.pop(0) if len(queue) > 1 else queue[0], content_type="text/plain",
                            headers=headers)

    now = [100.0]
    out = []
    async with serve({"/metrics": handle}) as origin, http_client() as client:
        scraper = ServerScraper(endpoint(origin), clock=lambda: now[0])
        for _ in pages:
            out.append(await scraper.scrape(client))
            now[0] += 2.0
    return out


def assert_json_safe(m: ServerMetrics) -> None:
    json.dumps(m.to_json(), allow_nan=False)  # no Infinity or NaN: not JSON (jq, Go, browsers refuse it)


@pytest.mark.parametrize("bad", ["+Inf", "-Inf", "NaN", "Inf", "-1", "1e999", "1" * 400])
async def test_a_gauge_that_is_not_a_number_of_requests_is_unknown(bad: str) -> None:
    pages = [gauges(waiting=bad, running=bad, kv=bad)] * 3
    for m in await scrape_pages(pages):
        assert m.ok, m.status
        assert m.requests_waiting is None and m.requests_running is None and m.kv_cache_usage is None
        assert_json_safe(m)
        if bad != "NaN":  # NaN samples carry no value at all: the server says it has none
            assert any("vllm:num_requests_waiting is" in n and "shown as --" in n for n in m.notes), m.notes
        assert all(p.requests_waiting is None for p in m.per_model)


async def test_counters_and_histograms_that_are_not_finite_give_no_rate_and_no_mean() -> None:
    pages = [
        gauges() + counter("100") + ttft(("1", "2", "2"), "0.3"),
        gauges() + counter("+Inf") + ttft(("1", "+Inf", "+Inf"), "+Inf"),
        gauges() + counter("300") + ttft(("2", "4", "4"), "NaN"),
        gauges() + counter("400") + ttft(("2", "4", "4"), "0.5"),
    ]
    first, second, third, fourth = await scrape_pages(pages)
    assert second.generation_tokens_per_s is None  # not inf
    assert second.server_ttft_ms is None or second.server_ttft_ms.mean is None
    assert any("vllm:generation_tokens_total is +Inf" in n for n in second.notes), second.notes
    assert third.generation_tokens_per_s is None  # not (300 - 0) / 2 s: the +Inf one was no count
    assert fourth.generation_tokens_per_s == pytest.approx(50.0)  # (400 - 300) / 2 s
    for m in (first, second, third, fourth):
        assert_json_safe(m)
        assert m.requests_running == 3.0


async def test_leading_blanks_are_read_by_every_scrape() -> None:
    page = gauges().replace("vllm:num_requests_waiting{", "   vllm:num_requests_waiting{").replace(
        "# TYPE vllm:kv_cache_usage_perc", "\t# TYPE vllm:kv_cache_usage_perc"
    )
    results = await scrape_pages([page, page, page.replace("} 1\n", "} 2\n")])
    assert [m.requests_waiting for m in results] == [1.0, 1.0, 2.0]
    assert [m.kv_cache_usage for m in results] == [0.5, 0.5, 0.5]


async def test_a_duplicated_series_keeps_its_first_sample_as_prometheus_does() -> None:
    page = gauges() + f"vllm:num_requests_waiting{{{LABELS}}} 7\n" + counter("10") + counter("99")
    results = await scrape_pages([page, page, page])
    for m in results:
        assert m.requests_waiting == 1.0  # not 1 + 7
        assert m.per_model[0].requests_waiting == 1.0
        assert any("repeat a series" in n for n in m.notes), m.notes
    assert results[1].generation_tokens_per_s == 0.0  # 10 each time, not 109


@pytest.mark.parametrize(
    ("label", "page", "waiting"),
    [
        ("escaped quote", gauges().replace('model_name="m"', 'model_name="a \\"quoted\\" m"'), 1.0),
        ("newline in a label", gauges().replace('model_name="m"', 'model_name="two\\nlines"'), 1.0),
        ("exponent", gauges(waiting="2.5e+01"), 25.0),
        ("upper-case exponent", gauges(waiting="1E2"), 100.0),
        ("# EOF", gauges() + "# EOF\n", 1.0),
        ("timestamps", gauges(waiting="4 1700000000000"), 4.0),
        ("OpenMetrics _created", gauges() + counter("5") + f"vllm:generation_tokens_created{{{LABELS}}} 1.7e9\n", 1.0),
        ("CRLF", gauges().replace("\n", "\r\n"), 1.0),
        ("trailing blanks", gauges().replace(" 1\n", " 1   \n"), 1.0),
        ("blank lines", gauges().replace("\n#", "\n\n\n#"), 1.0),
    ],
)
async def test_legal_variants_read_the_same_every_scrape(label: str, page: str, waiting: float) -> None:
    results = await scrape_pages([page, page, page])
    for m in results:
        assert m.ok, (label, m.status)
        assert m.requests_waiting == waiting, label
        assert m.requests_running == 3.0, label
    assert results[1].generation_tokens_per_s in (None, 0.0)


async def test_a_broken_line_in_another_family_does_not_blind_lpxtop_on_any_scrape() -> None:
    page = gauges() + "some_other_exporter{ 5\n"
    results = await scrape_pages([page, page])
    assert [m.requests_waiting for m in results] == [1.0, 1.0]


async def test_a_broken_line_in_a_family_lpxtop_reads_is_an_error_every_scrape() -> None:
    page = gauges(waiting="lots")
    results = await scrape_pages([page, page])
    for m in results:
        assert m.status.startswith("error: /metrics is not Prometheus text"), m.status


async def test_a_counter_that_goes_down_is_a_restart_not_a_negative_rate() -> None:
    results = await scrape_pages([gauges() + counter("500"), gauges() + counter("20"), gauges() + counter("60")])
    assert results[1].restart_count == 1 and results[1].generation_tokens_per_s is None
    assert results[2].generation_tokens_per_s == pytest.approx(20.0)


async def test_a_page_that_changes_kind_between_scrapes() -> None:
    sglang = capture("sglang-2025-sglang-docs-production_metrics.txt")
    results = await scrape_pages([gauges(), gauges(), sglang, sglang, "<html>not metrics</html>"])
    assert [m.kind for m in results[:4]] == ["vllm", "vllm", "sglang", "sglang"]
    assert results[2].ok and results[3].ok
    assert results[3].window_s == pytest.approx(2.0)  # the vLLM history was dropped with the kind
    assert results[4].status.startswith("error: /metrics is not Prometheus text")


async def test_a_huge_page_is_refused_in_bounded_memory() -> None:
    line = "padding_metric_with_a_long_name{a=\"" + "x" * 100 + "\"} 1\n"
    page = gauges() + line * (MAX_METRICS_BYTES // len(line) + 10)
    (m,) = await scrape_pages([page])
    assert m.status.startswith("error: /metrics is larger than 8 MiB"), m.status[:80]


async def test_a_large_page_of_other_families_is_read_for_its_own() -> None:
    # 40,000 lines of another exporter around vLLM's (a sidecar's metrics on the same page)
    noise = "".join(f'other_metric_{i % 50}{{i="{i}"}} {i}\n' for i in range(40_000))
    results = await scrape_pages([noise + gauges() + noise, noise + gauges(waiting="2") + noise])
    assert [m.requests_waiting for m in results] == [1.0, 2.0]


def test_server_json_is_json_even_with_infinite_values_set_by_hand() -> None:
    m = ServerMetrics(kind="vllm", requests_waiting=math.inf, kv_cache_usage=math.nan, scrape_ms=math.inf)
    out = m.to_json()
    json.dumps(out, allow_nan=False)
    assert out["requests_waiting"] is None and out["kv_cache_usage"] is None and out["scrape_ms"] is None


async def test_a_sum_that_contradicts_its_buckets_gives_no_mean_and_says_so_every_scrape() -> None:
    # 10 more requests in (0.1, 0.2] s, but a _sum that grew by 0.01 s: at least 1 s is needed
    pages = [gauges() + ttft(("0", "0", "0"), "0"), gauges() + ttft(("0", "10", "10"), "0.01")]
    pages += [gauges() + ttft(("0", "10", "10"), "0.01")] * 2  # later scrapes carry the last read
    results = await scrape_pages(pages)
    for m in results[1:]:
        assert m.server_ttft_ms is not None and m.server_ttft_ms.count == 10 and m.server_ttft_ms.mean is None
        assert m.server_ttft_ms.p50_range == (100.0, 200.0)  # the buckets alone
        assert any("_sum disagrees with its buckets" in n for n in m.notes), m.notes
