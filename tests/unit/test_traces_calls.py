"""The join's second key: an agent step's calls share one trace, each with its own span; a server span
belongs to the call whose span is its parent (or an ancestor). Settled requests reach the listeners, late
ones are counted, and `once` gives up on what is left at its deadline."""

from __future__ import annotations

import os

import pytest

from lpxtop.engine.traces.join import RequestNote, TraceJoin
from lpxtop.model.chain import JoinedRequest, SpanSegments, UnjoinedRequest
from tests.support.traces_data import new_trace_id

SENT_NS = 1_700_000_000 * 10**9


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(clock: Clock, **kw) -> TraceJoin:
    return TraceJoin(clock=clock, wall=lambda: 1_700_000_000.0 + clock.t - 1000.0, **kw)


def span_id() -> str:
    return os.urandom(8).hex()


def seg(trace_id: str, parent: str | None, *, own: str | None = None, queue=4.0, prefill=10.0, ttft=16.0,
        complete=True, server="vllm") -> SpanSegments:
    return SpanSegments(trace_id=trace_id, server=server, source="vllm#a", start_wall_ns=SENT_NS + 1_000_000,
                        queue_ms=queue, prefill_ms=prefill, decode_ms=100.0 if complete else None,
                        server_ttft_ms=ttft if complete else None, complete=complete, span_id=own or span_id(),
                        parent_span_id=parent)


def calls(trace_id: str, spans: list[str], ttfts=(20.0, 30.0)) -> list[RequestNote]:
    return [RequestNote(trace_id, "e", SENT_NS + i * 10**8, ttft, 100.0, kind="agent", tag=f"call{i + 1}",
                        span_id=s, same_host=True) for i, (s, ttft) in enumerate(zip(spans, ttfts))]


@pytest.mark.parametrize("spans_first", [False, True])
@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_each_call_of_a_step_gets_the_span_under_its_own_span(spans_first, order):
    clock = Clock()
    j = make(clock)
    t = new_trace_id()
    c1, c2 = span_id(), span_id()
    spans = [seg(t, c1, queue=1.0, ttft=11.0), seg(t, c2, queue=2.0, ttft=22.0)]
    seen: list = []
    j.add_listener(seen.append)
    if spans_first:
        j.add_segments([spans[i] for i in order])
        j.note_requests(calls(t, [c1, c2]))
    else:
        j.note_requests(calls(t, [c1, c2]))
        j.add_segments([spans[i] for i in order])
    by_tag = {r.tag: r for r in seen}
    assert set(by_tag) == {"call1", "call2"} and all(isinstance(r, JoinedRequest) for r in seen)
    assert by_tag["call1"].queue_ms == 1.0 and by_tag["call1"].outside_ms == pytest.approx(9.0)
    assert by_tag["call2"].queue_ms == 2.0 and by_tag["call2"].outside_ms == pytest.approx(8.0)
    assert by_tag["call1"].span_id == c1 and by_tag["call2"].trace_id == t
    assert j.snapshot("e", "agent").probes_joined == 2 and j.pending() == 0


def test_a_servers_spans_in_pieces_under_a_calls_span_are_that_calls():
    """SGLang's stages hang under its root span, whose parent is the call's: ancestry decides."""
    clock = Clock()
    j = make(clock, settle_s=2.0)
    t = new_trace_id()
    c1, c2 = span_id(), span_id()
    root1, root2 = span_id(), span_id()
    j.note_requests(calls(t, [c1, c2]))
    # a stage of call 2 before its root: it waits, then follows the root to call 2
    j.add_segments([seg(t, root2, queue=9.0, prefill=None, complete=False, server="sglang")])
    j.add_segments([seg(t, c2, own=root2, queue=None, prefill=None, complete=False, server="sglang"),
                    seg(t, c1, own=root1, queue=None, prefill=None, complete=False, server="sglang"),
                    seg(t, root1, queue=3.0, prefill=None, complete=False, server="sglang"),
                    seg(t, root1, queue=None, prefill=7.0, complete=False, server="sglang")])
    clock.t += 3.0
    joined = {r.tag: r for r in j.snapshot("e", "agent").recent}
    assert joined["call1"].queue_ms == 3.0 and joined["call1"].prefill_ms == 7.0
    assert joined["call2"].queue_ms == 9.0 and joined["call2"].prefill_ms is None


def test_a_span_of_a_shared_trace_under_no_known_span_leaves_its_call_unjoined_with_the_reason():
    clock = Clock()
    j = make(clock, wait_s=5.0)
    t = new_trace_id()
    c1, c2 = span_id(), span_id()
    j.note_requests(calls(t, [c1, c2]))
    j.add_segments([seg(t, c1), seg(t, span_id())])  # the second hangs under a span lpxtop never sees
    clock.t += 6.0
    summary = j.snapshot("e", "agent")
    assert summary.probes_joined == 1 and summary.unjoined_reasons == {"span_parent_unknown": 1}


def test_a_request_alone_in_its_trace_takes_its_span_whatever_the_parent():
    """A proxy's span between lpxtop and the server: the probe's trace has one request, so its span is its."""
    clock = Clock()
    j = make(clock)
    t = new_trace_id()
    j.note_request(t, endpoint="e", sent_wall_ns=SENT_NS, client_ttft_ms=20.0, span_id=span_id())
    j.add_segments([seg(t, span_id())])
    assert j.snapshot("e").probes_joined == 1


