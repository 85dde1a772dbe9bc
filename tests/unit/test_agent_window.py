"""The agent window's summary: what counts where, the validity rate, the breakdown, the status, the JSON."""

from __future__ import annotations

import json

import pytest

from lpxtop.engine.agent.window import AgentWindow, agent_status, summarize
from lpxtop.model.agent import AgentStep


def step(i: int, **kw) -> AgentStep:
    values = dict(endpoint="e", api="chat", wall_time=1000.0 + i, start_ns=i, tool_name="get_weather", tool_calls=1,
                  args_valid_json=True, args_valid_schema=True, call1_ttft_ms=20.0, time_to_tool_name_ms=20.0,
                  time_to_tool_call_ms=60.0, call1_e2e_ms=60.0, tool_ms=10.0, call2_start_ms=75.0,
                  answer_ttft_ms=30.0, answer_e2e_ms=90.0, step_ms=165.0)
    values.update(kw)
    return AgentStep(**values)


def test_segments_add_up_to_the_step():
    s = step(0)
    seg = s.segments_ms
    assert seg == {"prefill": 50.0, "decode": 100.0, "tool": 10.0, "outside": 5.0}
    assert sum(seg.values()) == pytest.approx(s.step_ms)


def test_behaviour_errors_count_but_keep_their_timings_and_the_endpoint_up():
    steps = (
        step(0),
        step(1, error_kind="bad_tool_args", args_valid_json=False, args_valid_schema=None),
        step(2, error_kind="tool_args_schema", args_valid_schema=False),
        step(3, error_kind="no_tool_call", tool_name=None, tool_calls=0, args_valid_json=None, args_valid_schema=None,
             time_to_tool_name_ms=None, time_to_tool_call_ms=None, tool_ms=None, answer_ttft_ms=None,
             answer_e2e_ms=None, step_ms=None, call2_start_ms=None),
    )
    view = summarize(steps, api="chat", chain_steps=5)
    assert view.status == "up"
    assert view.errors == {"bad_tool_args": 1, "tool_args_schema": 1, "no_tool_call": 1}
    assert view.tool_call_valid_pct == pytest.approx(100 / 3)  # 1 valid of the 3 steps that got a call
    assert view.step_ms.count == 3 and view.time_to_tool_call_ms.count == 3  # bad arguments still timed
    assert view.chain.steps == 5 and view.chain.exact
    assert view.breakdown_ms["tool"] == pytest.approx(10.0)


def test_transport_failures_make_it_degraded_then_down():
    failed = [step(i, error_kind="http_5xx", failed_call=2, step_ms=None, answer_e2e_ms=None) for i in range(3)]
    assert agent_status(()) == "pending"
    assert agent_status((step(0), *failed[:1])) == "degraded"
    assert agent_status((step(0), *failed)) == "down"


def test_window_bounds_counts_and_caches():
    window = AgentWindow(window_s=60.0, max_samples=5)
    for i in range(8):
        window.add(step(i, error_kind="http_5xx" if i == 7 else None, step_ms=100.0 + i))
    assert len(window.steps) == 5 and window.tally.sent == 8 and window.tally.failed == 1
    first = window.view(api="chat", now=1010.0, chain_steps=3)
    assert window.view(api="chat", now=1010.0, chain_steps=3) is first  # nothing changed: the same view
    assert window.view(api="chat", now=1010.0, chain_steps=4) is not first
    assert window.view(api="chat", now=2000.0, chain_steps=3).samples == ()  # all older than 60 s
    window.reset()
    assert window.tally.sent == 0 and window.view(api="chat", now=2000.0, chain_steps=3).status == "pending"


