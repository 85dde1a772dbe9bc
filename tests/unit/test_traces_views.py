"""What the chain becomes on screen and in JSON: the exact Gap, a load step's TTFT split, an agent step's
time by its calls' own spans, the Chain tab's bars."""

from __future__ import annotations

import random

import pytest

from lpxtop.engine.traces.views import span_breakdown, step_span_segments
from lpxtop.model.agent import AgentStep, CallTrace
from lpxtop.model.chain import ChainSummary, JoinedRequest, StepChain, ttft_split
from lpxtop.model.probe import Percentiles
from lpxtop.model.server_gap import ttft_gap
from lpxtop.ui.widgets.chain_panel import ttft_parts

SENT_NS = 1_700_000_000 * 10**9


def joined(ttft: float, queue: float, prefill: float, other: float, outside: float, **kw) -> JoinedRequest:
    return JoinedRequest(trace_id=kw.pop("trace_id", "t"), endpoint="e", kind=kw.pop("kind", "probe"),
                         sent_wall_ns=SENT_NS, client_ttft_ms=ttft, client_e2e_ms=None, server="vllm",
                         queue_ms=queue, prefill_ms=prefill, decode_ms=kw.pop("decode", 50.0),
                         server_ttft_ms=queue + prefill + other, outside_ms=outside, **kw)


def test_the_gap_of_joined_probes_is_their_mean_outside_exactly_and_comes_first():
    chain = ChainSummary(probes_joined=3, outside_ms=Percentiles.of([2.0, 3.0, 7.0]))
    gap = ttft_gap([], None, chain)  # no server metrics at all: the spans alone give it
    assert gap.value_ms == pytest.approx(4.0) and gap.method == "joined_spans" and not gap.estimate
    assert gap.probes == 3 and gap.low_ms == gap.high_ms == gap.value_ms
    assert ttft_gap([], None, ChainSummary()).reason == "no server metrics"  # nothing joined: as before


def test_a_steps_ttft_split_adds_up_to_the_ttft_of_the_requests_around_the_quantile():
    rng = random.Random(7)
    requests = []
    for _ in range(200):
        queue, prefill, other, outside = rng.expovariate(1 / 40), rng.uniform(10, 20), rng.uniform(0, 2), rng.uniform(1, 4)
        requests.append(joined(queue + prefill + other + outside, queue, prefill, other, outside))
    for q in (50, 95):
        split = ttft_split(requests, q)
        assert split is not None and split.requests == 11  # 5 % of 200 around the rank, and the rank itself
        parts = split.queue_ms + split.prefill_ms + split.server_other_ms + split.outside_ms
        assert parts == pytest.approx(split.ttft_ms, abs=1e-9)
        ordered = sorted(r.client_ttft_ms for r in requests)
        assert ordered[round(q / 100 * 199) - 5] <= split.ttft_ms <= ordered[round(q / 100 * 199) + 5]
    assert ttft_split(requests, 95).queue_ms > ttft_split(requests, 50).queue_ms  # the tail is the queue's
    assert ttft_split([], 50) is None
    assert ttft_split([joined(20, 1, 10, 1, 8)], 95).requests == 1


def test_the_step_chain_json_is_the_endpoint_chains_shape_plus_the_split():
    chain = StepChain(ChainSummary(probes_joined=1), (ttft_split([joined(20, 1, 10, 1, 8)], 50),))
    assert chain.split_json()["p95"] is None
    assert set(chain.split_json()["p50"]) == {"ttft_ms", "queue_ms", "prefill_ms", "server_other_ms", "outside_ms",
                                               "requests"}


def step(call_spans: tuple[str, ...], step_ms: float = 500.0, tool_ms: float = 30.0, api: str = "chat") -> AgentStep:
    return AgentStep(endpoint="e", api=api, wall_time=1.0, start_ns=0, step_ms=step_ms, tool_ms=tool_ms,
                     calls=tuple(CallTrace("t", s, SENT_NS) for s in call_spans))


def test_an_agent_steps_time_by_its_calls_spans_needs_every_call_joined():
    calls = {"a": joined(40, 5, 20, 1, 14, span_id="a", kind="agent", decode=100.0),
             "b": joined(30, 0, 15, 1, 14, span_id="b", kind="agent", decode=200.0)}
    segments = step_span_segments(step(("a", "b")), calls)
    assert segments == {"queue": 5.0, "prefill": 35.0, "decode": 300.0, "tool": 30.0,
                        "outside": pytest.approx(500.0 - 5 - 35 - 300 - 30)}
    assert step_span_segments(step(("a", "c")), calls) is None  # call 2 not joined
    assert step_span_segments(step(("a",), api="dify"), calls) is None  # a platform's one request: not split
    breakdown, count = span_breakdown([step(("a", "b")), step(("a", "b"), step_ms=600.0), step(("a", "c"))], calls)
    assert count == 2 and breakdown["outside"] == pytest.approx((130.0 + 230.0) / 2)


def test_a_probes_bar_parts_are_its_ttft():
    r = joined(30.0, 4.0, 16.0, 2.0, 8.0, to_server_ms=1.5)
    parts = dict(ttft_parts(r))
    assert parts == {"to server": 1.5, "queue": 4.0, "prefill": 16.0, "server other": 2.0, "back": 6.5}
    assert sum(parts.values()) == pytest.approx(r.client_ttft_ms)
    assert dict(ttft_parts(joined(30.0, 4.0, 16.0, 2.0, 8.0)))["back"] == 8.0  # no to-server: outside is one part
    assert ttft_parts(joined(30.0, 4.0, 16.0, 2.0, 8.0, client_limited=True, to_server_ms=None)) is not None
