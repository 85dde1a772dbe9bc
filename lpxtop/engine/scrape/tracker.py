"""Per-endpoint memory of past scrapes: counter rates, windowed histogram quantiles, restarts.

`MetricsTracker.update()` is pure computation (no I/O, explicit clock), so tests can feed it
two captures and a time step and check every derived value by hand.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from lpxtop.engine.scrape.exposition import Exposition, Labels, Point
from lpxtop.engine.scrape.histograms import (
    Buckets,
    PackedBuckets,
    bucket_delta,
    estimate_quantiles,
    merge,
    observations,
)
from lpxtop.engine.scrape.metric_names import PROCESS_START, Hist, KindNames, Ref
from lpxtop.model.server import ModelServerMetrics, ServerLatency, ServerMetrics, TtftInterval

# (model, outcome key, the remaining labels: engine, tp_rank, ...)
SeriesKey = tuple[str, str, Labels]

COUNTER_ROLES = (
    "preemptions",
    "prompt_tokens",
    "generation_tokens",
    "prefix_hits",
    "prefix_queries",
    "spec_accepted",
    "spec_drafted",
)
HIST_ROLES = ("ttft", "itl", "tpot", "e2e", "queue", "prefill", "decode", "inference")
MAX_NOTES = 8  # notes kept per scrape: a page with a thousand bad values says so in a few lines
# The server's latency percentiles cover the whole window (5 minutes): reading their histograms, most of
# a page's changing lines, every 10 s instead of every scrape loses nothing a user could see.
HISTOGRAMS_EVERY_S = 10.0
KEPT_PER_WINDOW = 40  # readings kept per window (at most about one every window_s / 40 seconds)
MAX_READINGS = 1024  # bounds memory even if someone scrapes far faster than the window needs


@dataclass
class Reading:
    """The cumulative values of one scrape, keyed by series so deltas can be taken later."""

    t: float  # monotonic seconds
    counters: dict[str, dict[SeriesKey, float]] = field(default_factory=dict)
    hists: dict[str, dict[SeriesKey, Buckets]] = field(default_factory=dict)
    sums: dict[str, dict[SeriesKey, float]] = field(default_factory=dict)  # each histogram series' _sum
    process_start: float | None = None
    # (asked, answered) in perf_counter_ns for the scrape whose histograms `hists` holds, when known
    hist_ns: tuple[int, int] | None = None
    notes: list[str] = field(default_factory=list)
    # counter roles with a value that was no count in this scrape: no delta to or from it
    spoiled: set[str] = field(default_factory=set)


class MetricsTracker:
    """Turns successive scrapes of one server into ServerMetrics (rates, window quantiles, restarts)."""

    def __init__(self, window_s: float = 300.0) -> None:
        self.window_s = window_s
        self._history: deque[Reading] = deque(maxlen=MAX_READINGS)
        self.restart_count = 0
        self._last_restart_t: float | None = None  # monotonic
        self.last_restart_time: float | None = None  # wall clock
        self._histograms_t: float | None = None  # when histograms were last read (monotonic)
        self._latency_memo: dict[str, tuple[tuple[object, ...], ServerLatency | None, list[str]]] = {}
        # TtftInterval per pair of successive histogram reads, by their objects: a pair's interval never
        # changes, and most scrapes add no read (rebuilt from the pairs in the window, so it stays small)
        self._interval_memo: dict[tuple[int, int], tuple[Reading, Reading, TtftInterval]] = {}

    def reset_history(self) -> None:
        """Forget past scrapes (e.g. the endpoint now points at another server)."""
        self._history.clear()
        self._histograms_t = None

    def wants_histograms(self, now: float) -> bool:
        """Whether the scrape at `now` should read the latency histograms (see HISTOGRAMS_EVERY_S).

        Always for the first two scrapes (after a start, a restart or a reset), so that a window
        exists as soon as two scrapes do (`lpxtop once` takes two).
        """
        if len(self._history) < 2 or self._histograms_t is None:
            return True
        return now - self._histograms_t >= HISTOGRAMS_EVERY_S or now < self._histograms_t

    def update(
        self,
        expo: Exposition,
        names: KindNames,
        now: float,
        wall: float,
        *,
        histograms: bool = True,
        asked_ns: int | None = None,
        answered_ns: int | None = None,
    ) -> ServerMetrics:
        """Record one scrape taken at monotonic time `now` and summarize it against the past.

        `histograms=False`: `expo` left the latency histograms out; the last ones read stand in.
        `asked_ns`/`answered_ns`: when the scrape's request was sent and its answer had arrived
        (perf_counter_ns), which places the server's TTFT observations among the probes' (TtftInterval).
        """
        reading = _read(expo, names, now)
        if asked_ns is not None and answered_ns is not None:
            reading.hist_ns = (asked_ns, answered_ns)
        prev = self._history[-1] if self._history else None
        if prev is not None and _went_down(prev, reading):
            # A counter fell: the server restarted. Deltas across the restart would be negative
            # or meaningless, so the window starts afresh from this scrape.
            self.restart_count += 1
            self._last_restart_t = now
            self.last_restart_time = wall
            self._history.clear()
            prev = None
        if histograms:
            self._histograms_t = now
        elif prev is not None:
            # cumulative: as of the last read, which the window allows for
            reading.hists, reading.sums, reading.hist_ns = prev.hists, prev.sums, prev.hist_ns
        if prev is not None and now <= prev.t:
            self._history.pop()  # no time passed: this scrape replaces the previous one
            prev = self._history[-1] if self._history else None
        if prev is not None and len(self._history) >= 2 and prev.t - self._history[-2].t < self.window_s / KEPT_PER_WINDOW:
            # Keep the history thin: the window only needs a base near its start, and the rates only the
            # previous scrape (still in hand as `prev`), so a reading too close to the one before it goes.
            self._history.pop()
        self._history.append(reading)
        while len(self._history) > 1 and self._history[0].t < now - self.window_s:
            self._history.popleft()
        base = self._history[0] if self._history[0] is not reading else None
        return _summarize(expo, names, reading, prev, base, self, now, wall)

    def latency(self, role: str, hist: Hist | None, new: Reading, base: Reading | None) -> ServerLatency | None:
        """`_latency`, remembered per role while its inputs are the same objects: a scrape that leaves the
        histograms out carries the last ones read, so most scrapes would compute the same quantiles again."""
        inputs = (hist, new.hists.get(role), new.sums.get(role), base is None,
                  None if base is None else base.hists.get(role), None if base is None else base.sums.get(role))
        memo = self._latency_memo.get(role)
        if memo is not None and all(a is b for a, b in zip(memo[0], inputs)):
            for note in memo[2]:  # what it noted holds as long as its result does
                _note(new.notes, note)
            return memo[1]
        before = len(new.notes)
        result = _latency(role, hist, new, base)
        self._latency_memo[role] = (inputs, result, new.notes[before:])
        return result

    def ttft_intervals(self, hist: Hist | None) -> tuple[TtftInterval, ...]:
        """The TTFT histogram's growth between each two successive reads in the window (oldest first)."""
        if hist is None:
            return ()
        out: list[TtftInterval] = []
        memo: dict[tuple[int, int], tuple[Reading, Reading, TtftInterval]] = {}
        before: Reading | None = None
        for r in self._history:
            if before is not None and r.hists is before.hists:
                continue  # a scrape that carried the last read's histograms: the same read
            if before is not None and before.hist_ns is not None and r.hist_ns is not None:
                key = (id(before.hists), id(r.hists))
                known = self._interval_memo.get(key)
                if known is not None and known[0] is before and known[1] is r:
                    interval = known[2]
                else:
                    count, total = _growth("ttft", r, before)
                    interval = TtftInterval(
                        start_ns=before.hist_ns[1],
                        end_ns=r.hist_ns[0],
                        count=count,
                        sum_ms=None if total is None else total * hist.to_ms,
                    )
                memo[key] = (before, r, interval)
                out.append(interval)
            before = r
        self._interval_memo = memo
        return tuple(out)

    def restarted_recently(self, now: float) -> bool:
        return self._last_restart_t is not None and self._last_restart_t >= now - self.window_s