def test_json_has_the_issue_keys():
    view = summarize((step(0), step(1, step_ms=200.0)), api="chat", chain_steps=5)
    doc = json.loads(json.dumps(view.to_json()))
    assert {"steps", "time_to_tool_name_ms", "time_to_tool_call_ms", "tool_ms", "answer_ttft_ms", "step_ms",
            "tool_call_valid_pct", "errors", "chain"} <= set(doc)
    assert set(doc["step_ms"]) == {"p50", "p95", "p99", "mean", "max"}
    assert doc["chain"]["steps"] == 5 and doc["chain"]["p50_ms"] > 0 and doc["chain"]["method"] == "exact"
    assert doc["tool_call_valid_pct"] == 100.0
    assert "app_latency_ms" not in doc
    empty = summarize((), api="dify", chain_steps=3).to_json()
    assert empty["chain"] == {"steps": 3, "p50_ms": None, "p95_ms": None} and empty["step_ms"] is None
    assert empty["app_latency_ms"] is None and empty["status"] == "down"


def test_dify_segments_put_the_gateway_outside():
    s = AgentStep(endpoint="d", api="dify", wall_time=0.0, start_ns=0, time_to_tool_name_ms=40.0,
                  time_to_observation_ms=60.0, answer_ttft_ms=75.0, answer_e2e_ms=135.0, step_ms=135.0,
                  app_latency_ms=133.0, client_latency_ms=136.0)
    assert s.segments_ms == {"prefill": 55.0, "decode": 60.0, "tool": 20.0, "outside": 3.0}


def test_client_limited_steps_are_counted_and_left_out_of_the_times_by_default():
    window = AgentWindow(window_s=60.0, max_samples=10)
    window.add(step(0, step_ms=100.0))
    window.add(step(1, step_ms=900.0, client_limited=True))  # lpxtop was late: its 900 ms is not the server's
    view = window.view(api="chat", now=1002.0, chain_steps=3)
    assert view.steps_sent == 2 and view.steps_client_limited == 1
    assert view.step_ms.count == 1 and view.step_ms.max == 100.0 and view.chain.p95_ms == pytest.approx(300.0)
    assert not view.percentiles_with_client_limited
    doc = view.to_json()
    assert doc["steps_client_limited"] == 1 and doc["latency_includes_client_limited"] is False
    # asked for (--include-client-limited): counted in the times, and marked so
    included = AgentWindow(window_s=60.0, max_samples=10, include_client_limited=True)
    for s in window.steps:
        included.add(s)
    both = included.view(api="chat", now=1002.0, chain_steps=3)
    assert both.step_ms.count == 2 and both.percentiles_with_client_limited
    # only client-limited steps in the window: their times rather than none, marked
    alone = summarize((step(1, step_ms=900.0, client_limited=True),), api="chat", chain_steps=3)
    assert alone.step_ms.max == 900.0 and alone.percentiles_with_client_limited
    window.reset()
    assert window.tally.client_limited == 0


def test_the_agent_and_endpoint_windows_tally_outcomes_alike():
    from lpxtop.engine.window import EndpointWindow
    from lpxtop.model.endpoint import EndpointConfig
    from lpxtop.model.probe import Sample

    outcomes = [(True, False, None), (False, False, "http_5xx"), (True, True, None), (False, True, "read_timeout")]
    agent, chat = AgentWindow(), EndpointWindow()
    for i, (ok, late, kind) in enumerate(outcomes):
        agent.add(step(i, client_limited=late, error_kind=kind, error_message=kind and "boom"))
        chat.add(Sample(endpoint="e", wall_time=1000.0 + i, start_ns=i, ok=ok, client_limited=late, error_kind=kind,
                        error_message=kind and "boom", ttft_ms=20.0 if ok else None))
    counts = [(t.sent, t.ok, t.failed, t.client_limited, dict(t.errors), t.last_error, t.last_error_time)
              for t in (agent.tally, chat.tally)]
    assert counts[0] == counts[1] == (4, 2, 2, 2, {"http_5xx": 1, "read_timeout": 1}, counts[0][5], 1003.0)
    assert counts[0][5] is not None and "read_timeout" in counts[0][5]
    view = EndpointWindow().view(EndpointConfig(name="e", url="http://127.0.0.1:1/v1"), now=2000.0, model=None,
                                 server=None, server_kind="vllm")
    assert view.probes_sent == 0
    agent.reset()
    assert (agent.tally.sent, agent.tally.errors, agent.tally.last_error) == (0, {}, None)
