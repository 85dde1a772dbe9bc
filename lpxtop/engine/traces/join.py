"""The join: lpxtop's own requests and the server's spans, matched by trace id, into chain windows.

Two sides arrive in either order, from two threads: the engine notes each request it sent
(`note_request`, when the request has ended and its client TTFT is known), the receiver hands over the
segments of the spans it read (`add_segments`). vLLM batches its spans (up to 5 s late by default), and
a fast receiver may see a span before the client has finished reading the stream, so both sides wait
for the other, each in a bounded store, for at most `wait_s`:

- a request whose span comes within the wait is joined: its segments enter its endpoint's window;
- a request whose wait ends unjoined is counted with the reason: `no_span`, `receiver_dropped` (the
  receiver dropped spans while it waited: rate, size, garbage), `span_without_latency_attributes` (spans
  came for its trace, none that a reader understood), `store_full` (pushed out by newer requests);
- a span no request claims within the wait is one of the server's other requests (a load test, real
  users): like every span with segments, it is already in the population window of its source.

A trace whose spans come in pieces (SGLang's stages) is joined once `settle_s` has passed since its
first piece, with what came. Every store and window is bounded in count and age; all methods are
thread-safe and do O(1) work per request or span (plus sorted-array upkeep), so the probe loop's call
costs microseconds.
"""

from __future__ import annotations

import threading
import time
from array import array
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from lpxtop.engine.traces.spans import merge
from lpxtop.engine.window import DEFAULT_MAX_SAMPLES, DEFAULT_WINDOW_S, insert_sorted, remove_sorted
from lpxtop.model.chain import ChainSummary, JoinedRequest, PopulationSummary, SpanSegments
from lpxtop.model.probe import Percentiles
from lpxtop.numbers import finite_or_none

DEFAULT_WAIT_S = 30.0  # how long a request waits for its span, and a span for its request
SETTLE_S = 2.0  # a trace in pieces is joined this long after its first piece
MAX_PENDING = 4096  # requests awaiting their span
MAX_ORPHANS = 8192  # spans awaiting their request (most are other users' and expire)
MAX_POPULATION = 20_000  # span segments per source in the population window
MAX_SOURCES = 32
MAX_RECENT = 64  # joined requests kept per window for the per-request view
JOINED_MEMORY = 8192  # trace ids already joined, to count late duplicates instead of re-joining

_CHAIN_COLUMNS = ("server_ttft_ms", "queue_ms", "prefill_ms", "decode_ms", "outside_ms", "to_server_ms")
_POPULATION_COLUMNS = ("queue_ms", "prefill_ms", "decode_ms")


class SpanSink(Protocol):
    """Where a receiver puts what it read: TraceJoin, or the pipe to it from a receiver's own process."""

    def add_segments(self, readings: Iterable[SpanSegments]) -> None: ...

    def note_receiver_drop(self, spans: int = 1) -> None: ...


@dataclass
class _Pending:
    trace_id: str
    endpoint: str
    kind: str
    sent_wall_ns: int
    client_ttft_ms: float | None
    client_e2e_ms: float | None
    same_host: bool
    tag: str | None
    noted: float  # monotonic
    drops_at_note: int
    segments: SpanSegments | None = None
    saw_spans: bool = False


@dataclass
class _Orphan:
    segments: SpanSegments
    received: float  # monotonic, of the first piece


class _Columns:
    """Sorted arrays of some measures over a set of records, kept up to date as records come and go."""

    def __init__(self, names: Iterable[str]) -> None:
        self.values: dict[str, array[float]] = {name: array("d") for name in names}

    def change(self, record: object, insert: bool) -> None:
        op = insert_sorted if insert else remove_sorted
        for name, values in self.values.items():
            value = finite_or_none(getattr(record, name))
            if value is not None:
                op(values, value)

    def percentiles(self, name: str) -> Percentiles | None:
        return Percentiles.of_sorted(self.values[name])


