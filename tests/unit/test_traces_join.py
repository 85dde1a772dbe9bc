"""The join: requests and spans in either order, late spans, unjoined reasons, bounded windows."""

from __future__ import annotations

import math

import pytest

from lpxtop.engine.traces import join as join_module
from lpxtop.engine.traces.join import TraceJoin
from lpxtop.model.chain import SpanSegments
from lpxtop.model.probe import Percentiles
from tests.support.traces_data import new_trace_id


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(clock: Clock, **kw) -> TraceJoin:
    return TraceJoin(clock=clock, wall=lambda: 1_700_000_000.0 + clock.t - 1000.0, **kw)


SENT_NS = 1_700_000_000 * 10**9


def seg(trace_id: str, *, queue=4.0, prefill=10.0, decode=200.0, ttft=16.0, start_ns=SENT_NS + 1_500_000,
        source="vllm#a", complete=True, server="vllm") -> SpanSegments:
    return SpanSegments(trace_id=trace_id, server=server, source=source, start_wall_ns=start_ns, queue_ms=queue,
                        prefill_ms=prefill, decode_ms=decode, server_ttft_ms=ttft, server_e2e_ms=None,
                        complete=complete)


def note(j: TraceJoin, trace_id: str, *, ttft=18.5, endpoint="e", same_host=True, kind="probe", sent=SENT_NS):
    j.note_request(trace_id, endpoint=endpoint, sent_wall_ns=sent, client_ttft_ms=ttft, client_e2e_ms=250.0,
                   kind=kind, same_host=same_host)


@pytest.mark.parametrize("span_first", [False, True])
def test_one_request_joined_in_either_order_with_exact_outside(span_first):
    clock = Clock()
    j = make(clock)
    t = new_trace_id()
    seen = []
    j.add_listener(seen.append)
    if span_first:
        j.add_segments([seg(t)])
        note(j, t)
    else:
        note(j, t)
        assert j.pending("e") == 1
        j.add_segments([seg(t)])
    summary = j.snapshot("e")
    assert summary.probes_joined == 1 and summary.probes_unjoined == 0 and summary.probes_pending == 0
    (r,) = seen
    assert r.outside_ms == pytest.approx(2.5)
    assert r.server_ttft_ms + r.outside_ms == r.client_ttft_ms  # exact, by construction
    assert r.to_server_ms == pytest.approx(1.5)
    assert summary.queue_ms.p50 == 4.0 and summary.outside_ms.p50 == pytest.approx(2.5)
    assert summary.recent == (r,)


def test_to_server_only_when_both_clocks_are_this_hosts():
    clock = Clock()
    j = make(clock)
    t = new_trace_id()
    note(j, t, same_host=False)
    j.add_segments([seg(t)])
    summary = j.snapshot("e")
    assert summary.to_server_ms is None and summary.to_json()["to_server_ms"] is None
    assert summary.outside_ms is not None


def test_late_span_within_the_wait_joins_and_after_it_is_counted_no_span():
    clock = Clock()
    j = make(clock, wait_s=30.0)
    late, lost = new_trace_id(), new_trace_id()
    note(j, late)
    note(j, lost)
    clock.t += 20.0
    j.add_segments([seg(late)])
    clock.t += 11.0
    summary = j.snapshot("e")
    assert summary.probes_joined == 1
    assert summary.unjoined_reasons == {"no_span": 1}
    j.add_segments([seg(lost)])  # after the wait: not joined, counted as a late span
    assert j.snapshot("e").probes_joined == 1


def test_unjoined_reasons_receiver_dropped_and_span_without_latency_attributes():
    clock = Clock()
    j = make(clock, wait_s=5.0)
    dropped, empty = new_trace_id(), new_trace_id()
    note(j, dropped)
    note(j, empty)
    j.note_receiver_drop(3)
    j.add_segments([seg(empty, queue=None, prefill=None, decode=None, ttft=None)])
    clock.t += 6.0
    summary = j.snapshot("e")
    assert summary.unjoined_reasons == {"receiver_dropped": 1, "span_without_latency_attributes": 1}
    assert summary.probes_unjoined == 2 and summary.probes_joined == 0


def test_request_with_no_ttft_joins_without_outside():
    clock = Clock()
    j = make(clock)
    t = new_trace_id()
    note(j, t, ttft=None)
    j.add_segments([seg(t)])
    summary = j.snapshot("e")
    assert summary.probes_joined == 1 and summary.outside_ms is None and summary.queue_ms.p50 == 4.0


def test_other_requests_spans_are_the_servers_population():
    clock = Clock()
    j = make(clock)
    own = new_trace_id()
    note(j, own)
    others = [seg(new_trace_id(), queue=float(q), prefill=5.0) for q in range(1, 101)]
    j.add_segments([seg(own, queue=1000.0)] + others)
    summary = j.snapshot("e")
    assert summary.probes_joined == 1
    population = summary.all_requests
    assert population.count == 101  # the probe's own request is one of the server's requests too
    assert population.queue_ms.p50 == pytest.approx(Percentiles.of([*range(1, 101), 1000.0]).p50)
    assert summary.to_json()["all_requests"]["count"] == 101


def test_population_of_another_source_is_not_this_endpoints():
    clock = Clock()
    j = make(clock)
    t = new_trace_id()
    note(j, t)
    j.add_segments([seg(t, source="a"), seg(new_trace_id(), source="b"), seg(new_trace_id(), source="b")])
    assert j.snapshot("e").all_requests.count == 1
    assert j.population("b").count == 2
    assert set(j.sources()) == {"a", "b"}


