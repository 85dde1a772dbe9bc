"""Histogram quantiles, counter resets, missing metrics and multi-model labels, on hand-written scrapes."""

from __future__ import annotations

import math
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lpxtop.engine.scrape.exposition import Exposition, NotPrometheusText
from lpxtop.engine.scrape.histograms import PackedBuckets, bucket_delta, histogram_quantile, merge
from lpxtop.engine.scrape.metric_names import BY_KIND, VLLM
from lpxtop.engine.scrape.tracker import MetricsTracker
from lpxtop.model.server import ServerLatency, ServerMetrics

INF = math.inf


def ttft(b01: int, b02: int, b05: int, inf: int, model: str = "m", engine: str = "0",
         total: float | None = None) -> str:
    labels = f'engine="{engine}",model_name="{model}"'
    if total is None:  # every observation at the middle of its bucket (1 s above the last bound)
        total = b01 * 0.05 + (b02 - b01) * 0.15 + (b05 - b02) * 0.35 + (inf - b05) * 1.0
    return (
        "# TYPE vllm:time_to_first_token_seconds histogram\n"
        f'vllm:time_to_first_token_seconds_bucket{{{labels},le="0.1"}} {b01}\n'
        f'vllm:time_to_first_token_seconds_bucket{{{labels},le="0.2"}} {b02}\n'
        f'vllm:time_to_first_token_seconds_bucket{{{labels},le="0.5"}} {b05}\n'
        f'vllm:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}} {inf}\n'
        f"vllm:time_to_first_token_seconds_count{{{labels}}} {inf}\n"
        f"vllm:time_to_first_token_seconds_sum{{{labels}}} {total}\n"
    )


def gen_tokens(value: float) -> str:
    return (
        "# TYPE vllm:generation_tokens_total counter\n"
        f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {value}\n'
    )


def update(tracker: MetricsTracker, body: str, now: float, kind: str = "vllm") -> ServerMetrics:
    return tracker.update(Exposition.parse(body), BY_KIND[kind], now=now, wall=1_000.0 + now)


def test_quantiles_from_bucket_deltas_not_lifetime() -> None:
    tracker = MetricsTracker(window_s=300.0)
    first = update(tracker, ttft(5, 5, 5, 5), now=0.0)
    assert first.server_ttft_ms is None  # the first scrape has no delta
    m = update(tracker, ttft(15, 45, 55, 55), now=10.0)
    # Delta buckets: le 0.1: 10, 0.2: 40, 0.5: 50, +Inf: 50.
    # p50: rank 25 in (0.1, 0.2]: 0.1 + 0.1 * (25-10)/(40-10) = 0.15 s
    # p99: rank 49.5 in (0.2, 0.5]: 0.2 + 0.3 * (49.5-40)/(50-40) = 0.485 s
    # (Lifetime buckets would give a p50 of 0.1417 s instead.)
    assert m.server_ttft_ms == window_0_to_10


# ... and with the sum (every observation at its bucket's middle: 8.5 s in all) the exact mean, and
# the ranges the quantiles can be in: p50's rank 25 is in (0.1, 0.2]; p99's rank 50 in (0.2, 0.5], and
# the sum says at least 0.15 s (8.5 - 10 * 0.1 - 30 * 0.2 left for the last 10), which the bucket beats.
window_0_to_10 = ServerLatency(
    p50=pytest.approx(150.0), p99=pytest.approx(485.0), count=50, mean=pytest.approx(170.0),
    p50_range=(pytest.approx(100.0), pytest.approx(200.0)), p99_range=(pytest.approx(200.0), pytest.approx(500.0)),
    min_at_least=0.0, max_at_most=pytest.approx(500.0),
)


