"""Agent platforms against the simulator over real loopback HTTP: a Coze bot, a Dify workflow (node by node)
and a Dify app's own TTFT, every figure against the sim's record of what it sent and when; the faults
classified; and the whole engine and `once --json` with the new APIs."""

from __future__ import annotations

import json
import os

import pytest

from lpxtop.engine.agent.coze import coze_url, run_coze_step
from lpxtop.engine.agent.dify import run_dify_step
from lpxtop.engine.agent.difyworkflow import run_dify_workflow_step, workflow_body
from lpxtop.engine.agent.tools import ToolSet
from lpxtop.http import HttpClient
from lpxtop.sim.config import SimConfig
from lpxtop.sim.difyworkflow import NODES
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.sim import endpoint, p

pytestmark = [pytest.mark.timeout(60), pytest.mark.timing]  # measures time against tolerances: runs alone under pytest-xdist

TOLERANCE_MS = 3.0  # every figure's median error against the record
NODE_ELAPSED_MS = 1.0  # a node's platform time: the very number the sim sent
FAST = dict(model="m", ttft_ms=10, itl_ms=3, dify_tool_latency_ms=25)


def ms(t_ns: int, origin_ns: int) -> float:
    return (t_ns - origin_ns) / 1e6


def times(record, kind: str) -> list[int]:
    return [t for t, k, _ in record.events if k == kind]


async def run_steps(run, url: str, n: int, **kw):
    async with HttpClient() as client:
        return [await run(client, endpoint(url, probes=("agent",), **kw), ToolSet()) for _ in range(n)]


def coze(url: str, n: int, **kw):
    return run_steps(run_coze_step, url, n, api="coze", bot_id="7379462189365198898", **kw)


def workflow(url: str, n: int, **kw):
    return run_steps(run_dify_workflow_step, url, n, api="dify-workflow", **kw)


def check(errors: dict[str, list[float]], differences: tuple[str, ...] = ()) -> None:
    """Each figure's median error within TOLERANCE_MS; a time from the send never before the sim sent the
    event (a difference of two arrivals, `differences`, may be a little short)."""
    for name, values in errors.items():
        assert abs(p(values, 0.5)) < TOLERANCE_MS, (name, values)
        if name not in differences:
            assert min(values) > -0.5, (name, values)


async def test_coze_figures_match_the_sims_record():
    with start_sim_in_thread(SimConfig(**FAST)) as sim:
        done = await coze(sim.url, 6)
        errs: dict[str, list[float]] = {k: [] for k in ("decision", "tool", "ttft", "e2e", "completed")}
        for s in done:
            assert s.ok, s.error_text
            record = sim.server.record_for(s.call1_response_id)
            assert record is not None and record.api == "coze"
            decision, response = times(record, "function_call")[0], times(record, "tool_response")[0]
            answers = times(record, "answer")
            errs["decision"].append(s.time_to_tool_call_ms - ms(decision, s.start_ns))
            errs["tool"].append(s.tool_ms - ms(response, decision))
            errs["ttft"].append(s.answer_ttft_ms - ms(answers[0], s.start_ns))
            errs["e2e"].append(s.answer_e2e_ms - ms(answers[-1], s.start_ns))
            errs["completed"].append(s.client_latency_ms - ms(times(record, "chat_completed")[0], s.start_ns))
            assert s.step_ms == s.answer_e2e_ms and s.time_to_tool_name_ms == s.time_to_tool_call_ms
            assert s.time_to_observation_ms == pytest.approx(s.time_to_tool_call_ms + s.tool_ms)
            assert s.tool_name == "get_weather" and s.args_valid_json is True
            assert s.tool_ms >= 25 - 2 * TOLERANCE_MS  # a difference of two arrivals: the sim sleeps 25 ms
            # the platform's own figure, exactly as sent, in whole seconds
            assert s.app_latency_ms == (record.app["completed_at"] - record.app["created_at"]) * 1000.0
            assert s.app_latency_resolution_ms == 1000.0
            assert (s.input_tokens, s.output_tokens) == (record.prompt_tokens, record.completion_tokens)
            assert s.total_tokens == record.prompt_tokens + record.completion_tokens
            assert len(s.calls) == 1 and record.trace_id == s.calls[0].trace_id
    check(errs, differences=("tool",))