def _model_of(p: Point, names: KindNames) -> str:
    for label in names.model_labels:
        v = p.label(label)
        if v is not None:
            return v
    return ""


def _rest(p: Point, names: KindNames, drop: Iterable[str] = ()) -> Labels:
    skip = set(names.model_labels) | set(drop)
    return tuple(kv for kv in p.labels if kv[0] not in skip)


def _note(notes: list[str], text: str) -> None:
    if len(notes) < MAX_NOTES and text not in notes:
        notes.append(text)


def _bad_value(name: str, value: float, what: str, notes: list[str]) -> bool:
    """True (and a note) for a value that cannot be `what`: not finite, or below zero.

    The text format allows +Inf, -Inf and NaN for any sample: a queue of +Inf requests is not a queue
    length, and arithmetic on it (a rate, a sparkline's scale) would spread it to every figure.
    """
    if math.isfinite(value) and value >= 0.0:
        return False
    _note(notes, f"{name} is {_spelled(value)}, which is no {what}: shown as --")
    return True


def _spelled(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:g}"


def _counter_series(
    expo: Exposition, names: KindNames, alts: tuple[Ref, ...], notes: list[str]
) -> dict[SeriesKey, float] | None:
    """The counter's value per series; None when one of them is no count (its deltas would be wrong)."""
    found = expo.first(alts)
    if found is None:
        return {}
    r, points = found
    out: dict[SeriesKey, float] = {}
    for p in points:
        if _bad_value(r.name, p.value, "count", notes):
            return None
        key = (_model_of(p, names), "", _rest(p, names, (k for k, _ in r.match)))
        out[key] = out.get(key, 0.0) + p.value
    return out