def test_histogram_quantile_edges() -> None:
    # Rank in the +Inf bucket answers the highest finite bound, like Prometheus.
    assert histogram_quantile(0.99, ((0.1, 0), (0.5, 1), (INF, 10))) == 0.5
    # The lowest bucket is interpolated from 0.
    assert histogram_quantile(0.5, ((1.0, 4), (INF, 4))) == pytest.approx(0.5)
    # A first bucket with bound <= 0 answers its bound.
    assert histogram_quantile(0.5, ((0.0, 4), (1.0, 8), (INF, 8))) == 0.0
    assert histogram_quantile(0.5, ((0.1, 0), (INF, 0))) is None  # no observations
    assert histogram_quantile(0.5, ((0.1, 3), (0.2, 4))) is None  # no +Inf bucket
    # A bucket read a hair low (non-atomic scrape) is clamped up, as Prometheus does: counts
    # 1, 0, 3, 4 become 1, 1, 3, 4; rank 2 -> 0.2 + 0.1 * (2-1)/(3-1) = 0.25 (unclamped: 0.2667).
    assert histogram_quantile(0.5, ((0.1, 1), (0.2, 0), (0.3, 3), (INF, 4))) == pytest.approx(0.25)


def test_bucket_delta_and_merge() -> None:
    old = ((0.1, 1.0), (INF, 2.0))
    assert bucket_delta(((0.1, 3.0), (INF, 5.0)), old) == ((0.1, 2.0), (INF, 3.0))
    assert bucket_delta(((0.2, 3.0), (INF, 5.0)), old) is None  # layout changed
    assert bucket_delta(((0.1, 0.0), (INF, 1.0)), old) is None  # went down
    assert merge([((0.1, 1.0), (INF, 2.0)), ((0.1, 4.0), (INF, 4.0))]) == ((0.1, 5.0), (INF, 6.0))
    assert merge([]) is None


def test_window_diffs_newest_against_oldest_within_window() -> None:
    tracker = MetricsTracker(window_s=30.0)
    update(tracker, ttft(0, 0, 0, 0), now=0.0)
    update(tracker, ttft(10, 10, 10, 10), now=20.0)
    m = update(tracker, ttft(10, 10, 30, 30), now=40.0)
    # The t=0 scrape is older than 30 s, so the window starts at t=20: 20 new observations,
    # all in (0.2, 0.5]: p50 = 0.2 + 0.3 * 10/20 = 0.35 s.
    assert m.window_s == pytest.approx(20.0)
    assert m.server_ttft_ms is not None
    assert m.server_ttft_ms.count == 20
    assert m.server_ttft_ms.p50 == pytest.approx(350.0)


def test_counter_reset_means_restart_and_no_negative_rate() -> None:
    tracker = MetricsTracker(window_s=30.0)
    assert update(tracker, gen_tokens(1000), now=0.0).generation_tokens_per_s is None
    m = update(tracker, gen_tokens(10), now=2.0)  # went down: the server restarted
    assert m.restarted is True
    assert m.restart_count == 1
    assert m.last_restart_time == 1_002.0
    assert m.generation_tokens_per_s is None  # never a negative rate
    m = update(tracker, gen_tokens(30), now=4.0)
    assert m.generation_tokens_per_s == pytest.approx(10.0)  # (30 - 10) / 2 s
    assert m.restarted is True  # still inside the 30 s window
    m = update(tracker, gen_tokens(90), now=40.0)
    assert m.restarted is False and m.restart_count == 1


def test_histogram_count_going_down_is_a_restart() -> None:
    tracker = MetricsTracker()
    update(tracker, ttft(5, 5, 5, 5), now=0.0)
    m = update(tracker, ttft(1, 1, 1, 1), now=2.0)
    assert m.restart_count == 1
    assert m.server_ttft_ms is None


def test_process_start_time_change_is_a_restart() -> None:
    tracker = MetricsTracker()
    update(tracker, gen_tokens(5) + "process_start_time_seconds 1000.0\n", now=0.0)
    m = update(tracker, gen_tokens(50) + "process_start_time_seconds 1100.0\n", now=2.0)
    assert m.restart_count == 1
    assert m.generation_tokens_per_s is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10_000), min_size=2, max_size=12))
