"""Platform streams that break their own order, repeat themselves or run without end, over real loopback:
each read for what can be known, bounded, and never a crash. (The endings every path shares, keep-alives
only, stalls, malformed and huge `data:` lines, error events and error bodies, are in
test_stream_endings.py.)"""

from __future__ import annotations

import json

import pytest

from lpxtop.engine.agent.coze import run_coze_step
from lpxtop.engine.agent.difyworkflow import run_dify_workflow_step
from lpxtop.engine.agent.nodes import summarize_nodes
from lpxtop.engine.agent.tools import ToolSet
from lpxtop.engine.probe import stream as stream_module
from lpxtop.http import HttpClient
from lpxtop.model.platform import MAX_NODES
from tests.support.hostile import HostileServer, Reply
from tests.support.sim import endpoint
from tests.support.stream_dialects import COZE, COZE_CHAT, coze, coze_message, node, workflow_event

pytestmark = pytest.mark.timeout(60)
LIMITS = {"first_token_timeout_s": 1.0, "timeout_s": 2.0}


@pytest.fixture(autouse=True)
def short_waits(monkeypatch):
    monkeypatch.setattr(stream_module, "DRAIN_TIMEOUT_S", 0.05)


async def workflow(pieces: list[bytes], **reply):
    with HostileServer(Reply(pieces=pieces, **reply)) as server:
        async with HttpClient() as client:
            return await run_dify_workflow_step(
                client, endpoint(server.url, api="dify-workflow", probes=("agent",), **LIMITS), ToolSet())


async def coze_bot(pieces: list[bytes]):
    with HostileServer(Reply(pieces=pieces)) as server:
        async with HttpClient() as client:
            return await run_coze_step(client, endpoint(server.url, api="coze", bot_id="b1", probes=("agent",),
                                                        **LIMITS), ToolSet())


FINISHED = workflow_event("workflow_finished", id="r1", status="succeeded", elapsed_time=0.5, total_tokens=3)


async def test_workflow_events_out_of_order_are_taken_as_they_come():
    step = await workflow([
        workflow_event("text_chunk", text="It"),  # text before the workflow started
        workflow_event("workflow_started", id="r1"),
        node("node_finished", "a", "Lookup", "tool", status="succeeded", elapsed_time=0.03),  # finished first...
        node("node_started", "a", "Lookup", "tool"),  # ...then started: passed over
        node("node_started", "b", "Answer", "llm"),
        node("node_started", "b", "Answer", "llm"),  # twice
        node("node_finished", "b", "Answer", "llm", status="succeeded", elapsed_time=0.2),
        node("node_finished", "b", "Answer", "llm", status="failed", elapsed_time=9.0),  # twice: the first counts
        node("node_started", "c", "End", "end"),  # never finishes: the workflow ends first
        FINISHED,
    ])
    assert step.ok, step.error_text
    lookup, answer, end = step.nodes
    assert (lookup.title, lookup.start_ms, lookup.seen_ms, lookup.elapsed_ms) == ("Lookup", None, None, 30.0)
    assert lookup.ok and step.tool_name is None  # a Tool node without a start is no tool decision
    assert answer.status == "succeeded" and answer.elapsed_ms == 200.0 and answer.seen_ms >= 0
    assert end.status == "unfinished" and not end.ok
    assert step.answer_ttft_ms is not None and step.app_latency_ms == 500.0
    summary = {n.title: n for n in summarize_nodes((step,))}
    assert summary["End"].errors == 1 and summary["Answer"].errors == 0 and summary["Lookup"].offset_ms is None


async def test_a_workflow_with_thousands_of_node_runs_keeps_a_bounded_few():
    runs = []
    for i in range(500):  # a loop node's body, run 500 times
        same = {"id": f"r{i}", "node_id": "loop-body", "title": "Loop body", "node_type": "code"}
        runs += [workflow_event("node_started", **same),
                 workflow_event("node_finished", **same, status="succeeded", elapsed_time=0.001)]
    step = await workflow([workflow_event("workflow_started", id="r1"), *runs, FINISHED])
    assert step.ok and len(step.nodes) == MAX_NODES and step.nodes_left_out == 500 - MAX_NODES
    (summary,) = summarize_nodes((step,))
    assert summary.runs == MAX_NODES and summary.elapsed_ms.p50 == pytest.approx(1.0)


