"""The platforms' own stream shapes (tests/fixtures/platforms, built from their documentation, SDK tests and
source: SOURCES.md there), each served over a real loopback socket to the step that reads it: every
capture read for what it says, in one read and split into many."""

from __future__ import annotations

import pytest

from lpxtop.engine.agent.coze import run_coze_step
from lpxtop.engine.agent.dify import run_dify_step
from lpxtop.engine.agent.difyworkflow import run_dify_workflow_step
from lpxtop.engine.agent.tools import ToolSet
from lpxtop.engine.probe import stream as stream_module
from lpxtop.http import HttpClient
from tests.support.hostile import HostileServer, Reply
from tests.support.paths import FIXTURES
from tests.support.sim import endpoint

pytestmark = pytest.mark.timeout(60)
CAPTURES = FIXTURES / "platforms"
RUNS = {"coze": run_coze_step, "dify": run_dify_step, "dify-workflow": run_dify_workflow_step}


@pytest.fixture(autouse=True)
def short_waits(monkeypatch):
    monkeypatch.setattr(stream_module, "DRAIN_TIMEOUT_S", 0.05)


def pieces_of(name: str, split: bool) -> list[bytes]:
    data = (CAPTURES / name).read_bytes()
    if not split:
        return [data]
    return [data[i:i + 7] for i in range(0, len(data), 7)]  # every event cut across reads


async def step_of(name: str, api: str, split: bool = False, **reply):
    headers = {"Content-Type": "application/json" if name.endswith(".json") else "text/event-stream"}
    with HostileServer(Reply(pieces=pieces_of(name, split), headers=headers, **reply)) as server:
        async with HttpClient() as client:
            config = endpoint(server.url, api=api, probes=("agent",), bot_id="7379462189365198898", timeout_s=3.0,
                              first_token_timeout_s=3.0)
            return await RUNS[api](client, config, ToolSet())


@pytest.mark.parametrize("split", [False, True], ids=["whole", "split"])
async def test_coze_captures(split):
    text = await step_of("coze_chat_text.sse", "coze", split)
    assert text.error_kind == "no_tool_call" and text.answered  # answered, without a tool
    assert text.answer_ttft_ms is not None and text.answer_e2e_ms >= text.answer_ttft_ms
    assert (text.input_tokens, text.output_tokens, text.total_tokens) == (614, 19, 633)
    assert text.call1_response_id == "7382159487131697202"

    plugin = await step_of("coze_chat_plugin.sse", "coze", split)
    assert plugin.ok, plugin.error_text
    assert plugin.tool_name == "toutiaosousuo-search" and plugin.args_valid_json is True
    assert plugin.tool_ms is not None and plugin.time_to_observation_ms is not None
    assert (plugin.input_tokens, plugin.output_tokens, plugin.total_tokens) == (2224, 1173, 3397)
    assert plugin.app_latency_ms == 2000.0 and plugin.app_latency_resolution_ms == 1000.0

    studio = await step_of("coze_studio_chat.sse", "coze", split)
    assert studio.ok, studio.error_text  # ends at chat.completed; its stream.done has no data line
    assert studio.call1_response_id == "7507152942412283930" and studio.tool_name == "get_weather"
    assert (studio.input_tokens, studio.output_tokens) == (100, 20) and studio.app_latency_ms == 3000.0

    waits = await step_of("coze_requires_action.sse", "coze", split)
    assert waits.error_kind == "requires_action" and "local_data_assistant" in waits.error_message
    assert waits.time_to_tool_call_ms is not None and waits.step_ms is None


async def test_coze_failures_fail_with_their_message():
    failed = await step_of("coze_chat_failed.sse", "coze")
    assert failed.error_kind == "error_event" and failed.error_message == "the chat failed: 5000: event interval error"
    error = await step_of("coze_chat_error.sse", "coze")
    assert error.error_kind == "error_event" and error.error_message == "an error event without a message"
    body = await step_of("coze_error_body.json", "coze", framing="length")
    assert body.error_kind == "error_event" and body.error_message == "4000: json fail"
    # coze-go's `done` with an empty data line ends the stream, but no chat completed: an answer, then the end
    done = await step_of("coze_go_done_empty.sse", "coze")
    assert done.error_kind == "no_tool_call" and done.answer_ttft_ms is not None


@pytest.mark.parametrize("split", [False, True], ids=["whole", "split"])
async def test_dify_captures(split):
    flow = await step_of("dify_workflow.sse", "dify-workflow", split)
    assert flow.ok, flow.error_text
    assert [(n.title, n.node_type, n.status) for n in flow.nodes] == [
        ("Start", "start", "succeeded"), ("LLM", "llm", "succeeded"), ("End", "end", "succeeded")]
    assert [n.elapsed_ms for n in flow.nodes] == pytest.approx([324.0, 1520.0, 2.0])
    assert flow.app_latency_ms == pytest.approx(1876.0) and flow.total_tokens == 120
    assert flow.answer_ttft_ms is not None and flow.step_ms == flow.client_latency_ms
    assert flow.call1_response_id == "5ad498-f0c7-4085-b384-88cbe6290" and flow.tool_name is None

    failed = await step_of("dify_workflow_failed.sse", "dify-workflow", split)
    assert failed.error_kind == "error_event"
    assert failed.error_message == "the workflow failed at node 'Fetch': Request timed out after 10s"
    assert failed.nodes[0].error == "Request timed out after 10s" and failed.app_latency_ms == pytest.approx(10050.0)

    chat = await step_of("dify_chatflow.sse", "dify", split)
    assert chat.ok, chat.error_text  # a chatflow need not call a tool
    assert [n.title for n in chat.nodes] == ["Start"] and chat.nodes[0].elapsed_ms == pytest.approx(324.0)
    assert chat.app_ttft_ms == pytest.approx(412.0) and chat.app_generate_ms == pytest.approx(905.0)
    assert chat.app_latency_ms == pytest.approx(1381.760165997548)
    assert (chat.input_tokens, chat.output_tokens) == (1033, 135)