async def test_a_dify_workflow_is_timed_node_by_node():
    with start_sim_in_thread(SimConfig(**FAST)) as sim:
        done = await workflow(sim.url, 6)
        errs: dict[str, list[float]] = {k: [] for k in ("offset", "seen", "ttft", "e2e", "finished")}
        for s in done:
            assert s.ok, s.error_text
            record = sim.server.record_for(s.call1_response_id)
            assert record is not None and record.api == "dify-workflow"
            assert [(n.title, n.node_type, n.node_id) for n in s.nodes] == [tuple(n) for n in NODES]
            for node, truth in zip(s.nodes, record.nodes, strict=True):
                assert node.status == "succeeded" and node.ok
                # the platform's time: the number the sim sent, to the microsecond
                assert abs(node.elapsed_ms - truth["elapsed_s"] * 1000.0) < NODE_ELAPSED_MS
                errs["offset"].append(node.start_ms - ms(truth["started_ns"], s.start_ns))
                errs["seen"].append(node.seen_ms - ms(truth["finished_ns"], truth["started_ns"]))
            chunks = times(record, "text_chunk")
            errs["ttft"].append(s.answer_ttft_ms - ms(chunks[0], s.start_ns))
            errs["e2e"].append(s.answer_e2e_ms - ms(chunks[-1], s.start_ns))
            errs["finished"].append(s.client_latency_ms - ms(times(record, "workflow_finished")[0], s.start_ns))
            assert s.step_ms == s.client_latency_ms
            assert abs(s.app_latency_ms - record.app["elapsed_s"] * 1000.0) < NODE_ELAPSED_MS
            assert s.app_latency_resolution_ms is None
            assert s.total_tokens == record.prompt_tokens + record.completion_tokens
            # the Tool node stands for the step's tool
            tool = s.nodes[2]
            assert (s.tool_name, s.time_to_tool_call_ms, s.tool_ms) == ("Weather", tool.start_ms, tool.seen_ms)
    check(errs, differences=("seen",))


async def test_a_dify_apps_own_ttft_is_beside_the_clients():
    with start_sim_in_thread(SimConfig(**FAST)) as sim:
        done = await run_steps(run_dify_step, sim.url, 4, api="dify")
        for s in done:
            assert s.ok, s.error_text
            record = sim.server.record_for(s.call1_response_id)
            assert s.app_ttft_ms == pytest.approx(record.app["time_to_first_token"] * 1000.0, abs=1e-6)
            assert s.app_generate_ms == pytest.approx(record.app["time_to_generate"] * 1000.0, abs=1e-6)
            # the app's model TTFT counts from its own model call: inside the client's answer TTFT
            assert 0 < s.app_ttft_ms < s.answer_ttft_ms
            assert (s.input_tokens, s.output_tokens) == (record.prompt_tokens, record.completion_tokens)


async def test_coze_faults_are_classified():
    key = "sk-coze-test-key-123"
    with start_sim_in_thread(SimConfig(**FAST, api_key=key)) as sim:
        os.environ["LPXTOP_TEST_COZE_KEY"] = key
        try:
            (ok,) = await coze(sim.url, 1, api_key_env="LPXTOP_TEST_COZE_KEY")
            (denied,) = await coze(sim.url, 1)
            sim.server.set_faults(count=1, fail_rate=1.0)
            (error_body,) = await coze(sim.url, 1, api_key_env="LPXTOP_TEST_COZE_KEY")
            sim.server.set_faults(count=1, tool_fault="no_tool_call")
            (no_tool,) = await coze(sim.url, 1, api_key_env="LPXTOP_TEST_COZE_KEY")
            sim.server.set_faults(count=1, tool_fault="requires_action")
            (waits,) = await coze(sim.url, 1, api_key_env="LPXTOP_TEST_COZE_KEY")
            sim.server.set_faults(count=1, error_event_after_tokens=3)
            (failed,) = await coze(sim.url, 1, api_key_env="LPXTOP_TEST_COZE_KEY")
        finally:
            del os.environ["LPXTOP_TEST_COZE_KEY"]
    assert ok.ok, ok.error_text
    assert denied.error_kind == "http_401" and "4100: authentication is invalid" in denied.error_message
    # an error body with HTTP 200: its message, never "not streamed" nor bad JSON
    assert error_body.error_kind == "error_event" and "5000: The bot could not start" in error_body.error_message
    assert no_tool.error_kind == "no_tool_call" and no_tool.answered and no_tool.answer_ttft_ms is not None
    # a client-side tool: its own class, at once (no timeout), with the tool it waits for
    assert waits.error_kind == "requires_action" and waits.answered and "get_weather" in waits.error_message
    assert waits.step_ms is None and waits.answer_ttft_ms is None and waits.client_latency_ms < 2000
    assert failed.error_kind == "error_event" and "the chat failed: 5000: Injected failure" in failed.error_message
    assert failed.time_to_tool_call_ms is not None and failed.tool_ms is not None  # measured before the failure