def _read(expo: Exposition, names: KindNames, now: float) -> Reading:
    reading = Reading(t=now)
    notes = reading.notes
    if expo.duplicates:
        _note(notes, f"{expo.duplicates:g} sample(s) repeat a series already on the page: the first one counts, "
                     "as in Prometheus")
    for role in COUNTER_ROLES:
        series = _counter_series(expo, names, getattr(names, role), notes)
        if series is None:
            reading.spoiled.add(role)
        elif series:
            reading.counters[role] = series
    outcomes: dict[SeriesKey, float] = {}
    for oc in names.outcomes:
        for p in expo.lookup(Ref(oc.name)):
            if _bad_value(oc.name, p.value, "count", notes):
                reading.spoiled.add("outcome")
                continue
            reason = p.label(oc.reason_label) if oc.reason_label else None
            key_name = oc.key + reason if reason is not None else oc.key
            key = (_model_of(p, names), key_name or "finished", _rest(p, names, [oc.reason_label or ""]))
            outcomes[key] = outcomes.get(key, 0.0) + p.value
    if outcomes and "outcome" not in reading.spoiled:
        reading.counters["outcome"] = outcomes
    for role in HIST_ROLES:
        hist: Hist | None = getattr(names, role)
        if hist is None:
            continue
        for r in hist.names:
            per_series = expo.histogram(r)
            if not per_series:
                continue
            sums = expo.histogram_sums(r)
            buckets: dict[SeriesKey, Buckets] = {}
            totals: dict[SeriesKey, float] = {}
            for labels, b in per_series.items():
                key = _hist_key(labels, names)
                if any(_bad_value(r.name + "_bucket", n, "count", notes) for _, n in b):
                    continue
                buckets[key] = PackedBuckets(b)  # kept for the window: 8 bytes a bucket instead of ~104
                total = sums.get(labels)
                if total is not None and not _bad_value(r.name + "_sum", total, "sum of latencies", notes):
                    totals[key] = total
            if buckets:
                reading.hists[role] = buckets
                reading.sums[role] = totals
            break
    starts = expo.lookup(Ref(PROCESS_START))
    if len(starts) == 1 and math.isfinite(starts[0].value):
        reading.process_start = starts[0].value
    return reading