def test_rates_are_never_negative(values: list[int]) -> None:
    tracker = MetricsTracker(window_s=1e9)
    for i, v in enumerate(values):
        m = update(tracker, gen_tokens(v) + ttft(v, v, v, v), now=float(i))
        assert m.generation_tokens_per_s is None or m.generation_tokens_per_s >= 0
        assert m.server_ttft_ms is None or m.server_ttft_ms.count >= 0


def test_missing_metrics_are_none_never_zero() -> None:
    body = '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 3\n'
    tracker = MetricsTracker()
    update(tracker, body, now=0.0)
    m = update(tracker, body, now=2.0)
    assert m.requests_running == 3.0
    assert m.requests_waiting is None
    assert m.kv_cache_usage is None
    assert m.preemptions_total is None
    assert m.generation_tokens_per_s is None
    assert m.server_ttft_ms is None
    assert m.prefix_cache_hit_rate is None
    assert m.outcomes == ()
    out = m.to_json()
    assert out["kv_cache_usage"] is None and out["requests_waiting"] is None


def test_garbage_is_not_prometheus_text() -> None:
    for body in ("<html><body>Internal error</body></html>", '{"object": "error"}', "hello world\n"):
        with pytest.raises(NotPrometheusText):
            Exposition.parse(body)


def test_several_models_and_engines() -> None:
    def body(a0: int, a1: int, b0: int, ttft_e0: str, ttft_e1: str) -> str:
        return (
            "# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{engine="0",model_name="a"} 2\n'
            'vllm:num_requests_running{engine="1",model_name="a"} 3\n'
            'vllm:num_requests_running{engine="0",model_name="b"} 1\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{engine="0",model_name="a"} 4\n'
            'vllm:num_requests_waiting{engine="1",model_name="a"} 0\n'
            'vllm:num_requests_waiting{engine="0",model_name="b"} 7\n'
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            'vllm:kv_cache_usage_perc{engine="0",model_name="a"} 0.25\n'
            'vllm:kv_cache_usage_perc{engine="1",model_name="a"} 0.75\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="b"} 0.5\n'
            "# TYPE vllm:generation_tokens_total counter\n"
            f'vllm:generation_tokens_total{{engine="0",model_name="a"}} {a0}\n'
            f'vllm:generation_tokens_total{{engine="1",model_name="a"}} {a1}\n'
            f'vllm:generation_tokens_total{{engine="0",model_name="b"}} {b0}\n'
            + ttft_e0
            + ttft_e1.replace("# TYPE vllm:time_to_first_token_seconds histogram\n", "")
        )

    tracker = MetricsTracker()
    update(tracker, body(100, 200, 50, ttft(0, 0, 0, 0, "a", "0"), ttft(0, 0, 0, 0, "a", "1")), now=0.0)
    m = update(
        tracker, body(150, 300, 60, ttft(10, 10, 10, 10, "a", "0"), ttft(0, 10, 10, 10, "a", "1")), now=10.0
    )
    assert m.models == ("a", "b")
    assert m.requests_running == 6.0  # 2 + 3 + 1
    assert m.requests_waiting == 11.0  # 4 + 0 + 7
    assert m.kv_cache_usage == 0.75  # the fullest engine
    assert m.generation_tokens_per_s == pytest.approx(16.0)  # (50 + 100 + 10) / 10 s
    by_model = {p.model: p for p in m.per_model}
    assert (by_model["a"].engines, by_model["b"].engines) == (2, 1)
    assert (by_model["a"].requests_running, by_model["a"].requests_waiting) == (5.0, 4.0)
    assert (by_model["b"].requests_running, by_model["b"].requests_waiting) == (1.0, 7.0)
    assert (by_model["a"].kv_cache_usage, by_model["b"].kv_cache_usage) == (0.75, 0.5)
    assert by_model["a"].generation_tokens_per_s == pytest.approx(15.0)
    assert by_model["b"].generation_tokens_per_s == pytest.approx(1.0)
    # Engines' TTFT buckets are summed: le 0.1: 10, 0.2: 20, +Inf: 20.
    # p50: rank 10 -> 0.1 * 10/10 = 0.1 s; p99: rank 19.8 -> 0.1 + 0.1 * 9.8/10 = 0.198 s
    assert m.server_ttft_ms is not None
    assert m.server_ttft_ms.p50 == pytest.approx(100.0)
    assert m.server_ttft_ms.p99 == pytest.approx(198.0)


