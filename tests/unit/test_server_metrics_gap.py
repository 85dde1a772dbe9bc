"""The client/engine TTFT gap: exact when the probes were the server's only requests between two reads,
a bounded estimate when the server's TTFTs fit a narrow range, and otherwise nothing, with the reason.

Scrapes go through the real MetricsTracker with the read times a scraper stamps; probes are Samples
stamped on the same clock.
"""

from __future__ import annotations

import json

import pytest

from lpxtop.engine.scrape.exposition import Exposition
from lpxtop.engine.scrape.metric_names import VLLM
from lpxtop.engine.scrape.tracker import MetricsTracker
from lpxtop.model.probe import Sample
from lpxtop.model.server import ServerLatency, ServerMetrics, TtftInterval
from lpxtop.model.server_gap import MAX_RANGE_MS, ttft_gap

MS = 1_000_000  # ns
TTFT_BOUNDS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5)
QUEUE_BOUNDS = (0.3, 0.5, 1.0)


def histogram(name: str, values: list[float], bounds: tuple[float, ...]) -> str:
    lines = [f"# TYPE {name} histogram"]
    for bound in bounds:
        lines.append(f'{name}_bucket{{engine="0",le="{bound}",model_name="m"}} {sum(v <= bound for v in values)}')
    lines.append(f'{name}_bucket{{engine="0",le="+Inf",model_name="m"}} {len(values)}')
    lines.append(f'{name}_count{{engine="0",model_name="m"}} {len(values)}')
    lines.append(f'{name}_sum{{engine="0",model_name="m"}} {sum(values)!r}')
    return "\n".join(lines) + "\n"


class Server:
    """What a vLLM's TTFT and queue histograms hold, scraped into a tracker at given times."""

    def __init__(self) -> None:
        self.ttfts: list[float] = []  # seconds, cumulative
        self.queue: list[float] = []
        self.tracker = MetricsTracker(window_s=300.0)
        self.last: ServerMetrics | None = None

    def serve(self, ttft_s: float, queue_s: float = 0.00001) -> None:
        self.ttfts.append(ttft_s)
        self.queue.append(queue_s)

    def scrape(self, at_ms: float) -> ServerMetrics:
        page = histogram("vllm:time_to_first_token_seconds", self.ttfts, TTFT_BOUNDS)
        page += histogram("vllm:request_queue_time_seconds", self.queue, QUEUE_BOUNDS)
        asked = int(at_ms * MS)
        self.last = self.tracker.update(Exposition.parse(page), VLLM, now=at_ms / 1000, wall=at_ms / 1000,
                                        asked_ns=asked, answered_ns=asked + 2 * MS)
        return self.last


def probe(start_ms: float, ttft_ms: float) -> Sample:
    return Sample(endpoint="e", wall_time=start_ms / 1000, start_ns=int(start_ms * MS), ok=True,
                  ttft_ms=ttft_ms, e2e_ms=ttft_ms + 50.0)


def test_exact_when_the_probes_were_the_only_requests() -> None:
    server, samples = Server(), []
    server.scrape(0)
    for i, (start, engine_ms) in enumerate([(100, 12.0), (2100, 15.5), (4100, 11.25)]):
        outside = 6.0 + i  # 6, 7, 8 ms outside the engine
        server.serve(engine_ms / 1000)
        samples.append(probe(start, engine_ms + outside))
    metrics = server.scrape(10_000)
    gap = ttft_gap(samples, metrics)
    assert (gap.method, gap.probes, gap.reason) == ("probe_only", 3, None)
    assert gap.value_ms == pytest.approx(7.0)  # exactly the mean of 6, 7, 8
    assert gap.low_ms == gap.high_ms == gap.value_ms and not gap.estimate


def test_intervals_with_other_requests_are_left_out_of_the_exact_gap() -> None:
    server, samples = Server(), []
    server.scrape(0)
    server.serve(0.010)
    samples.append(probe(100, 16.0))  # 6 ms outside
    server.scrape(10_000)
    server.serve(0.010)
    samples.append(probe(10_100, 60.0))  # a probe the server saw ...
    server.serve(0.200)  # ... beside another client's request: not pairable
    metrics = server.scrape(20_000)
    gap = ttft_gap(samples, metrics)
    assert (gap.method, gap.probes) == ("probe_only", 1)
    assert gap.value_ms == pytest.approx(6.0)


def test_a_probe_across_a_read_is_not_paired() -> None:
    server, samples = Server(), []
    server.scrape(0)
    server.serve(0.010)
    samples.append(probe(9_999, 16.0))  # starts before the read at 10 s, its first token after it
    server.scrape(10_000)
    metrics = server.scrape(20_000)
    gap = ttft_gap(samples, metrics)
    assert gap.method != "probe_only"


def test_window_means_when_every_ttft_sits_in_a_narrow_range() -> None:
    server, samples = Server(), []
    server.scrape(0)
    for i in range(20):  # a load of 20 requests at 22-38 ms, all in the (20, 40] ms bucket
        server.serve(0.022 + 0.0008 * i)
    for start in (500, 2500, 4500):
        server.serve(0.030)
        samples.append(probe(start, 36.0))  # 6 ms outside
    metrics = server.scrape(10_000)
    gap = ttft_gap(samples, metrics)
    assert (gap.method, gap.probes) == ("window_means", 3) and gap.estimate
    assert gap.low_ms == pytest.approx(36.0 - 40.0)
    assert gap.high_ms == pytest.approx(36.0 - 20.0)
    assert gap.low_ms <= 6.0 <= gap.high_ms  # the truth is inside
    server_mean = metrics.server_ttft_ms.mean
    assert gap.value_ms == pytest.approx(36.0 - server_mean)
    assert abs(gap.value_ms - 6.0) <= (gap.high_ms - gap.low_ms)