async def test_workflow_faults_keep_the_nodes_measured_before_them():
    with start_sim_in_thread(SimConfig(**FAST)) as sim:
        sim.server.set_faults(count=1, error_event_after_tokens=2)
        (failed,) = await workflow(sim.url, 1)
        sim.server.set_faults(count=1, stall_after_tokens=1, stall_s=3.0)
        (stalled,) = await workflow(sim.url, 1, timeout_s=1.0, first_token_timeout_s=1.0)
        sim.server.set_faults(count=1, fail_rate=1.0)
        (refused,) = await workflow(sim.url, 1)
    assert failed.error_kind == "error_event"
    assert "the workflow failed at node 'Answer': Injected error" in failed.error_message
    assert [n.status for n in failed.nodes] == ["succeeded"] * 3 + ["failed"]
    assert failed.nodes[-1].error.startswith("Injected error") and failed.app_latency_ms is not None
    # a node that never finishes: bounded by the step's limit, and shown unfinished
    assert stalled.error_kind == "read_timeout"
    assert stalled.nodes[-1].title == "Answer" and stalled.nodes[-1].status == "unfinished"
    assert stalled.nodes[-1].seen_ms is None and not stalled.nodes[-1].ok
    assert refused.error_kind == "http_5xx"


def test_request_shapes():
    plain = endpoint("http://127.0.0.1:1/v1", api="dify-workflow")
    body = workflow_body(plain, ToolSet())
    assert body["response_mode"] == "streaming" and body["user"] == "lpxtop-probe"
    assert body["inputs"]["query"].endswith(ToolSet().prompt) and body["inputs"]["query"].startswith("[")
    given = endpoint("http://127.0.0.1:1/v1", api="dify-workflow", random_prefix=False,
                     inputs=(("city", "Paris"), ("question", "{prompt}"), ("n", 3)))
    assert workflow_body(given, ToolSet())["inputs"] == {"city": "Paris", "question": ToolSet().prompt, "n": 3}
    for url, expected in (("https://api.coze.com/v1", "https://api.coze.com/v3/chat"),
                          ("https://api.coze.cn/v3/chat", "https://api.coze.cn/v3/chat"),
                          ("http://studio:8888/v3", "http://studio:8888/v3/chat"),
                          ("https://gw.example/coze/v1?tenant=a", "https://gw.example/coze/v3/chat?tenant=a")):
        assert coze_url(endpoint(url, api="coze")) == expected


def test_once_json_with_a_coze_bot_and_a_dify_workflow(tmp_path):
    from tests.support.cli import lpxtop

    with start_sim_in_thread(SimConfig(**FAST)) as sim:
        config = tmp_path / "platforms.toml"
        config.write_text(
            f'[[endpoint]]\nname = "bot"\nurl = "{sim.url}"\napi = "coze"\nbot_id = "7379462189365198898"\n\n'
            f'[[endpoint]]\nname = "flow"\nurl = "{sim.url}"\napi = "dify-workflow"\n'
            'inputs = {query = "{prompt}", unit = "celsius"}\n')
        result = lpxtop("once", "--config", str(config), "--samples", "2", "--json", "--no-metrics")
    assert result.returncode == 0, result.stderr
    doc = {e["name"]: e for e in json.loads(result.stdout)["endpoints"]}
    bot, flow = doc["bot"]["agent"], doc["flow"]["agent"]
    assert bot["api"] == "coze" and bot["steps_ok"] == 2 and bot["app_latency_resolution_ms"] == 1000.0
    for key in ("time_to_tool_call_ms", "tool_ms", "answer_ttft_ms", "answer_e2e_ms", "step_ms",
                "time_to_observation_ms", "app_latency_ms", "client_latency_ms", "output_tokens"):
        assert bot[key] is not None, key
    assert flow["api"] == "dify-workflow" and flow["steps_ok"] == 2
    assert [n["title"] for n in flow["nodes"]] == [n[0] for n in NODES]
    # the nodes of the steps whose times count (a client-limited step's are left out, as its other times)
    timed = 2 if flow["latency_includes_client_limited"] else 2 - flow["steps_client_limited"]
    assert all(n["runs"] == timed and n["errors"] == 0 and n["elapsed_ms"]["p50"] >= 0 for n in flow["nodes"])
    assert flow["nodes"][2]["elapsed_ms"]["p50"] >= 25  # the Weather node: the sim's tool latency
    assert doc["flow"]["status"] == "up" and doc["bot"]["status"] == "up"
