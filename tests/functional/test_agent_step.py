"""Agent steps against the simulated server over real loopback HTTP: every measured time against the sim's
record of what it sent, the faults classified, and the Dify app stream with its own latency."""

from __future__ import annotations

import asyncio
import json

import pytest

from lpxtop.engine.agent.dify import run_dify_step
from lpxtop.engine.agent.step import _judge, run_agent_step
from lpxtop.engine.agent.tools import ToolSet
from lpxtop.engine.probe.toolcalls import ToolCall
from lpxtop.http import HttpClient
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from lpxtop.sim.tools import tool_call_times_ns
from tests.support.sim import endpoint, p

TOLERANCE_MS = 3.0  # the median's, as the chat probe's fidelity tests
TOOL_LATENCY_S = 0.02


def agent_endpoint(url: str, **kw):
    return endpoint(url, probes=("agent",), tool_latency_s=TOOL_LATENCY_S, **kw)


async def steps(url: str, n: int, **kw):
    async with HttpClient() as client:
        return [await run_agent_step(client, agent_endpoint(url, **kw), ToolSet(), "m") for _ in range(n)]


def ms(t_ns: int, origin_ns: int) -> float:
    return (t_ns - origin_ns) / 1e6


async def test_step_times_match_the_sims_record():
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=15, itl_ms=4)) as sim:
        done = await steps(sim.url, 8)
        errors: dict[str, list[float]] = {k: [] for k in ("name", "call", "answer_ttft", "answer_e2e", "step")}
        for s in done:
            assert s.ok, s.error_text
            one, two = sim.server.record_for(s.call1_response_id), sim.server.record_for(s.call2_response_id)
            calls = tool_call_times_ns(one.events)
            answer = [t for t, kind, n in two.events if kind in ("content", "finish") and n > 0]
            call2_start_ns = s.start_ns + round(s.call2_start_ms * 1e6)
            errors["name"].append(s.time_to_tool_name_ms - ms(calls[0], s.start_ns))
            errors["call"].append(s.time_to_tool_call_ms - ms(calls[-1], s.start_ns))
            errors["answer_ttft"].append(s.answer_ttft_ms - ms(answer[0], call2_start_ns))
            errors["answer_e2e"].append(s.answer_e2e_ms - ms(answer[-1], call2_start_ns))
            errors["step"].append(s.step_ms - ms(answer[-1], s.start_ns))
            # what the step says of itself
            assert s.call1_ttft_ms == s.time_to_tool_name_ms  # the naming delta is call 1's first token
            assert s.call1_e2e_ms == s.time_to_tool_call_ms  # vLLM's finish-only chunk is not a token
            # at least the tool's latency; above it only by the loop's timer lateness (generous: a busy machine)
            assert TOOL_LATENCY_S * 1000 <= s.tool_ms < TOOL_LATENCY_S * 1000 + 200
            assert s.call2_start_ms >= s.call1_e2e_ms + s.tool_ms
            assert sum(s.segments_ms.values()) == pytest.approx(s.step_ms)
            assert (s.tool_name, s.tool_calls, s.args_valid_json, s.args_valid_schema) == ("get_weather", 1, True, True)
    for name, errs in errors.items():
        assert abs(p(errs, 0.5)) < TOLERANCE_MS, (name, errs)
        assert min(errs) > -0.5, (name, "a byte cannot arrive before the server sent it", errs)


@pytest.mark.parametrize(
    ("fault", "kind", "timed"),
    [
        ("no_tool_call", "no_tool_call", False),
        ("bad_tool_args", "bad_tool_args", True),
        ("tool_args_schema", "tool_args_schema", True),
    ],
)
async def test_model_faults_are_classified_and_timed_where_it_means_something(fault, kind, timed):
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=1)) as sim:
        sim.server.set_faults(count=1, tool_fault=fault)
        (s,) = await steps(sim.url, 1)
        (after,) = await steps(sim.url, 1)
    assert s.error_kind == kind and s.answered and s.failed_call is None, s.error_text
    assert after.ok  # one-shot: the next step is clean
    assert s.call1_e2e_ms is not None
    if timed:  # a bad call still ran the tool (with an error result) and call 2: the step counts
        assert s.step_ms is not None and s.tool_ms is not None and s.args_valid_json is (kind != "bad_tool_args")
    else:
        assert s.step_ms is None and s.tool_name is None and s.args_valid_json is None


async def test_transport_failure_of_either_call():
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=1)) as sim:
        sim.server.set_faults(count=1, rate_limit=True)
        (first,) = await steps(sim.url, 1)
        sim.server.set_faults(count=1)  # call 1 clean ...
        sim.server.set_faults(count=1, cut_after_tokens=2)  # ... call 2 cut mid-answer
        (second,) = await steps(sim.url, 1)
    assert (first.error_kind, first.failed_call, first.http_status) == ("http_429", 1, 429)
    assert second.error_kind == "stream_cut" and second.failed_call == 2
    assert second.time_to_tool_call_ms is not None and second.step_ms is None and second.answer_e2e_ms is None