def test_a_late_span_of_a_joined_call_is_counted_not_given_to_its_sibling():
    clock = Clock()
    j = make(clock)
    t = new_trace_id()
    c1, c2 = span_id(), span_id()
    j.note_requests(calls(t, [c1, c2]))
    j.add_segments([seg(t, c1)])
    j.add_segments([seg(t, c1, queue=500.0)])  # a duplicate for call 1 while call 2 still waits
    j.add_segments([seg(t, c2, queue=2.0)])
    joined = {r.tag: r for r in j.snapshot("e", "agent").recent}
    assert joined["call2"].queue_ms == 2.0 and j.counts["late_spans"] == 1


def test_give_up_pending_settles_every_request_with_the_reason_and_tells_the_listeners():
    clock = Clock()
    j = make(clock)
    seen: list = []
    j.add_listener(seen.append)
    waiting = [new_trace_id() for _ in range(3)]
    for t in waiting:
        j.note_request(t, endpoint="e", sent_wall_ns=SENT_NS, client_ttft_ms=20.0)
    assert j.give_up_pending("deadline") == 3
    assert j.pending() == 0 and j.snapshot("e").unjoined_reasons == {"deadline": 3}
    assert [type(o) for o in seen] == [UnjoinedRequest] * 3 and {o.trace_id for o in seen} == set(waiting)


def test_population_listeners_see_every_span_with_segments():
    clock = Clock()
    j = make(clock)
    spans: list = []
    j.add_population_listener(spans.append)
    j.add_segments([seg(new_trace_id(), None) for _ in range(4)] + [seg(new_trace_id(), None, queue=None,
                                                                        prefill=None, complete=False)])
    assert len(spans) == 4


def test_a_client_limited_request_is_joined_without_outside_or_to_server():
    clock = Clock()
    j = make(clock)
    t = new_trace_id()
    j.note_requests([RequestNote(t, "e", SENT_NS, 40.0, same_host=True, client_limited=True)])
    j.add_segments([seg(t, None)])
    (r,) = j.snapshot("e").recent
    assert r.client_limited and r.queue_ms == 4.0 and r.outside_ms is None and r.to_server_ms is None


def test_same_host_is_asked_of_the_resolver_when_the_note_does_not_say():
    clock = Clock()
    j = make(clock)
    j.same_host_of = lambda endpoint: endpoint == "local"
    for endpoint in ("local", "remote"):
        t = new_trace_id()
        j.note_requests([RequestNote(t, endpoint, SENT_NS, 20.0)])
        j.add_segments([seg(t, None)])
    assert j.snapshot("local").to_server_ms.p50 == pytest.approx(1.0)
    assert j.snapshot("remote").to_server_ms is None


def test_outcomes_added_from_a_recording_fill_the_windows_as_joined_ones_do():
    clock = Clock()
    j = make(clock)
    r = JoinedRequest(trace_id=new_trace_id(), endpoint="e", kind="probe", sent_wall_ns=SENT_NS, client_ttft_ms=20.0,
                      client_e2e_ms=None, server="vllm", queue_ms=1.0, outside_ms=2.0)
    j.add_outcome(r)
    j.add_outcome(UnjoinedRequest(trace_id=new_trace_id(), endpoint="e", kind="probe", sent_wall_ns=SENT_NS,
                                  reason="no_span"))
    summary = j.snapshot("e", now=1_700_000_010.0)
    assert summary.probes_joined == 1 and summary.unjoined_reasons == {"no_span": 1}
    assert j.snapshot("e", now=1_700_001_000.0).probes_joined == 0  # past the window


class _Engine:
    """What ChainFeed.attach uses of an engine: its settings and the three hooks."""

    def __init__(self, include_client_limited: bool) -> None:
        from lpxtop.engine.runner import EngineSettings

        self.settings = EngineSettings(include_client_limited=include_client_limited)
        self.events: list = []

    def add_listener(self, fn) -> None: ...

    def add_snapshot_hook(self, fn) -> None: ...

    def add_alert_source(self, fn) -> None: ...

    def post_event(self, event) -> None:
        self.events.append(event)


class _Receiver:
    def __init__(self, join, settings) -> None: ...

    def start(self):
        return ("127.0.0.1", 4318)

    def stop(self) -> None: ...


@pytest.mark.parametrize("include", [False, True])
def test_the_feed_takes_a_late_probes_outside_only_when_the_engine_counts_such_probes(include):
    from lpxtop.engine.traces.feed import ChainFeed
    from lpxtop.engine.traces.limits import ReceiverSettings
    from lpxtop.model.probe import Sample

    feed = ChainFeed(ReceiverSettings(), receiver_factory=_Receiver)
    engine = _Engine(include)
    feed.attach(engine)
    t, s = new_trace_id(), span_id()
    sample = Sample(endpoint="e", wall_time=1.0, start_ns=0, ok=True, ttft_ms=40.0, e2e_ms=90.0, client_limited=True,
                    trace_id=t, span_id=s, sent_wall_ns=SENT_NS)
    assert feed.note_sample(sample, "e")
    feed.join.add_segments([seg(t, s)])
    (event,) = engine.events
    assert event.joined is not None and event.joined.queue_ms == 4.0
    assert (event.joined.outside_ms == pytest.approx(24.0)) if include else event.joined.outside_ms is None