def test_windows_are_per_endpoint_and_kind():
    clock = Clock()
    j = make(clock)
    a, b, c = new_trace_id(), new_trace_id(), new_trace_id()
    note(j, a, endpoint="x")
    note(j, b, endpoint="y")
    note(j, c, endpoint="x", kind="load")
    j.add_segments([seg(a), seg(b), seg(c)])
    assert j.snapshot("x").probes_joined == 1
    assert j.snapshot("y").probes_joined == 1
    assert j.snapshot("x", kind="load").probes_joined == 1
    assert j.snapshot("nobody").probes_joined == 0


def test_window_ages_out_and_is_bounded_in_count():
    clock = Clock()
    j = make(clock, window_s=60.0, max_samples=10)
    for i in range(25):
        t = new_trace_id()
        note(j, t, sent=SENT_NS + i * 10**6, ttft=20.0 + i)
        j.add_segments([seg(t, ttft=16.0)])
    summary = j.snapshot("e")
    assert summary.probes_joined == 10
    assert summary.outside_ms.max == pytest.approx(28.0) and summary.outside_ms.p50 == pytest.approx(23.5)
    clock.t += 120.0
    assert j.snapshot("e").probes_joined == 0


def test_duplicate_span_and_duplicate_request_are_counted_not_joined_twice():
    clock = Clock()
    j = make(clock)
    t = new_trace_id()
    note(j, t)
    j.add_segments([seg(t)])
    j.add_segments([seg(t, queue=999.0)])
    note(j, t)
    assert j.snapshot("e").probes_joined == 1
    assert j.counts["late_spans"] == 1 and j.counts["duplicate_requests"] == 1


def test_trace_in_pieces_joins_after_settling():
    clock = Clock()
    j = make(clock, settle_s=2.0)
    t = new_trace_id()
    note(j, t)
    j.add_segments([seg(t, queue=7.0, prefill=None, decode=None, ttft=None, complete=False, server="sglang")])
    assert j.snapshot("e").probes_joined == 0
    j.add_segments([seg(t, queue=None, prefill=12.0, decode=None, ttft=None, complete=False, server="sglang")])
    clock.t += 2.5
    summary = j.snapshot("e")
    assert summary.probes_joined == 1
    assert summary.queue_ms.p50 == 7.0 and summary.prefill_ms.p50 == 12.0 and summary.outside_ms is None


def test_stores_are_bounded(monkeypatch):
    monkeypatch.setattr(join_module, "MAX_PENDING", 50)
    monkeypatch.setattr(join_module, "MAX_ORPHANS", 40)
    clock = Clock()
    j = make(clock)
    for _ in range(120):
        note(j, new_trace_id())
    j.add_segments([seg(new_trace_id()) for _ in range(200)])
    assert len(j._pending) == 50 and len(j._orphans) == 40
    assert j.snapshot("e").unjoined_reasons == {"store_full": 70}


def test_hostile_client_figures_do_not_enter_the_windows():
    clock = Clock()
    j = make(clock)
    t = new_trace_id()
    note(j, t, ttft=math.nan)
    j.add_segments([seg(t)])
    summary = j.snapshot("e")
    assert summary.probes_joined == 1 and summary.outside_ms is None


def test_chain_summary_json_shape():
    clock = Clock()
    j = make(clock)
    assert j.snapshot("e").to_json() == {
        "source": "otlp", "probes_joined": 0, "probes_unjoined": 0, "probes_pending": 0, "unjoined_reasons": {},
        "server_ttft_ms": None, "queue_ms": None, "prefill_ms": None, "decode_ms": None, "outside_ms": None,
        "to_server_ms": None, "all_requests": {"count": 0, "queue_ms": None, "prefill_ms": None, "decode_ms": None},
    }
    t = new_trace_id()
    note(j, t)
    j.add_segments([seg(t)])
    data = j.snapshot("e").to_json()
    for key in ("server_ttft_ms", "queue_ms", "prefill_ms", "decode_ms", "outside_ms", "to_server_ms"):
        assert set(data[key]) == {"p50", "p95", "p99", "mean", "max"}


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_EVENT = st.tuples(st.sampled_from(["note", "span", "piece", "empty", "tick", "drop"]), st.integers(0, 7),
                   st.floats(0.0, 40.0))


@settings(max_examples=150, deadline=None)
@given(st.lists(_EVENT, max_size=60))
def test_any_order_of_notes_spans_and_time_accounts_for_every_request(events):
    clock = Clock()
    j = make(clock, wait_s=30.0, settle_s=2.0)
    ids = [f"{i:032x}" for i in range(1, 9)]
    noted: set[str] = set()
    for kind, i, dt in events:
        t = ids[i]
        if kind == "note":
            if t not in noted:
                noted.add(t)
            note(j, t)
        elif kind == "span":
            j.add_segments([seg(t)])
        elif kind == "piece":
            j.add_segments([seg(t, queue=3.0, prefill=None, decode=None, ttft=None, complete=False, server="sglang")])
        elif kind == "empty":
            j.add_segments([seg(t, queue=None, prefill=None, decode=None, ttft=None)])
        elif kind == "drop":
            j.note_receiver_drop(1)
        else:
            clock.t += dt
    summary = j.snapshot("e")
    assert summary.probes_joined + summary.probes_unjoined + summary.probes_pending == len(noted)
    assert sum(summary.unjoined_reasons.values()) == summary.probes_unjoined
    for r in summary.recent:
        if r.outside_ms is not None:
            assert r.server_ttft_ms + r.outside_ms == pytest.approx(r.client_ttft_ms, abs=1e-9)
    clock.t += 100.0
    final = j.snapshot("e")
    assert final.probes_pending == 0
