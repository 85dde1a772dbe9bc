"""The join: lpxtop's own requests and the server's spans, matched by trace id, into chain windows.

Two sides arrive in either order, from two threads: the engine notes each request it sent
(`note_request`, when the request has ended and its client TTFT is known), the receiver hands over the
segments of the spans it read (`add_segments`). vLLM batches its spans (up to 5 s late by default), and
a fast receiver may see a span before the client has finished reading the stream, so both sides wait
for the other, each in a bounded store, for at most `wait_s`:

- a request whose span comes within the wait is joined: its segments enter its endpoint's window;
- a request whose wait ends unjoined is counted with the reason: `no_span`, `receiver_dropped` (the
  receiver dropped spans while it waited: rate, size, garbage), `span_without_latency_attributes` (spans
  came for its trace, none that a reader understood), `store_full` (pushed out by newer requests),
  `span_parent_unknown` (spans came for a trace shared by several requests, none under this one's span);
- a span no request claims within the wait is one of the server's other requests (a load test, real
  users): like every span with segments, it is already in the population window of its source.

Requests are told apart by trace id and, where several share one trace (an agent step: one trace, a
span id per call), by span id: a server span whose parent is a request's span (the `traceparent` it
was sent with), or a descendant of such a span, belongs to that request. A request alone in its trace
(a probe, a load request) takes every span of the trace, whatever its parent (a proxy's span between).

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

from lpxtop.engine.traces.limits import DEFAULT_WAIT_S
from lpxtop.engine.traces.spans import merge
from lpxtop.engine.window import DEFAULT_MAX_SAMPLES, DEFAULT_WINDOW_S, insert_sorted, remove_sorted
from lpxtop.model.chain import ChainSummary, JoinedRequest, PopulationSummary, SpanSegments, UnjoinedRequest
from lpxtop.model.probe import Percentiles
from lpxtop.numbers import finite_or_none

SETTLE_S = 2.0  # a trace in pieces is joined this long after its first piece
MAX_PENDING = 4096  # requests awaiting their span
MAX_ORPHANS = 8192  # spans awaiting their request (most are other users' and expire)
MAX_POPULATION = 20_000  # span segments per source in the population window
MAX_SOURCES = 32
MAX_RECENT = 64  # joined requests kept per window for the per-request view
JOINED_MEMORY = 8192  # requests already settled, to count late duplicates instead of re-joining
MAX_PIECES = 64  # spans kept per trace awaiting their request

_CHAIN_COLUMNS = ("server_ttft_ms", "queue_ms", "prefill_ms", "decode_ms", "outside_ms", "to_server_ms")
_POPULATION_COLUMNS = ("queue_ms", "prefill_ms", "decode_ms")


class SpanSink(Protocol):
    """Where a receiver puts what it read: TraceJoin, or the pipe to it from a receiver's own process."""

    def add_segments(self, readings: Iterable[SpanSegments]) -> None: ...

    def note_receiver_drop(self, spans: int = 1) -> None: ...


@dataclass(frozen=True)
class RequestNote:
    """One request lpxtop sent, as the join is told of it (TraceJoin.note_requests)."""

    trace_id: str
    endpoint: str
    sent_wall_ns: int
    client_ttft_ms: float | None
    client_e2e_ms: float | None = None
    kind: str = "probe"
    same_host: bool | None = None  # None: TraceJoin.same_host_of(endpoint) says, when the span comes
    tag: str | None = None
    span_id: str | None = None  # its traceparent's span id: told apart from other requests of its trace
    # lpxtop itself was late while it ran (engine/probe/clientlimit.py): joined for the server's figures, but
    # its TTFT holds lpxtop's delay, so no "outside" or "to server" is taken from it
    client_limited: bool = False


@dataclass
class _Pending:
    note: RequestNote
    trace_id: str
    span_id: str
    noted: float  # monotonic
    drops_at_note: int
    alone: bool  # the only request of its trace: every span of the trace is its own
    segments: SpanSegments | None = None
    saw_spans: bool = False
    owned: set[str] = field(default_factory=set)  # span ids of its server spans (their children are its too)

    @property
    def key(self) -> tuple[str, str]:
        return self.trace_id, self.span_id


@dataclass
class _Orphan:
    pieces: list[SpanSegments]
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


Outcome = JoinedRequest | UnjoinedRequest