def test_sglang_tp_ranks_are_summed() -> None:
    body = (
        "# TYPE sglang:num_running_reqs gauge\n"
        'sglang:num_running_reqs{model_name="q",tp_rank="0"} 4\n'
        'sglang:num_running_reqs{model_name="q",tp_rank="1"} 4\n'
        "# TYPE sglang:token_usage gauge\n"
        'sglang:token_usage{model_name="q",tp_rank="0"} 0.3\n'
        'sglang:token_usage{model_name="q",tp_rank="1"} 0.4\n'
        "# TYPE sglang:num_retracted_requests_total counter\n"
        'sglang:num_retracted_requests_total{model_name="q",tp_rank="0"} 3\n'
    )
    m = update(MetricsTracker(), body, now=0.0, kind="sglang")
    assert m.requests_running == 8.0
    assert m.kv_cache_usage == pytest.approx(0.4)
    assert m.preemptions_total == 3.0
    assert m.per_model[0].engines == 2


def test_llamacpp_rates_use_counters_not_the_resetting_gauges() -> None:
    def body(prompt: int, cached: int, predicted: int, gauge: float) -> str:
        return (
            "# TYPE llamacpp:prompt_tokens_total counter\n"
            f"llamacpp:prompt_tokens_total {prompt}\n"
            "# TYPE llamacpp:prompt_tokens_cached_total counter\n"
            f"llamacpp:prompt_tokens_cached_total {cached}\n"
            "# TYPE llamacpp:tokens_predicted_total counter\n"
            f"llamacpp:tokens_predicted_total {predicted}\n"
            "# TYPE llamacpp:predicted_tokens_seconds gauge\n"
            f"llamacpp:predicted_tokens_seconds {gauge}\n"
        )

    tracker = MetricsTracker()
    update(tracker, body(273, 206, 7408, 0), now=0.0, kind="llamacpp")
    m = update(tracker, body(293, 236, 7508, 999), now=2.0, kind="llamacpp")
    assert m.generation_tokens_per_s == pytest.approx(50.0)  # (7508 - 7408) / 2, not the 999 gauge
    assert m.prompt_tokens_per_s == pytest.approx(10.0)
    # prompt_tokens_total excludes cached tokens: hit rate = 30 / (20 + 30)
    assert m.prefix_cache_hit_rate == pytest.approx(0.6)


def test_tgi_counter_without_total_suffix() -> None:
    def body(success: int) -> str:
        return f"# TYPE tgi_request_success counter\ntgi_request_success {success}\n"

    tracker = MetricsTracker()
    update(tracker, body(109), now=0.0, kind="tgi")
    m = update(tracker, body(119), now=5.0, kind="tgi")
    assert dict(m.outcomes) == {"success": 10.0}
    assert m.finished_requests_per_s == pytest.approx(2.0)


def test_spec_decode_acceptance() -> None:
    def body(drafted: int, accepted: int) -> str:
        return (
            "# TYPE vllm:spec_decode_num_draft_tokens_total counter\n"
            f'vllm:spec_decode_num_draft_tokens_total{{model_name="m"}} {drafted}\n'
            "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
            f'vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} {accepted}\n'
        )

    tracker = MetricsTracker()
    update(tracker, body(100, 50), now=0.0)
    m = update(tracker, body(300, 200), now=2.0)
    assert m.spec_decode_acceptance_rate == pytest.approx(0.75)  # 150 / 200
    assert VLLM.spec_drafted  # the table names it