def _hist_key(labels: Labels, names: KindNames) -> SeriesKey:
    model = next((v for k, v in labels if k in names.model_labels), "")
    return (model, "", tuple(kv for kv in labels if kv[0] not in names.model_labels))


def _went_down(old: Reading, new: Reading) -> bool:
    if (
        old.process_start is not None
        and new.process_start is not None
        and abs(new.process_start - old.process_start) > 1.0
    ):
        return True
    for role, series in new.counters.items():
        before = old.counters.get(role, {})
        for key, value in series.items():
            if key in before and value < before[key]:
                return True
    for role, series in new.hists.items():
        before_h = old.hists.get(role, {})
        for key, buckets in series.items():
            if key in before_h and observations(buckets) < observations(before_h[key]):
                return True
    return False


def _delta(new: Reading, old: Reading, role: str) -> dict[SeriesKey, float] | None:
    """Per-series growth of a counter role between two readings; None if the server lacks it, or one of
    the two readings had a value that was no count (a series missing from `old` started from zero)."""
    series = new.counters.get(role)
    if series is None or role in old.spoiled:
        return None
    before = old.counters.get(role, {})
    return {k: max(0.0, v - before.get(k, 0.0)) for k, v in series.items()}


def _sum(d: dict[SeriesKey, float] | None, model: str | None = None) -> float | None:
    if d is None:
        return None
    return sum(v for k, v in d.items() if model is None or k[0] == model)


def _growth(role: str, new: Reading, old: Reading) -> tuple[float | None, float | None]:
    """(observations, their sum) that histogram `role` gained from `old` to `new`, merged over its series.

    The count is None when a series' bucket layout changed or a count fell; the sum is None when a
    series has no usable _sum.
    """
    series = new.hists.get(role)
    if series is None:
        return None, None
    before = old.hists.get(role, {})
    deltas = []
    for key, buckets in series.items():
        d = bucket_delta(buckets, before.get(key))
        if d is None:
            return None, None
        deltas.append(d)
    return observations(merge(deltas)), _sum_growth(role, new, old)


def _sum_growth(role: str, new: Reading, old: Reading) -> float | None:
    """What histogram `role`'s _sum gained from `old` to `new` over its series; None when a series has
    no usable _sum."""
    sums, sums_before = new.sums.get(role, {}), old.sums.get(role, {})
    before = old.hists.get(role, {})
    total = 0.0
    for key in new.hists.get(role, ()):
        if key not in sums or (key in before and key not in sums_before):
            return None
        total += sums[key] - sums_before.get(key, 0.0)
    return total


def _sum_fits(total: float, buckets: Buckets) -> bool:
    """Whether a sum of observations is one these buckets can hold (each between its bucket's edges).

    A page whose _sum says otherwise (a server that resets one and not the other, a hand-made page)
    gives no mean rather than a wrong one; a little slack covers a scrape read while an observation
    was being recorded.
    """
    low = high = 0.0
    below, lower_edge = 0.0, 0.0
    for bound, n in buckets:
        k = max(0.0, n - below)
        below = max(below, n)
        if k > 0:
            low += k * lower_edge
            high += k * bound
        lower_edge = bound
    slack = 1e-6 * max(1.0, abs(total))
    return low - slack <= total <= high + slack


def _latency(role: str, hist: Hist | None, new: Reading, base: Reading | None) -> ServerLatency | None:
    if hist is None or role not in new.hists or base is None:
        return None
    before = base.hists.get(role, {})
    deltas = [bucket_delta(buckets, before.get(key)) for key, buckets in new.hists[role].items()]
    merged = merge(d for d in deltas if d is not None)
    count = observations(merged)
    if merged is None or count <= 0:
        return ServerLatency(None, None, 0.0)
    # a series that could not be followed (a new layout, a count that fell) is not in these buckets: the
    # sum over all series would not match them
    total = None if any(d is None for d in deltas) else _sum_growth(role, new, base)
    if total is not None and not _sum_fits(total, merged):
        _note(new.notes, f"{hist.names[0].name}_sum disagrees with its buckets: no mean")
        total = None
    to_ms = hist.to_ms

    def ms(x: float | None) -> float | None:
        return None if x is None else x * to_ms

    p50, p99, smallest, largest = estimate_quantiles((0.50, 0.99, 0.0, 1.0), merged, total)
    return ServerLatency(
        p50=ms(p50.value) if p50 else None,
        p99=ms(p99.value) if p99 else None,
        count=count,
        mean=None if total is None else total / count * to_ms,
        p50_range=(p50.low * to_ms, ms(p50.high)) if p50 else None,
        p99_range=(p99.low * to_ms, ms(p99.high)) if p99 else None,
        min_at_least=ms(smallest.low) if smallest else None,
        max_at_most=ms(largest.high) if largest else None,
    )