class TraceJoin:
    """lpxtop's requests joined to the server's spans by trace id; chain windows per endpoint and kind.

    The engine calls `note_request` (or `note_requests` for the calls of one trace) for each request it
    sent (a probe, an agent call, a load request); the receiver calls `add_segments` with what it read
    and `note_receiver_drop` when it drops spans; readers call `snapshot(endpoint)`. `add_listener(fn)`
    hands each request over as it settles, a JoinedRequest or an UnjoinedRequest (to the engine's
    listeners: the recorder, the exporter; the load view's per-step split), outside the lock;
    `add_population_listener(fn)` each span's segments as they come.
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
        self._pending: OrderedDict[tuple[str, str], _Pending] = OrderedDict()
        self._by_trace: dict[str, list[tuple[str, str]]] = {}  # trace id -> its pending requests' keys
        self._pending_by: Counter[tuple[str, str]] = Counter()  # (endpoint, kind) -> requests pending
        self._orphans: OrderedDict[str, _Orphan] = OrderedDict()  # trace id -> spans no request has claimed
        self._settled: OrderedDict[tuple[str, str], None] = OrderedDict()  # requests joined or given up on
        self._settled_traces: OrderedDict[str, None] = OrderedDict()
        self._settling: OrderedDict[tuple[str, str], float] = OrderedDict()  # requests in pieces -> first piece
        self._windows: dict[tuple[str, str], _ChainWindow] = {}
        self._population: OrderedDict[str, _PopulationWindow] = OrderedDict()
        self._listeners: list[Callable[[Outcome], None]] = []
        self._population_listeners: list[Callable[[SpanSegments], None]] = []
        self._receiver_drops = 0
        self.counts: Counter[str] = Counter()  # joined, unjoined, duplicate_segments, late_spans, ...
        # whether an endpoint is this host, for requests noted without saying (the engine's feed knows by name)
        self.same_host_of: Callable[[str], bool] = lambda endpoint: False

    # -- the engine's side ------------------------------------------------------------------------

    def note_request(self, trace_id: str, *, endpoint: str, sent_wall_ns: int, client_ttft_ms: float | None,
                     client_e2e_ms: float | None = None, kind: str = "probe", same_host: bool = False,
                     tag: str | None = None, span_id: str | None = None) -> None:
        """Remember one request lpxtop sent (called when it ended), alone in its trace. `same_host`: the
        endpoint is this machine, so span start − `sent_wall_ns` (to the server) compares two readings of
        one clock."""
        self.note_requests([RequestNote(trace_id, endpoint, sent_wall_ns, client_ttft_ms, client_e2e_ms, kind,
                                        same_host, tag, span_id)])

    def note_requests(self, notes: Iterable[RequestNote]) -> None:
        """Remember requests; those that share a trace id (an agent step's calls) are told apart by span id,
        so note them together: a trace's set of requests is known once they are noted."""
        notes = list(notes)
        per_trace = Counter(n.trace_id.lower() for n in notes)
        settled: list[Outcome] = []
        with self._lock:
            now = self._clock()
            traces: list[str] = []
            for n in notes:
                trace_id = n.trace_id.lower()
                key = (trace_id, (n.span_id or "").lower())
                if key in self._pending or key in self._settled:
                    self.counts["duplicate_requests"] += 1
                    continue
                p = _Pending(n, trace_id, key[1], now, self._receiver_drops, alone=per_trace[trace_id] == 1)
                self._pending[key] = p
                self._pending_by[(n.endpoint, n.kind)] += 1
                self._by_trace.setdefault(trace_id, []).append(key)
                if trace_id not in traces:
                    traces.append(trace_id)
            while len(self._pending) > (self.max_pending or MAX_PENDING):
                evicted = next(iter(self._pending.values()))
                self._remove(evicted)
                settled.append(self._give_up(evicted, "store_full"))
            for trace_id in traces:
                orphan = self._orphans.pop(trace_id, None)
                if orphan is not None:
                    for piece in orphan.pieces:
                        settled += self._attribute(piece, now, orphan.received)
            settled += self._expire(now)
        self._tell(settled)

    # -- the receiver's side ----------------------------------------------------------------------

    def add_segments(self, readings: Iterable[SpanSegments]) -> None:
        """Take the segments of spans the receiver read (any thread; a few thousand at a time at most)."""
        settled: list[Outcome] = []
        population: list[SpanSegments] = []
        with self._lock:
            now, wall = self._clock(), self._wall()
            for segments in readings:
                if segments.has_latency:
                    self._population_window(segments.source).add(wall, segments)
                    if self._population_listeners:
                        population.append(segments)
                settled += self._attribute(segments, now, now)
            settled += self._expire(now)
        for listener in self._population_listeners if population else ():
            for segments in population:
                listener(segments)
        self._tell(settled)

    def note_receiver_drop(self, spans: int = 1) -> None:
        """The receiver dropped spans (or a whole body): requests awaiting a span may be among them."""
        with self._lock:
            self._receiver_drops += max(1, spans)

    # -- readers ------------------------------------------------------------------------------------

    def snapshot(self, endpoint: str, kind: str = "probe", now: float | None = None) -> ChainSummary:
        """The endpoint's chain over the window ending at wall time `now` (default: the clock's);
        ChainSummary()'s zeros when nothing was noted for it."""
        settled: list[Outcome] = []
        with self._lock:
            settled += self._expire(self._clock())
            wall = self._wall() if now is None else now
            window = self._windows.get((endpoint, kind))
            pending = self._pending_by[(endpoint, kind)]
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
        self._tell(settled)
        return summary

    def joined(self, endpoint: str, kind: str = "probe") -> tuple[JoinedRequest, ...]:
        """Every joined request of the endpoint's window (oldest first), as the last snapshot pruned it."""
        with self._lock:
            window = self._windows.get((endpoint, kind))
            return tuple(window.joined) if window is not None else ()

    def known(self, endpoint: str) -> bool:
        """Whether any request of `endpoint` was noted (or settled into its windows)."""
        with self._lock:
            return any(e == endpoint for e, _ in self._windows) or \
                any(p.note.endpoint == endpoint for p in self._pending.values())

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

    def pending(self, endpoint: str | None = None, kind: str | None = None) -> int:
        """Requests still awaiting their span (of one endpoint, or all): what `once` waits for."""
        with self._lock:
            return sum(1 for p in self._pending.values()
                       if (endpoint is None or p.note.endpoint == endpoint) and (kind is None or p.note.kind == kind))

    def give_up_pending(self, reason: str = "deadline") -> int:
        """Settle every request still awaiting its span now, with `reason` (or with the segments it has, if
        some came): `once` at its deadline. Returns how many were given up on."""
        settled: list[Outcome] = []
        with self._lock:
            for p in list(self._pending.values()):
                self._remove(p)
                if p.segments is not None and p.segments.has_latency:
                    settled.append(self._join(p))
                else:
                    settled.append(self._give_up(p, reason))
        self._tell(settled)
        return sum(1 for s in settled if isinstance(s, UnjoinedRequest))

    def add_listener(self, listener: Callable[[Outcome], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    def add_population_listener(self, listener: Callable[[SpanSegments], None]) -> None:
        """`listener(segments)` for every span with segments (all requests, lpxtop's and others'), outside the lock."""
        with self._lock:
            self._population_listeners.append(listener)

    def add_outcome(self, outcome: Outcome, source: str | None = None) -> None:
        """Put a request settled elsewhere (a recording's) into its window, as if joined here (replay)."""
        with self._lock:
            window = self._window(outcome.endpoint, outcome.kind)
            if isinstance(outcome, JoinedRequest):
                window.add(outcome)
                window.source = source or window.source
            else:
                window.add_unjoined(outcome.wall_time, outcome.reason)

    def reset(self) -> None:
        with self._lock:
            self._pending.clear()
            self._pending_by.clear()
            self._by_trace.clear()
            self._orphans.clear()
            self._settled.clear()
            self._settled_traces.clear()
            self._settling.clear()
            self._windows.clear()
            self._population.clear()
            self.counts.clear()

    # -- inside the lock ------------------------------------------------------------------------------

    def _attribute(self, piece: SpanSegments, now: float, received: float) -> list[Outcome]:
        """One span (or piece of one) to the request it belongs to, or to the orphans of its trace."""
        trace_id = piece.trace_id
        keys = self._by_trace.get(trace_id)
        target: _Pending | None = None
        if keys:
            first = self._pending[keys[0]]
            target = first if len(keys) == 1 and first.alone else self._owner(keys, piece.parent_span_id)
        if target is None:
            parent = piece.parent_span_id
            if (not keys and trace_id in self._settled_traces) or (parent and (trace_id, parent) in self._settled):
                self.counts["late_spans"] += 1  # a span for a request already settled: not joined again
                return []
            orphan = self._orphans.get(trace_id)
            if orphan is None:
                self._orphans[trace_id] = _Orphan([piece], received)
                while len(self._orphans) > MAX_ORPHANS:
                    self._orphans.popitem(last=False)
            elif len(orphan.pieces) < MAX_PIECES:
                orphan.pieces.append(piece)
            else:
                self.counts["pieces_dropped"] += 1
            return []
        settled: list[Outcome] = []
        target.saw_spans = True
        if piece.span_id:
            target.owned.add(piece.span_id)
        if target.segments is None:
            target.segments = piece
            if not piece.complete:
                self._settling[target.key] = now
        else:
            target.segments, dup = merge(target.segments, piece)
            self.counts["duplicate_segments"] += dup
        if target.segments.complete and target.segments.has_latency:
            self._remove(target)
            settled.append(self._join(target))
        if not target.alone and piece.span_id and trace_id in self._orphans:
            # spans of this trace that came first may hang under the span just claimed
            orphan = self._orphans.pop(trace_id)
            for waiting in orphan.pieces:
                settled += self._attribute(waiting, now, orphan.received)
        return settled

    def _owner(self, keys: list[tuple[str, str]], parent: str | None) -> _Pending | None:
        if not parent:
            return None
        for key in keys:
            p = self._pending[key]
            if p.span_id == parent or parent in p.owned:
                return p
        return None

    def _remove(self, p: _Pending) -> None:
        key = p.key
        if self._pending.pop(key, None) is not None:
            by = (p.note.endpoint, p.note.kind)
            self._pending_by[by] -= 1
            if self._pending_by[by] <= 0:
                del self._pending_by[by]
        self._settling.pop(key, None)
        keys = self._by_trace.get(p.trace_id)
        if keys is not None:
            if key in keys:
                keys.remove(key)
            if not keys:
                del self._by_trace[p.trace_id]

    def _join(self, p: _Pending) -> JoinedRequest:
        s, n = p.segments, p.note
        assert s is not None
        to_server = None
        client_ttft = finite_or_none(n.client_ttft_ms)
        same_host = n.same_host if n.same_host is not None else self.same_host_of(n.endpoint)
        if same_host and s.start_wall_ns is not None and not n.client_limited:
            to_server = (s.start_wall_ns - n.sent_wall_ns) / 1e6
        outside = None
        if client_ttft is not None and s.server_ttft_ms is not None and not n.client_limited:
            outside = client_ttft - s.server_ttft_ms
        request = JoinedRequest(
            trace_id=p.trace_id, endpoint=n.endpoint, kind=n.kind, sent_wall_ns=n.sent_wall_ns,
            client_ttft_ms=client_ttft, client_e2e_ms=finite_or_none(n.client_e2e_ms), server=s.server,
            to_server_ms=to_server, queue_ms=s.queue_ms, prefill_ms=s.prefill_ms, decode_ms=s.decode_ms,
            server_ttft_ms=s.server_ttft_ms, server_e2e_ms=s.server_e2e_ms, outside_ms=outside, tag=n.tag,
            span_id=p.span_id or None, client_limited=n.client_limited,
        )
        window = self._window(n.endpoint, n.kind)
        window.source = s.source
        window.add(request)
        self._remember(p)
        self.counts["joined"] += 1
        return request

    def _give_up(self, p: _Pending, reason: str) -> UnjoinedRequest:
        n = p.note
        self._window(n.endpoint, n.kind).add_unjoined(n.sent_wall_ns / 1e9, reason)
        self._remember(p)
        self.counts["unjoined"] += 1
        return UnjoinedRequest(trace_id=p.trace_id, endpoint=n.endpoint, kind=n.kind, sent_wall_ns=n.sent_wall_ns,
                               reason=reason, tag=n.tag, span_id=p.span_id or None)

    def _expire(self, now: float) -> list[Outcome]:
        settled: list[Outcome] = []
        # requests in pieces that have settled (few: only servers that send a request in pieces)
        while self._settling:
            key, first_piece = next(iter(self._settling.items()))
            if now - first_piece < self.settle_s:
                break
            del self._settling[key]
            p = self._pending.get(key)
            if p is None:
                continue
            self._remove(p)
            if p.segments is not None and p.segments.has_latency:
                settled.append(self._join(p))
            else:
                settled.append(self._give_up(p, "span_without_latency_attributes"))
        while self._pending:
            p = next(iter(self._pending.values()))
            if now - p.noted < self.wait_s:
                break
            self._remove(p)
            if p.segments is not None and p.segments.has_latency:
                settled.append(self._join(p))
            elif p.saw_spans:
                settled.append(self._give_up(p, "span_without_latency_attributes"))
            elif not p.alone and p.trace_id in self._orphans:
                settled.append(self._give_up(p, "span_parent_unknown"))
            elif self._receiver_drops > p.drops_at_note:
                settled.append(self._give_up(p, "receiver_dropped"))
            else:
                settled.append(self._give_up(p, "no_span"))
        while self._orphans:
            first = next(iter(self._orphans.values()))
            if now - first.received < self.wait_s:
                break
            self._orphans.popitem(last=False)
        return settled

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

    def _remember(self, p: _Pending) -> None:
        self._settled[p.key] = None
        while len(self._settled) > JOINED_MEMORY:
            self._settled.popitem(last=False)
        if p.alone or p.trace_id not in self._by_trace:
            self._settled_traces[p.trace_id] = None
            while len(self._settled_traces) > JOINED_MEMORY:
                self._settled_traces.popitem(last=False)

    def _tell(self, settled: list[Outcome]) -> None:
        if not settled:
            return
        listeners = list(self._listeners)
        for outcome in settled:
            for listener in listeners:
                listener(outcome)