@dataclass
class _ChainWindow:
    """One endpoint's (and kind's) joined requests and unjoined reasons over the last `window_s`."""

    window_s: float
    max_samples: int
    joined: deque[JoinedRequest] = field(default_factory=deque)
    unjoined: deque[tuple[float, str]] = field(default_factory=deque)  # (wall time, reason)
    columns: _Columns = field(default_factory=lambda: _Columns(_CHAIN_COLUMNS))
    source: str | None = None  # the span source its requests were joined to (the last one)

    def add(self, request: JoinedRequest) -> None:
        if len(self.joined) >= self.max_samples:
            self.columns.change(self.joined.popleft(), insert=False)
        self.joined.append(request)
        self.columns.change(request, insert=True)

    def add_unjoined(self, wall: float, reason: str) -> None:
        if len(self.unjoined) >= self.max_samples:
            self.unjoined.popleft()
        self.unjoined.append((wall, reason))

    def prune(self, now: float) -> None:
        horizon = now - self.window_s
        while self.joined and self.joined[0].wall_time < horizon:
            self.columns.change(self.joined.popleft(), insert=False)
        while self.unjoined and self.unjoined[0][0] < horizon:
            self.unjoined.popleft()


@dataclass
class _PopulationWindow:
    window_s: float
    entries: deque[tuple[float, SpanSegments]] = field(default_factory=deque)  # (wall time received, segments)
    columns: _Columns = field(default_factory=lambda: _Columns(_POPULATION_COLUMNS))

    def add(self, wall: float, segments: SpanSegments) -> None:
        if len(self.entries) >= MAX_POPULATION:
            self.columns.change(self.entries.popleft()[1], insert=False)
        self.entries.append((wall, segments))
        self.columns.change(segments, insert=True)

    def prune(self, now: float) -> None:
        horizon = now - self.window_s
        while self.entries and self.entries[0][0] < horizon:
            self.columns.change(self.entries.popleft()[1], insert=False)

    def summary(self) -> PopulationSummary:
        c = self.columns
        return PopulationSummary(count=len(self.entries), queue_ms=c.percentiles("queue_ms"),
                                 prefill_ms=c.percentiles("prefill_ms"), decode_ms=c.percentiles("decode_ms"))