def _gauge(
    expo: Exposition, names: KindNames, alts: tuple[Ref, ...], notes: list[str], what: str = "level"
) -> dict[str, list[float]] | None:
    """Values of the first present gauge alternative, grouped by model; values that cannot be one
    (+Inf, NaN, below zero) are left out, with a note."""
    found = expo.first(alts)
    if found is None:
        return None
    out: dict[str, list[float]] = {}
    for p in found[1]:
        if not _bad_value(found[0].name, p.value, what, notes):
            out.setdefault(_model_of(p, names), []).append(p.value)
    return out


def _sum_gauge(g: dict[str, list[float]] | None, model: str | None = None) -> float | None:
    if g is None:
        return None
    values = [v for m, vs in g.items() if model is None or m == model for v in vs]
    return sum(values) if values else None


def _max_gauge(g: dict[str, list[float]] | None, model: str | None = None) -> float | None:
    if g is None:
        return None
    values = [v for m, vs in g.items() if model is None or m == model for v in vs]
    return max(values) if values else None


def _mean_gauge(g: dict[str, list[float]] | None) -> float | None:
    values = [v for vs in (g or {}).values() for v in vs]
    return sum(values) / len(values) if values else None


def _kv_usage(expo: Exposition, names: KindNames, model: str | None, notes: list[str]) -> float | None:
    used = _gauge(expo, names, names.kv_blocks_used, notes, "block count")
    total = _gauge(expo, names, names.kv_blocks_max, notes, "block count")
    if used is not None and total is not None:
        if model is None:
            # Each model has its own pool: report the fullest one, like the max over engines.
            ratios = [_kv_ratio(used, total, m) for m in total]
            ratios = [r for r in ratios if r is not None]
            return max(ratios) if ratios else None
        return _kv_ratio(used, total, model)
    # Engines / TP ranks of one model: the fullest engine (max), since it preempts first.
    return _max_gauge(_gauge(expo, names, names.kv_usage, notes, "share of the KV cache"), model)


def _kv_ratio(used: dict[str, list[float]], total: dict[str, list[float]], model: str) -> float | None:
    u, t = _sum_gauge(used, model), _sum_gauge(total, model)
    if u is None or not t:
        return None
    return u / t


def _models(expo: Exposition, names: KindNames) -> tuple[str, ...]:
    if not names.model_labels:
        return ()
    seen: dict[str, None] = {}
    for name in expo.names:
        if not name.startswith(names.prefixes):
            continue
        for p in expo.lookup(Ref(name)):
            m = _model_of(p, names)
            if m:
                seen.setdefault(m, None)
    return tuple(seen)


def _engines(expo: Exposition, names: KindNames, model: str) -> int:
    for alts in (names.running, names.waiting, names.kv_usage):
        found = expo.first(alts)
        if found is not None:
            keys = {_rest(p, names) for p in found[1] if _model_of(p, names) == model}
            if keys:
                return len(keys)
    return 1


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return min(1.0, num / den)