def test_history_stays_thin_and_the_window_still_slides() -> None:
    tracker = MetricsTracker(window_s=300.0)
    # One scrape a second for 20 minutes: 10 new requests per scrape, all under 0.1 s, except that
    # from t=600 on they are all between 0.2 and 0.5 s.
    slow = fast = 0
    m = None
    for t in range(1200):
        if t < 600:
            fast += 10
        else:
            slow += 10
        m = update(tracker, ttft(fast, fast, fast + slow, fast + slow), now=float(t))
        assert len(tracker._history) <= 42
    # By t=1199 the window (300 s) holds only slow requests: p50 inside (0.2, 0.5].
    assert m is not None and m.server_ttft_ms is not None
    assert 200.0 < m.server_ttft_ms.p50 <= 500.0
    # about 300 s of requests at 10 per second, give or take the base's spacing (300 s / 40)
    assert 2900 <= m.server_ttft_ms.count <= 3000 + 10 * 300 / 40


def test_histograms_are_read_every_10_s_and_stand_in_between() -> None:
    from lpxtop.engine.scrape.metric_names import histogram_names
    from lpxtop.engine.scrape.reparse import ReParser
    from lpxtop.engine.scrape.tracker import HISTOGRAMS_EVERY_S

    assert HISTOGRAMS_EVERY_S == 10.0
    parser = ReParser(frozenset({"vllm:time_to_first_token_seconds", "vllm:generation_tokens_total",
                                 "vllm:generation_tokens", "process_start_time_seconds"}),
                      histogram_names(VLLM))
    tracker = MetricsTracker(window_s=300.0)
    pages = {0.0: (5, 5, 5, 5, 0), 2.0: (15, 45, 55, 55, 100), 4.0: (115, 145, 155, 155, 300),
             10.0: (115, 145, 155, 155, 500), 12.0: (115, 145, 155, 155, 700)}
    seen = {}
    for now, (b01, b02, b05, inf, tokens) in pages.items():
        wanted = tracker.wants_histograms(now)
        expo = parser.parse(ttft(b01, b02, b05, inf) + gen_tokens(tokens), histograms=wanted)
        assert expo.has("vllm:time_to_first_token_seconds_bucket") is wanted
        seen[now] = (wanted, tracker.update(expo, VLLM, now, 1_000.0 + now, histograms=wanted))
    assert [w for w, _ in seen.values()] == [True, True, False, False, True]  # 0 and 2 s, then 12 - 2 >= 10
    # rates follow every scrape: (300 - 100) / 2 s, then 200 / 6 s, then 200 / 2 s
    assert [m.generation_tokens_per_s for _, m in seen.values()][1:] == pytest.approx([50.0, 100.0, 200 / 6, 100.0])
    # between reads the TTFT of the last read stands in (the delta 0 -> 2 s, as in the test above) ...
    first_window = window_0_to_10
    assert seen[2.0][1].server_ttft_ms == first_window
    assert seen[4.0][1].server_ttft_ms == first_window and seen[10.0][1].server_ttft_ms == first_window
    # ... and at 12 s the window 0 -> 12 s holds all 150 requests
    assert seen[12.0][1].server_ttft_ms.count == 150


def test_after_a_reset_the_next_two_scrapes_read_histograms() -> None:
    tracker = MetricsTracker()
    update(tracker, gen_tokens(1), now=0.0)
    update(tracker, gen_tokens(2), now=2.0)
    assert not tracker.wants_histograms(4.0)
    tracker.reset_history()
    assert tracker.wants_histograms(4.0)