class TraceJoin:
    """lpxtop's requests joined to the server's spans by trace id; chain windows per endpoint and kind.

    The engine calls `note_request` for each request it sent (a probe, an agent call, a load request);
    the receiver calls `add_segments` with what it read and `note_receiver_drop` when it drops spans;
    readers call `snapshot(endpoint)`. `add_listener(fn)` hands each JoinedRequest over as it is joined
    (to the recorder, the load view's per-step split), outside the lock.
    """

    def __init__(self, *, window_s: float = DEFAULT_WINDOW_S, max_samples: int = DEFAULT_MAX_SAMPLES,
                 wait_s: float = DEFAULT_WAIT_S, settle_s: float = SETTLE_S, max_pending: int | None = None,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.window_s = window_s
        # a load test noting 1,000 requests a second against spans batched every 5 s needs more than the default
        self.max_pending = max_pending
        self.max_samples = max_samples
        self.wait_s = wait_s
        self.settle_s = settle_s
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._orphans: OrderedDict[str, _Orphan] = OrderedDict()
        self._joined_ids: OrderedDict[str, None] = OrderedDict()
        self._settling: OrderedDict[str, float] = OrderedDict()  # pending traces in pieces -> first piece
        self._windows: dict[tuple[str, str], _ChainWindow] = {}
        self._population: OrderedDict[str, _PopulationWindow] = OrderedDict()
        self._listeners: list[Callable[[JoinedRequest], None]] = []
        self._receiver_drops = 0
        self.counts: Counter[str] = Counter()  # joined, unjoined, duplicate_segments, late_spans, ...

    # -- the engine's side ------------------------------------------------------------------------

    def note_request(self, trace_id: str, *, endpoint: str, sent_wall_ns: int, client_ttft_ms: float | None,
                     client_e2e_ms: float | None = None, kind: str = "probe", same_host: bool = False,
                     tag: str | None = None) -> None:
        """Remember one request lpxtop sent (called when it ended). `same_host`: the endpoint is this
        machine, so span start − `sent_wall_ns` (to the server) compares two readings of one clock."""
        trace_id = trace_id.lower()
        joined: list[JoinedRequest] = []
        with self._lock:
            now = self._clock()
            if trace_id in self._pending or trace_id in self._joined_ids:
                self.counts["duplicate_requests"] += 1
                return
            pending = _Pending(trace_id, endpoint, kind, sent_wall_ns, finite_or_none(client_ttft_ms),
                               finite_or_none(client_e2e_ms), same_host, tag, now, self._receiver_drops)
            orphan = self._orphans.pop(trace_id, None)
            if orphan is not None:
                pending.segments, pending.saw_spans = orphan.segments, True
                if orphan.segments.complete and orphan.segments.has_latency:
                    joined.append(self._join(pending))
                elif not orphan.segments.complete:
                    self._settling[trace_id] = orphan.received
            if not joined:
                self._pending[trace_id] = pending
                while len(self._pending) > (self.max_pending or MAX_PENDING):
                    evicted = self._pending.popitem(last=False)[1]
                    self._settling.pop(evicted.trace_id, None)
                    self._give_up(evicted, "store_full")
            joined += self._expire(now)
        self._tell(joined)

    # -- the receiver's side ----------------------------------------------------------------------

    def add_segments(self, readings: Iterable[SpanSegments]) -> None:
        """Take the segments of spans the receiver read (any thread; a few thousand at a time at most)."""
        joined: list[JoinedRequest] = []
        with self._lock:
            now, wall = self._clock(), self._wall()
            for segments in readings:
                if segments.has_latency:
                    self._population_window(segments.source).add(wall, segments)
                trace_id = segments.trace_id
                pending = self._pending.get(trace_id)
                if pending is not None:
                    pending.saw_spans = True
                    if pending.segments is None:
                        pending.segments = segments
                        if not segments.complete:
                            self._settling[trace_id] = now
                    else:
                        pending.segments, dup = merge(pending.segments, segments)
                        self.counts["duplicate_segments"] += dup
                    if pending.segments.complete and pending.segments.has_latency:
                        del self._pending[trace_id]
                        self._settling.pop(trace_id, None)
                        joined.append(self._join(pending))
                elif trace_id in self._joined_ids:
                    self.counts["late_spans"] += 1  # a second span for a trace already joined: not re-joined
                else:
                    orphan = self._orphans.get(trace_id)
                    if orphan is None:
                        self._orphans[trace_id] = _Orphan(segments, now)
                        while len(self._orphans) > MAX_ORPHANS:
                            self._orphans.popitem(last=False)
                    else:
                        orphan.segments, dup = merge(orphan.segments, segments)
                        self.counts["duplicate_segments"] += dup
            joined += self._expire(now)
        self._tell(joined)

    def note_receiver_drop(self, spans: int = 1) -> None:
        """The receiver dropped spans (or a whole body): requests awaiting a span may be among them."""
        with self._lock:
            self._receiver_drops += max(1, spans)

    # -- readers ------------------------------------------------------------------------------------

    def snapshot(self, endpoint: str, kind: str = "probe") -> ChainSummary:
        """The endpoint's chain over the window (ChainSummary()'s zeros when nothing was noted for it)."""
        joined: list[JoinedRequest] = []
        with self._lock:
            joined += self._expire(self._clock())
            wall = self._wall()
            window = self._windows.get((endpoint, kind))
            pending = sum(1 for p in self._pending.values() if p.endpoint == endpoint and p.kind == kind)
            if window is None:
                summary = ChainSummary(probes_pending=pending)
            else:
                window.prune(wall)
                population = self._population.get(window.source) if window.source else None
                if population is not None:
                    population.prune(wall)
                c = window.columns
                summary = ChainSummary(
                    probes_joined=len(window.joined), probes_unjoined=len(window.unjoined), probes_pending=pending,
                    unjoined_reasons=dict(Counter(reason for _, reason in window.unjoined)),
                    server_ttft_ms=c.percentiles("server_ttft_ms"), queue_ms=c.percentiles("queue_ms"),
                    prefill_ms=c.percentiles("prefill_ms"), decode_ms=c.percentiles("decode_ms"),
                    outside_ms=c.percentiles("outside_ms"), to_server_ms=c.percentiles("to_server_ms"),
                    all_requests=population.summary() if population is not None else PopulationSummary(),
                    recent=tuple(list(window.joined)[-MAX_RECENT:]),
                )
        self._tell(joined)
        return summary

    def population(self, source: str) -> PopulationSummary:
        """Every request one span source described over the window (see resource_key in otlp.py)."""
        with self._lock:
            window = self._population.get(source)
            if window is None:
                return PopulationSummary()
            window.prune(self._wall())
            return window.summary()

    def sources(self) -> list[str]:
        with self._lock:
            return list(self._population)

    def pending(self, endpoint: str | None = None) -> int:
        """Requests still awaiting their span (of one endpoint, or all): what `once` waits for."""
        with self._lock:
            return sum(1 for p in self._pending.values() if endpoint is None or p.endpoint == endpoint)

    def add_listener(self, listener: Callable[[JoinedRequest], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    def reset(self) -> None:
        with self._lock:
            self._pending.clear()
            self._orphans.clear()
            self._joined_ids.clear()
            self._settling.clear()
            self._windows.clear()
            self._population.clear()
            self.counts.clear()

    # -- inside the lock ------------------------------------------------------------------------------

    def _join(self, p: _Pending) -> JoinedRequest:
        s = p.segments
        assert s is not None
        to_server = None
        if p.same_host and s.start_wall_ns is not None:
            to_server = (s.start_wall_ns - p.sent_wall_ns) / 1e6
        outside = None
        if p.client_ttft_ms is not None and s.server_ttft_ms is not None:
            outside = p.client_ttft_ms - s.server_ttft_ms
        request = JoinedRequest(
            trace_id=p.trace_id, endpoint=p.endpoint, kind=p.kind, sent_wall_ns=p.sent_wall_ns,
            client_ttft_ms=p.client_ttft_ms, client_e2e_ms=p.client_e2e_ms, server=s.server,
            to_server_ms=to_server, queue_ms=s.queue_ms, prefill_ms=s.prefill_ms, decode_ms=s.decode_ms,
            server_ttft_ms=s.server_ttft_ms, server_e2e_ms=s.server_e2e_ms, outside_ms=outside, tag=p.tag,
        )
        window = self._window(p.endpoint, p.kind)
        window.source = s.source
        window.add(request)
        self._remember_joined(p.trace_id)
        self.counts["joined"] += 1
        return request

    def _give_up(self, p: _Pending, reason: str) -> None:
        self._window(p.endpoint, p.kind).add_unjoined(p.sent_wall_ns / 1e9, reason)
        self._remember_joined(p.trace_id)
        self.counts["unjoined"] += 1

    def _expire(self, now: float) -> list[JoinedRequest]:
        joined: list[JoinedRequest] = []
        # pieces of a trace that have settled (few: only servers that send a request in pieces)
        while self._settling:
            trace_id, first_piece = next(iter(self._settling.items()))
            if now - first_piece < self.settle_s:
                break
            del self._settling[trace_id]
            p = self._pending.pop(trace_id, None)
            if p is None:
                continue
            if p.segments is not None and p.segments.has_latency:
                joined.append(self._join(p))
            else:
                self._give_up(p, "span_without_latency_attributes")
        while self._pending:
            p = next(iter(self._pending.values()))
            if now - p.noted < self.wait_s:
                break
            del self._pending[p.trace_id]
            self._settling.pop(p.trace_id, None)
            if p.segments is not None and p.segments.has_latency:
                joined.append(self._join(p))
            elif p.saw_spans:
                self._give_up(p, "span_without_latency_attributes")
            elif self._receiver_drops > p.drops_at_note:
                self._give_up(p, "receiver_dropped")
            else:
                self._give_up(p, "no_span")
        while self._orphans:
            first = next(iter(self._orphans.values()))
            if now - first.received < self.wait_s:
                break
            self._orphans.popitem(last=False)
        return joined

    def _window(self, endpoint: str, kind: str) -> _ChainWindow:
        key = (endpoint, kind)
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = _ChainWindow(self.window_s, self.max_samples)
        return window

    def _population_window(self, source: str) -> _PopulationWindow:
        window = self._population.get(source)
        if window is None:
            window = self._population[source] = _PopulationWindow(self.window_s)
            while len(self._population) > MAX_SOURCES:
                self._population.popitem(last=False)
        return window

    def _remember_joined(self, trace_id: str) -> None:
        self._joined_ids[trace_id] = None
        while len(self._joined_ids) > JOINED_MEMORY:
            self._joined_ids.popitem(last=False)

    def _tell(self, joined: list[JoinedRequest]) -> None:
        if not joined:
            return
        listeners = list(self._listeners)
        for request in joined:
            for listener in listeners:
                listener(request)