def _summarize(
    expo: Exposition,
    names: KindNames,
    new: Reading,
    prev: Reading | None,
    base: Reading | None,
    tracker: MetricsTracker,
    now: float,
    wall: float,
) -> ServerMetrics:
    dt = now - prev.t if prev is not None else None

    def rate(role: str, model: str | None = None) -> float | None:
        if prev is None or not dt:
            return None
        return None if (d := _sum(_delta(new, prev, role), model)) is None else d / dt

    def window(role: str) -> float | None:
        return None if base is None else _sum(_delta(new, base, role))

    notes = new.notes
    running = _gauge(expo, names, names.running, notes, "request count")
    waiting = _gauge(expo, names, names.waiting, notes, "request count")
    preempt = new.counters.get("preemptions")

    hits, queries = window("prefix_hits"), window("prefix_queries")
    if queries is not None and names.prefix_queries_exclude_hits and hits is not None:
        queries += hits
    if "prefix_hits" in new.counters and "prefix_queries" in new.counters:
        prefix_rate = _ratio(hits, queries)
    else:
        prefix_rate = _mean_gauge(_gauge(expo, names, names.prefix_hit_rate_gauge, notes, "hit rate"))

    if "spec_drafted" in new.counters:
        spec_rate = _ratio(window("spec_accepted"), window("spec_drafted"))
    else:
        spec_rate = _mean_gauge(_gauge(expo, names, names.spec_accept_rate_gauge, notes, "acceptance rate"))

    outcomes: tuple[tuple[str, float], ...] = ()
    finished_per_s = None
    if "outcome" in new.counters:
        if base is not None:
            by_reason: dict[str, float] = {}
            for (_, reason, _), v in (_delta(new, base, "outcome") or {}).items():
                by_reason[reason] = by_reason.get(reason, 0.0) + v
            outcomes = tuple(sorted(by_reason.items()))
        finished_per_s = rate("outcome")

    per_model = []
    models = _models(expo, names)
    for m in models:
        per_model.append(
            ModelServerMetrics(
                model=m,
                engines=_engines(expo, names, m),
                requests_running=_sum_gauge(running, m),
                requests_waiting=_sum_gauge(waiting, m),
                kv_cache_usage=_kv_usage(expo, names, m, notes),
                preemptions_total=_sum(preempt, m),
                prompt_tokens_per_s=rate("prompt_tokens", m),
                generation_tokens_per_s=rate("generation_tokens", m),
            )
        )

    variant = next((v for v, marks in names.variants if any(expo.has(n) for n in marks)), None)
    return ServerMetrics(
        kind=names.kind,
        status="ok",
        variant=variant,
        models=models,
        requests_running=_sum_gauge(running),
        requests_waiting=_sum_gauge(waiting),
        requests_swapped=_sum_gauge(_gauge(expo, names, names.swapped, notes, "request count")),
        kv_cache_usage=_kv_usage(expo, names, None, notes),
        preemptions_total=_sum(preempt),
        preemptions_per_s=rate("preemptions"),
        prompt_tokens_per_s=rate("prompt_tokens"),
        generation_tokens_per_s=rate("generation_tokens"),
        finished_requests_per_s=finished_per_s,
        server_ttft_ms=tracker.latency("ttft", names.ttft, new, base),
        server_itl_ms=tracker.latency("itl", names.itl, new, base),
        server_tpot_ms=tracker.latency("tpot", names.tpot, new, base),
        server_e2e_ms=tracker.latency("e2e", names.e2e, new, base),
        server_queue_ms=tracker.latency("queue", names.queue, new, base),
        server_prefill_ms=tracker.latency("prefill", names.prefill, new, base),
        server_decode_ms=tracker.latency("decode", names.decode, new, base),
        server_inference_ms=tracker.latency("inference", names.inference, new, base),
        prefix_cache_hit_rate=prefix_rate,
        spec_decode_acceptance_rate=spec_rate,
        outcomes=outcomes,
        window_s=None if base is None else now - base.t,
        restarted=tracker.restarted_recently(now),
        restart_count=tracker.restart_count,
        last_restart_time=tracker.last_restart_time,
        per_model=tuple(per_model),
        scraped_at=wall,
        notes=tuple(notes),
        ttft_intervals=tracker.ttft_intervals(names.ttft),
        generation_tokens_total=None if "generation_tokens" in new.spoiled else _sum(new.counters.get("generation_tokens")),
    )