def test_remembered_latencies_equal_computed_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    # MetricsTracker.latency remembers a role's quantiles while their inputs are the same objects; over a
    # window that slides, scrapes that leave the histograms out, and a restart, every summary must equal
    # the one computed afresh each time.
    from lpxtop.engine.scrape import tracker as server_tracker
    from lpxtop.engine.scrape.metric_names import histogram_names
    from lpxtop.engine.scrape.reparse import ReParser

    families = frozenset({"vllm:time_to_first_token_seconds", "vllm:generation_tokens_total",
                          "vllm:generation_tokens", "process_start_time_seconds"})

    def run() -> list[ServerMetrics]:
        parser = ReParser(families, histogram_names(VLLM))
        tracker = MetricsTracker(window_s=57.0)  # not a multiple of the 10 s between histogram reads
        out = []
        for step in range(120):
            now = 2.0 * step
            n = step if step < 80 else step - 80  # a restart at step 80
            counts = (n * 3, n * 5, n * 6 + step % 4, n * 7 + step % 4)
            wanted = tracker.wants_histograms(now)
            expo = parser.parse(ttft(*counts) + gen_tokens(n * 40), histograms=wanted)
            out.append(tracker.update(expo, VLLM, now, 1_000.0 + now, histograms=wanted))
        return out

    remembered = run()
    monkeypatch.setattr(server_tracker.MetricsTracker, "latency",
                        lambda self, role, hist, new, base: server_tracker._latency(role, hist, new, base))
    assert run() == remembered
    assert sum(m.server_ttft_ms is not None and m.server_ttft_ms.count > 0 for m in remembered) > 60


bucket_lists = st.lists(st.integers(0, 10_000), min_size=1, max_size=20).map(
    lambda counts: tuple(zip([*(0.01 * 2**i for i in range(len(counts) - 1)), INF], sorted(counts), strict=True)))


@settings(max_examples=200, deadline=None)
@given(bucket_lists, bucket_lists)
def test_packed_buckets_read_and_subtract_as_the_pairs_they_stand_for(new, old):
    packed_new, packed_old = PackedBuckets(new), PackedBuckets(old)
    assert tuple(packed_new) == new and len(packed_new) == len(new) and packed_new[-1] == new[-1]
    assert packed_new[1:] == new[1:] and packed_new == new and packed_new == PackedBuckets(new)
    assert bucket_delta(packed_new, packed_old) == bucket_delta(new, old)
    assert bucket_delta(packed_new, None) == new
    assert merge([packed_new, packed_old]) == merge([new, old])
    assert histogram_quantile(0.5, packed_new) == histogram_quantile(0.5, new)


def test_packed_buckets_share_their_bounds_and_take_a_fraction_of_the_room():
    pairs = tuple((0.001 * 2**i, float(i * 3)) for i in range(14)) + ((INF, 50.0),)
    a, b = PackedBuckets(pairs), PackedBuckets(tuple((bound, n + 1) for bound, n in pairs))
    assert a.bounds is b.bounds  # one layout tuple for every series and scrape that has it
    as_pairs = sys.getsizeof(pairs) + sum(sys.getsizeof(p) + 2 * sys.getsizeof(1.5) for p in pairs)
    packed = sys.getsizeof(b) + sys.getsizeof(b.counts)
    assert packed * 4 < as_pairs


def test_the_tracker_keeps_packed_buckets_and_gives_the_same_quantiles():
    tracker = MetricsTracker(window_s=300)
    update(tracker, ttft(0, 0, 0, 0), now=0.0)
    m = update(tracker, ttft(10, 30, 90, 100), now=10.0)
    assert all(isinstance(b, PackedBuckets) for r in tracker._history for s in r.hists.values() for b in s.values())
    expected = histogram_quantile(0.5, ((0.1, 10), (0.2, 30), (0.5, 90), (INF, 100)))
    assert m.server_ttft_ms is not None and m.server_ttft_ms.count == 100
    assert m.server_ttft_ms.p50_range[0] <= expected * 1000 <= m.server_ttft_ms.p50_range[1]