async def test_the_sims_other_shapes_make_whole_steps():
    for shape in ("name_with_args", "repeated", "placeholder", "parallel", "whole", "openai"):
        with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=1, tool_call_shape=shape)) as sim:
            (s,) = await steps(sim.url, 1)
        assert s.ok, (shape, s.error_text)
        assert s.tool_calls == (2 if shape == "parallel" else 1)


def test_judging_arguments():
    tools = ToolSet()
    cut = ToolCall(index=0, id="c", name="get_weather", arguments='{"city": "Par')
    verdict, results, echoed = _judge([cut], tools, "length")
    assert verdict["error_kind"] == "bad_tool_args" and "cut by max_tokens" in verdict["error_message"]
    assert echoed == ["{}"] and json.loads(results[0])["error"]
    unknown = ToolCall(index=0, id="c", name="rm_rf", arguments="{}")
    verdict, _, _ = _judge([unknown], tools, "tool_calls")
    assert verdict["error_kind"] == "unknown_tool"
    empty_args = ToolCall(index=0, id="c", name="get_time", arguments="")
    verdict, _, echoed = _judge([empty_args], tools, "tool_calls")
    assert verdict["error_kind"] == "tool_args_schema" and echoed == ["{}"]  # {} lacks the required timezone


async def dify_steps(url: str, n: int, **kw):
    async with HttpClient() as client:
        return [await run_dify_step(client, endpoint(url, api="dify", probes=("agent",), **kw), ToolSet())
                for _ in range(n)]


@pytest.mark.timing  # the client's stamps against the simulator's record: runs alone under pytest-xdist
async def test_dify_times_match_the_record_and_the_apps_latency_is_beside_the_clients():
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=10, itl_ms=3, dify_tool_latency_ms=25)) as sim:
        done = await dify_steps(sim.url, 6)
        errs: dict[str, list[float]] = {k: [] for k in ("decision", "observation", "answer", "end", "app")}
        gateway: list[float] = []
        for s in done:
            assert s.ok, s.error_text
            record = sim.server.record_for(s.call1_response_id)
            times = {kind: [t for t, k, _ in record.events if k == kind] for kind in
                     ("tool_decision", "observation", "answer", "message_end")}
            errs["decision"].append(s.time_to_tool_name_ms - ms(times["tool_decision"][0], s.start_ns))
            errs["observation"].append(s.time_to_observation_ms - ms(times["observation"][0], s.start_ns))
            errs["answer"].append(s.answer_ttft_ms - ms(times["answer"][0], s.start_ns))
            errs["end"].append(s.client_latency_ms - ms(times["message_end"][0], s.start_ns))
            # the app's own figure: from its receipt of the request to just before message_end was written
            app_truth = ms(times["message_end"][0], record.t_received_ns)
            errs["app"].append(s.app_latency_ms - app_truth)
            assert s.answer_e2e_ms == pytest.approx(ms(times["answer"][-1], s.start_ns), abs=TOLERANCE_MS * 3)
            gateway.append(s.client_latency_ms - s.app_latency_ms)  # network and gateway: loopback here
            assert s.tool_ms >= 25 and s.tool_name == "get_weather" and s.args_valid_json
    assert min(gateway) >= 0 and p(gateway, 0.5) < 25, gateway
    for name, values in errs.items():
        # the app takes its figure just before it builds message_end, microseconds before the record's stamp
        bound = 0.5 if name == "app" else TOLERANCE_MS
        assert abs(p(values, 0.5)) < bound, (name, values)
        if name != "app":
            assert min(values) > -0.5, (name, values)


async def test_dify_faults():
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=1, dify_tool_latency_ms=5, api_key="sk-dify-test-key")) as sim:
        import os

        os.environ["LPXTOP_TEST_DIFY_KEY"] = "sk-dify-test-key"
        try:
            (ok,) = await dify_steps(sim.url, 1, api_key_env="LPXTOP_TEST_DIFY_KEY")
            (denied,) = await dify_steps(sim.url, 1)
            sim.server.set_faults(count=1, tool_fault="no_tool_call")
            (no_tool,) = await dify_steps(sim.url, 1, api_key_env="LPXTOP_TEST_DIFY_KEY")
            sim.server.set_faults(count=1, error_event_after_tokens=3)
            (broken,) = await dify_steps(sim.url, 1, api_key_env="LPXTOP_TEST_DIFY_KEY")
        finally:
            del os.environ["LPXTOP_TEST_DIFY_KEY"]
    assert ok.ok, ok.error_text
    assert denied.error_kind == "http_401" and "Access token is invalid" in denied.error_message
    assert no_tool.error_kind == "no_tool_call" and no_tool.answer_ttft_ms is not None and no_tool.tool_ms is None
    assert broken.error_kind == "error_event" and "500 internal_server_error" in broken.error_message


async def test_a_step_is_cancelled_cleanly_when_the_engine_stops():
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=1, stall_after_tokens=1, stall_s=5)) as sim:
        async with HttpClient() as client:
            task = asyncio.ensure_future(run_agent_step(client, agent_endpoint(sim.url), ToolSet(), "m"))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
