"""Server-side quantiles are estimates with honest bounds: the true value is always inside the range.

Observations are drawn here, bucketed as a Prometheus histogram does, and the estimates checked against
the observations themselves; then two cases seen on real servers (an idle vLLM's queue time read as 150 ms,
a TTFT p99 at twice what any request could have taken) on the real capture and on hand-made windows.
"""

from __future__ import annotations

import bisect
import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lpxtop.engine.scrape.histograms import Buckets, estimate_quantile, histogram_quantile, observation_bounds
from lpxtop.engine.scrape.tracker import _sum_fits

INF = math.inf
VLLM_REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                        120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
VLLM_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                     10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)


def bucketed(values: list[float], bounds: tuple[float, ...]) -> Buckets:
    """Cumulative buckets as prometheus_client fills them (an observation goes in the first le >= it)."""
    counts = [0] * (len(bounds) + 1)
    for v in values:
        counts[bisect.bisect_left(bounds, v)] += 1
    out, total = [], 0
    for bound, n in zip((*bounds, INF), counts):
        total += n
        out.append((bound, float(total)))
    return tuple(out)


def true_quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = min(len(ordered), max(1, math.ceil(q * len(ordered) - 1e-9)))
    return ordered[rank - 1]


bounds_strategy = st.lists(st.floats(0.001, 100.0), min_size=1, max_size=12, unique=True).map(
    lambda b: tuple(sorted(b))
)
values_strategy = st.lists(st.floats(0.0, 150.0), min_size=1, max_size=60)


@settings(max_examples=300, deadline=None)
@given(values_strategy, bounds_strategy, st.sampled_from([0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0]))
# found: the sum of three observations of a bucket's bound rounds up, which put the smallest past the bound
@example([10.695275423433376] * 3, (10.695275423433376,), 0.0)
def test_the_true_quantile_is_always_inside_the_range(values: list[float], bounds: tuple[float, ...], q: float) -> None:
    buckets = bucketed(values, bounds)
    total = math.fsum(values)
    est = estimate_quantile(q, buckets, total)
    assert est is not None
    truth = true_quantile(values, q)
    slack = 1e-9 * max(1.0, total)
    assert est.low - slack <= truth
    assert est.high is None or truth <= est.high + slack
    assert est.low <= est.value and (est.high is None or est.value <= est.high)
    # never above the largest bound that holds an observation, when one does
    if truth <= bounds[-1]:
        assert est.value <= bounds[-1]
    # the buckets alone (no sum) bound it too, only more loosely
    loose = estimate_quantile(q, buckets, None)
    assert loose is not None and loose.low <= est.low + slack
    assert loose.high is None or (est.high is not None and est.high <= loose.high + slack)
    # and the sum of a real set of observations always fits its buckets
    assert _sum_fits(total, buckets)


@settings(max_examples=200, deadline=None)
@given(values_strategy, bounds_strategy)
def test_observation_bounds_hold_the_smallest_and_the_largest(values: list[float], bounds: tuple[float, ...]) -> None:
    buckets = bucketed(values, bounds)
    found = observation_bounds(buckets, math.fsum(values))
    assert found is not None
    at_least, at_most = found
    assert at_least <= min(values) + 1e-9
    assert at_most is None or max(values) <= at_most + 1e-9 * max(1.0, sum(values))


@settings(max_examples=200, deadline=None)
@given(values_strategy, bounds_strategy, st.sampled_from([0.5, 0.99]))
def test_within_markovs_bound(values: list[float], bounds: tuple[float, ...], q: float) -> None:
    """For non-negative values the q-quantile is at most mean / (1 - q); the estimate keeps to it."""
    buckets = bucketed(values, bounds)
    est = estimate_quantile(q, buckets, math.fsum(values))
    assert est is not None
    mean = math.fsum(values) / len(values)
    assert est.value <= mean / (1.0 - q) + 1e-9


def test_idle_queue_time_is_not_half_the_first_bucket() -> None:
    """Seen on an idle vLLM: 16 requests that waited < 0.01 ms each, in vLLM's 0-0.3 s queue bucket."""
    waits = [0.000004 + 0.0000003 * i for i in range(16)]  # 4-8.5 µs: what an idle vLLM shows
    buckets = bucketed(waits, VLLM_REQUEST_BUCKETS)
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.15)  # what Prometheus' interpolation says
    est = estimate_quantile(0.5, buckets, math.fsum(waits))
    assert est is not None
    assert est.value < 0.00002  # under 0.02 ms, not 150 ms
    assert est.low <= true_quantile(waits, 0.5) <= est.high  # type: ignore[operator]
    p99 = estimate_quantile(0.99, buckets, math.fsum(waits))
    assert p99 is not None and p99.value <= math.fsum(waits)


def test_ttft_p99_never_at_twice_the_slowest_possible() -> None:
    """Seen on a real server: TTFTs of 101-124 ms in the (0.1, 0.25] bucket; interpolation puts p99 at 248.5 ms."""
    ttfts = [0.101 + 0.0025 * i for i in range(10)]  # slowest 123.5 ms
    buckets = bucketed(ttfts, VLLM_TTFT_BUCKETS)
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.2485)
    total = math.fsum(ttfts)
    est = estimate_quantile(0.99, buckets, total)
    assert est is not None and est.high is not None
    # The slowest any request could have been: the other 9 at the bucket's bottom, 100 ms each.
    slowest_possible = total - 9 * 0.1
    assert est.high == pytest.approx(slowest_possible)
    assert est.value <= slowest_possible < 2 * max(ttfts)
    assert est.low <= max(ttfts) <= est.high


def test_rank_in_the_inf_bucket() -> None:
    buckets = ((0.1, 0.0), (0.5, 1.0), (INF, 10.0))
    est = estimate_quantile(0.99, buckets, None)
    assert est is not None and (est.value, est.low, est.high) == (0.5, 0.5, None)  # unbounded above
    # With the sum (30): the slowest is at most 30 - 0.1 (the one in (0.1, 0.5]) - 8 * 0.5 (the other eight
    # above 0.5) = 25.9, and at least the mean of the nine above 0.5 once the other one is at its top,
    # (30 - 0.5) / 9 = 3.28: above the last finite bound, where the +Inf bucket's observations are.
    est = estimate_quantile(0.99, buckets, 30.0)
    assert est is not None and est.high == pytest.approx(30.0 - 0.1 - 8 * 0.5)
    assert est.value == est.low == pytest.approx(29.5 / 9)


def test_a_sum_that_contradicts_the_buckets_is_not_used() -> None:
    buckets = ((0.1, 0.0), (0.2, 10.0), (INF, 10.0))  # ten observations in (0.1, 0.2]: sum in [1, 2]
    assert not _sum_fits(0.5, buckets) and not _sum_fits(2.5, buckets) and _sum_fits(1.5, buckets)
    est = estimate_quantile(0.5, buckets, 0.5)
    assert est is not None and (est.low, est.high) == (0.1, 0.2)  # the buckets alone


def test_no_observations_no_estimate() -> None:
    assert estimate_quantile(0.5, ((0.1, 0.0), (INF, 0.0)), 0.0) is None
    assert estimate_quantile(0.5, None) is None
    assert estimate_quantile(0.5, ((0.1, 3.0), (0.2, 4.0)), 1.0) is None  # no +Inf bucket
    assert observation_bounds(((0.1, 0.0), (INF, 0.0))) is None