def test_nothing_under_a_load_that_queues() -> None:
    server, samples = Server(), []
    server.scrape(0)
    for i in range(40):  # a queue: TTFTs from 20 to 410 ms, queue times up to 400 ms
        server.serve(0.020 + 0.01 * i, queue_s=0.01 * i)
    for start in (500, 2500, 4500):
        server.serve(0.200, queue_s=0.18)
        samples.append(probe(start, 206.0))
    metrics = server.scrape(10_000)
    gap = ttft_gap(samples, metrics)
    assert gap.value_ms is None and gap.method is None
    assert "queued" in gap.reason and "mean wait" in gap.reason
    out = gap.to_json()
    assert out["value"] is None and out["range"] is None and "queued" in out["reason"]


def test_nothing_when_ttfts_spread_without_a_queue() -> None:
    server, samples = Server(), []
    server.scrape(0)
    for i in range(10):  # long prompts: prefill of 20-200 ms, no queue
        server.serve(0.020 + 0.02 * i)
    server.serve(0.015)
    samples.append(probe(500, 21.0))
    gap = ttft_gap(samples, server.scrape(10_000))
    assert gap.value_ms is None and "spread over" in gap.reason
    assert MAX_RANGE_MS < 250 - 10


@pytest.mark.parametrize(
    ("server", "reason"),
    [
        (None, "no server metrics"),
        (ServerMetrics(kind="vllm", status="no /metrics: HTTP 404"), "no server metrics"),
        (ServerMetrics(kind="tgi"), "tgi has no TTFT histogram"),
        (ServerMetrics(kind="vllm", server_ttft_ms=ServerLatency(None, None, 0.0)), "counted no first token"),
    ],
)
def test_reasons(server: ServerMetrics | None, reason: str) -> None:
    gap = ttft_gap([probe(0, 10.0)], server)
    assert gap.value_ms is None and reason in gap.reason


def test_no_probe_no_gap() -> None:
    server = Server()
    server.scrape(0)
    server.serve(0.01)
    failed = Sample(endpoint="e", wall_time=0.0, start_ns=100 * MS, ok=False, error_kind="refused")
    assert "no successful probe" in ttft_gap([failed], server.scrape(10_000)).reason


def test_old_recordings_without_read_times_use_the_whole_window() -> None:
    latency = ServerLatency(p50=30.0, p99=39.0, count=20, mean=30.0, min_at_least=20.0, max_at_most=40.0)
    server = ServerMetrics(kind="vllm", server_ttft_ms=latency)
    gap = ttft_gap([probe(0, 36.0), probe(1000, 37.0)], server)
    assert gap.method == "window_means" and gap.value_ms == pytest.approx(6.5)
    # read times that say nothing (zero-length) are ignored too
    odd = ServerMetrics(kind="vllm", server_ttft_ms=latency, ttft_intervals=(TtftInterval(5, 5, 1.0, 1.0),))
    assert ttft_gap([probe(0, 36.0)], odd).method == "window_means"


def test_json_of_a_snapshot_carries_the_gap_under_server() -> None:
    from lpxtop.engine.window import EndpointWindow
    from lpxtop.model.endpoint import EndpointConfig

    server, samples = Server(), []
    server.scrape(0)
    server.serve(0.010)
    samples.append(probe(100, 16.0))
    metrics = server.scrape(10_000)
    window = EndpointWindow(300.0, 100)
    for s in samples:
        window.add(s)
    view = window.view(EndpointConfig(name="e", url="http://127.0.0.1:1/v1"), now=samples[-1].wall_time,
                       model="m", server=metrics, server_kind="vllm")
    out = json.loads(json.dumps(view.to_json(), allow_nan=False))
    assert out["server"]["ttft_gap_ms"] == {"value": 6.0, "method": "probe_only", "estimate": False,
                                            "range": [6.0, 6.0], "probes": 1, "reason": None}
    ttft = out["server"]["server_ttft_ms"]
    assert ttft["estimate"] is True and ttft["mean"] == pytest.approx(10.0)
    # one observation, in (5, 10] ms, and the sum says which: 10 ms exactly
    assert ttft["p50_range"] == [10.0, 10.0] and ttft["max_at_most"] == 10.0


def test_once_table_says_which_figures_are_exact() -> None:
    from lpxtop.report import render_table
    from tests.support.snapshot_data import fixed_snapshot

    text = render_table(fixed_snapshot())
    # vllm-llama's server: TTFT mean 110.6 (exact), p99 117.9 within (111, 118]; the gap an estimate
    line = next(line for line in text.splitlines() if line.startswith("vllm-llama: server"))
    assert "TTFT mean 111 p99 ~118 (<= 118)" in line
    assert "outside engine ~+35.3 (estimate, 30 probes)" in line
    assert "queue mean 0.012" in line


def test_probes_lpxtop_itself_held_up_are_left_out() -> None:
    """A probe flagged client_limited (its own loop or thread was late) has lpxtop's delay in its TTFT."""
    from dataclasses import replace

    server, samples = Server(), []
    server.scrape(0)
    server.serve(0.010)
    samples.append(probe(100, 16.0))  # 6 ms outside
    server.scrape(10_000)
    server.serve(0.010)
    samples.append(replace(probe(10_100, 400.0), client_limited=True))  # lpxtop was late
    metrics = server.scrape(20_000)
    gap = ttft_gap(samples, metrics)
    assert (gap.method, gap.probes) == ("probe_only", 1) and gap.value_ms == pytest.approx(6.0)