async def test_node_fields_from_outside_are_bounded_and_scrubbed():
    title = "\x1b[31mEvil\x1b[0m " + "t" * 5000
    step = await workflow([
        workflow_event("workflow_started", id="r1"),
        node("node_started", "a", title, "llm"),
        node("node_finished", "a", title, "llm", status="failed", elapsed_time=-3,
             error="Bearer sk-abcdefghijklmnop leaked"),
        workflow_event("workflow_finished", id="r1", status="partial-succeeded", elapsed_time="soon"),
    ])
    assert step.ok, step.error_text  # partial-succeeded: a node failed into its error branch
    (only,) = step.nodes
    assert "\x1b" not in only.title and len(only.title) <= 100
    assert only.elapsed_ms is None and step.app_latency_ms is None  # a negative or a string is no duration
    assert "sk-abcdefghijklmnop" not in only.error and only.status == "failed"


async def test_a_workflow_whose_events_hold_no_data_of_the_right_shape():
    step = await workflow([
        b'data: {"event": "workflow_started", "data": "not an object"}\n\n',
        b'data: {"event": "node_started", "data": [1, 2]}\n\n',
        b'data: {"event": "node_finished", "data": null}\n\n',
        b'data: {"event": "text_chunk", "data": {"text": 42}}\n\n',
        b'data: {"event": "workflow_finished", "data": {"status": "stopped"}}\n\n',
    ])
    assert step.error_kind == "error_event" and step.error_message.startswith("the workflow stopped")
    # a start and a finish without a run id cannot be paired: two runs, neither with a time
    assert [(n.title, n.seen_ms) for n in step.nodes] == [("?", None), ("?", None)] and step.answer_ttft_ms is None


async def test_coze_events_out_of_order():
    opening = COZE.opening()
    created, call, response, *answers = opening
    step = await coze_bot([answers[0], response, created, call, *answers[1:], *COZE.end])
    # the answer before any tool is the answer's start; the result before its call is passed over
    assert step.ok, step.error_text
    assert step.answer_ttft_ms is not None and step.tool_ms is None and step.time_to_tool_call_ms is not None
    after_the_end = await coze_bot([*opening, COZE.end[0], coze("conversation.chat.failed", {**COZE_CHAT}),
                                    COZE.end[1]])
    assert after_the_end.ok  # reading stops at chat.completed: what follows is not the chat's


async def test_coze_messages_of_odd_shapes():
    step = await coze_bot([
        coze("conversation.chat.created", COZE_CHAT),
        coze("conversation.message.completed", coze_message("function_call", "not json {")),
        coze("conversation.message.completed", coze_message("tool_response", "")),
        coze("conversation.message.delta", coze_message("answer", "")),  # empty: no token
        coze("conversation.message.delta", {**coze_message("answer", "x"), "content": 7}),  # not text: no token
        coze("conversation.message.delta", coze_message("answer", "It")),
        coze("conversation.audio.delta", {"content": "AAAA"}),
        coze("conversation.message.delta", coze_message("mystery", "?")),
        coze("conversation.chat.completed", {**COZE_CHAT, "usage": {"output_count": -4, "input_count": True}}),
    ])
    assert step.error_kind == "bad_tool_args" and step.answered and step.tool_name is None
    assert step.answer_ttft_ms == step.answer_e2e_ms and step.output_tokens is None and step.input_tokens is None


async def test_a_coze_chat_cancelled_fails_with_its_message():
    step = await coze_bot([coze("conversation.chat.created", COZE_CHAT),
                           coze("conversation.chat.cancelled", {**COZE_CHAT, "status": "cancelled"})])
    assert step.error_kind == "error_event" and step.error_message == "the chat was cancelled"
    studio_error = await coze_bot([coze("conversation.chat.created", COZE_CHAT),
                                   coze("conversation.error", {"code": 700012, "msg": json.dumps("bot not found")})])
    assert studio_error.error_kind == "error_event" and "700012" in studio_error.error_message
