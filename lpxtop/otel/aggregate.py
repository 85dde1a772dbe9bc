"""Cumulative explicit-bucket histograms and monotonic counters, one series per attribute set.

Hand-written, and earned: the OpenTelemetry SDK's `Histogram.record()` cleans and hashes the attributes
on every call, and lpxtop records one value per token gap (15 per default probe, hundreds per load-test
request). `python benchmarks/otel_cost.py --micro` on this project's 2-core test box, busy: the SDK
23-25 µs of CPU per record, this class 1.0-1.6 µs (0.7-0.9 µs a value when a probe's gaps go in at
once): ~20×. The attribute set is built once per probe, not per value. What leaves
is built from the SDK's own data classes and encoded by its OTLP exporter (lpxtop/otel/pipeline.py);
tests/unit/test_otel_aggregate.py holds the bucket counts, sum, min and max to the SDK's aggregation
of the same values, with generated inputs.

Bucket rule (the OpenTelemetry metrics data model): bucket i counts values v with
bounds[i-1] < v <= bounds[i]; the last bucket everything above the last bound. Negative values are
refused, as the SDK refuses them for a histogram (it reports a sum); so are NaN and infinities.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field

from lpxtop.otel.semconv import MetricDef

Attrs = tuple[tuple[str, object], ...]
MAX_SERIES = 2000  # per metric, as the SDK's default cardinality limit; beyond it one overflow series
OVERFLOW: Attrs = (("otel.metric.overflow", True),)


def attrs_key(attributes: dict[str, object]) -> Attrs:
    """A hashable attribute set (None values left out, keys sorted)."""
    return tuple(sorted((k, v) for k, v in attributes.items() if v is not None))


@dataclass
class HistogramState:
    bounds: tuple[float, ...]
    start_ns: int
    counts: list[int] = field(default_factory=list)
    count: int = 0
    total: float = 0.0
    min: float = math.inf
    max: float = -math.inf

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def record(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.total += value
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value


@dataclass
class CounterState:
    start_ns: int
    value: float = 0


class Aggregator:
    """The metrics' state between exports. Written by the pipeline's worker thread; `collect()` may run on
    another (tests), so both hold the lock (uncontended: one thread writes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: dict[str, tuple[MetricDef, dict[Attrs, HistogramState | CounterState]]] = {}

    def _state(self, metric: MetricDef, attrs: Attrs, now_ns: int) -> HistogramState | CounterState:
        entry = self._series.get(metric.name)
        if entry is None:
            entry = self._series[metric.name] = (metric, {})
        series = entry[1]
        state = series.get(attrs)
        if state is None:
            if len(series) >= MAX_SERIES - 1 and attrs != OVERFLOW:
                return self._state(metric, OVERFLOW, now_ns)
            state = series[attrs] = (HistogramState(metric.bounds, now_ns) if metric.kind == "histogram"
                                     else CounterState(now_ns))
        return state

    def record(self, metric: MetricDef, value: float, attrs: Attrs, now_ns: int) -> None:
        if not (0.0 <= value < math.inf):  # also refuses NaN
            return
        with self._lock:
            self._state(metric, attrs, now_ns).record(value)  # type: ignore[union-attr]

    def record_many(self, metric: MetricDef, values: Iterable[float], attrs: Attrs, now_ns: int) -> None:
        kept = [v for v in values if 0.0 <= v < math.inf]
        if not kept:
            return
        with self._lock:
            state = self._state(metric, attrs, now_ns)
            counts, bounds = state.counts, state.bounds  # type: ignore[union-attr]
            for value in kept:
                counts[bisect_left(bounds, value)] += 1
            state.count += len(kept)  # type: ignore[union-attr]
            state.total += sum(kept)  # type: ignore[union-attr]
            state.min = min(state.min, min(kept))  # type: ignore[union-attr]
            state.max = max(state.max, max(kept))  # type: ignore[union-attr]

    def add(self, metric: MetricDef, amount: float, attrs: Attrs, now_ns: int) -> None:
        if not math.isfinite(amount) or amount < 0:
            return
        with self._lock:
            state = self._state(metric, attrs, now_ns)
            state.value += amount  # type: ignore[union-attr]

    def collect(self) -> list[tuple[MetricDef, list[tuple[Attrs, HistogramState | CounterState]]]]:
        """Every series, copied (cumulative: nothing is reset)."""
        out = []
        with self._lock:
            for metric, series in self._series.values():
                rows = []
                for attrs, state in series.items():
                    if isinstance(state, HistogramState):
                        copy: HistogramState | CounterState = HistogramState(
                            state.bounds, state.start_ns, list(state.counts), state.count, state.total, state.min,
                            state.max)
                    else:
                        copy = CounterState(state.start_ns, state.value)
                    rows.append((attrs, copy))
                out.append((metric, rows))
        return out

    @property
    def series_count(self) -> int:
        with self._lock:
            return sum(len(series) for _, series in self._series.values())
