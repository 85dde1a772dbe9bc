"""lpxtop's hand-written histograms and counters (lpxtop/otel/aggregate.py) held to the OpenTelemetry SDK's
own aggregation of the same values: bucket counts, sum, count, min and max, with generated inputs."""

from __future__ import annotations

import logging
import math

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from lpxtop.otel.aggregate import MAX_SERIES, OVERFLOW, Aggregator, HistogramState, attrs_key
from lpxtop.otel.semconv import DURATION_BOUNDS, ITL_BOUNDS, TOKEN_BOUNDS, MetricDef

BOUNDS = st.sampled_from([DURATION_BOUNDS, ITL_BOUNDS, TOKEN_BOUNDS])
# values around every bound (exactly on one too), tiny, huge, zero and negative
VALUES = st.one_of(
    st.floats(min_value=-10, max_value=1e8, allow_nan=False, allow_infinity=False),
    st.sampled_from([*DURATION_BOUNDS, *ITL_BOUNDS, *TOKEN_BOUNDS, 0.0]),
)


# the SDK warns for each negative value it refuses (as lpxtop's aggregation refuses them, silently)
logging.getLogger("opentelemetry.sdk.metrics").setLevel(logging.ERROR)


def sdk_points(bounds: tuple[float, ...], series: dict[tuple, list[float]]) -> dict[tuple, object]:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("differential")
    histogram = meter.create_histogram("h", unit="s", explicit_bucket_boundaries_advisory=list(bounds))
    for attrs, values in series.items():
        for value in values:
            histogram.record(value, dict(attrs))
    data = reader.get_metrics_data()
    if data is None or not data.resource_metrics:
        return {}
    points = [p for sm in data.resource_metrics[0].scope_metrics for m in sm.metrics for p in m.data.data_points]
    return {attrs_key(dict(p.attributes)): p for p in points}


@settings(max_examples=150, deadline=None)
@given(bounds=BOUNDS, series=st.dictionaries(st.sampled_from(["a", "b", "c"]),
                                             st.lists(VALUES, min_size=1, max_size=60), min_size=1))
def test_histograms_agree_with_the_sdk(bounds, series):
    metric = MetricDef("h", "histogram", "s", "", bounds)
    by_attrs = {attrs_key({"k": name}): values for name, values in series.items()}
    agg = Aggregator()
    for attrs, values in by_attrs.items():
        half = len(values) // 2
        for value in values[:half]:
            agg.record(metric, value, attrs, 1)
        agg.record_many(metric, values[half:], attrs, 1)  # both ways of recording
    ours = {attrs: state for _, rows in agg.collect() for attrs, state in rows}
    theirs = sdk_points(bounds, by_attrs)
    assert ours.keys() == theirs.keys()
    for attrs, point in theirs.items():
        state = ours[attrs]
        assert isinstance(state, HistogramState)
        assert list(point.explicit_bounds) == list(bounds)
        assert state.counts == list(point.bucket_counts)
        assert state.count == point.count
        assert math.isclose(state.total, point.sum, rel_tol=1e-9, abs_tol=1e-9)
        assert state.min == point.min and state.max == point.max


def test_a_value_on_a_bound_counts_in_the_bucket_it_closes():
    metric = MetricDef("h", "histogram", "s", "", (1.0, 2.0))
    agg = Aggregator()
    for value in (1.0, 2.0, 2.0000001, 0.5):
        agg.record(metric, value, (), 0)
    ((_, [(_, state)]),) = agg.collect()
    assert state.counts == [2, 1, 1]


def test_counters_add_and_refuse_what_is_not_a_count():
    metric = MetricDef("c", "counter", "{x}", "")
    agg = Aggregator()
    for amount in (1, 2.5, -1, math.nan, math.inf):
        agg.add(metric, amount, (("k", "v"),), 5)
    ((_, [(attrs, state)]),) = agg.collect()
    assert attrs == (("k", "v"),) and state.value == 3.5 and state.start_ns == 5


def test_series_beyond_the_limit_fold_into_one_overflow_series():
    metric = MetricDef("h", "histogram", "s", "", (1.0,))
    agg = Aggregator()
    for i in range(MAX_SERIES + 50):
        agg.record(metric, 0.5, (("i", i),), 0)
    rows = dict(agg.collect()[0][1])
    assert len(rows) == MAX_SERIES
    assert rows[OVERFLOW].count == 51


def test_collect_copies_so_an_export_sees_one_moment():
    metric = MetricDef("h", "histogram", "s", "", (1.0,))
    agg = Aggregator()
    agg.record(metric, 0.5, (), 0)
    ((_, [(_, copy)]),) = agg.collect()
    agg.record(metric, 0.5, (), 0)
    assert copy.count == 1 and copy.counts == [1, 0]
