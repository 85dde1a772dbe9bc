"""Every hostile ending of a stream through every API path lpxtop sends, against a real loopback server:
one classification per ending, whichever path read it.

The paths: the chat probe, the completions probe, an agent step's call 1 (the tool call) and call 2
(the answer), a Dify app step, a Dify workflow step, a Coze bot step, and one load-test step's requests.
Each path's stream is written in its own dialect (chat chunks, completion chunks, tool-call deltas, Dify
app events, Dify workflow events, Coze events); the ending is the same fault in each. A fault a dialect
cannot carry (a Dify or Coze stream has no finish_reason) is not run there. Every request runs under
the same short limits (TIMEOUTS), so an ending that never ends is bounded and classified by them.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from lpxtop.engine.agent.coze import run_coze_step
from lpxtop.engine.agent.dify import run_dify_step
from lpxtop.engine.agent.difyworkflow import run_dify_workflow_step
from lpxtop.engine.agent.step import run_agent_step
from lpxtop.engine.agent.tools import ToolSet
from lpxtop.engine.probe import run_probe
from lpxtop.engine.probe import stream as stream_module
from lpxtop.engine.probe.clientlimit import LoopLag
from lpxtop.http import HttpClient
from lpxtop.load.step import StepRun, StepSpec
from lpxtop.model.probe import ERROR_KINDS
from tests.support.hostile import HostileServer, Reply, Request
from tests.support.sim import endpoint
from tests.support.stream_dialects import (
    CHAT,
    COMPLETIONS,
    COZE,
    DIFY,
    DIFY_WORKFLOW,
    DONE,
    ERROR,
    TOOL_CALL,
    Dialect,
    event,
)

pytestmark = pytest.mark.timeout(60)

TIMEOUTS = {"first_token_timeout_s": 0.5, "timeout_s": 1.5}  # every path's limits here
HOLD_S = 2.5  # a stream that stalls is held open past the whole request's limit


def split_end(dialect: Dialect) -> list[bytes]:
    """The good end with its end marker split across two reads, inside the marker."""
    *rest, last = dialect.end
    marker = dialect.marker
    at = last.index(marker) + len(marker) // 2
    return [*rest, last[:at], last[at:]]


# ending -> (the expected classification, the pieces for a dialect, the reply's framing)
ENDINGS: dict[str, tuple[str | None, Callable[[Dialect], list[bytes] | None], str]] = {
    "finish_reason error": ("error_event", lambda d: [*d.opening(), d.finish("error"), DONE] if d.finish else None,
                            "chunked"),
    "finish_reason abort": ("error_event", lambda d: [*d.opening(), d.finish("abort"), DONE] if d.finish else None,
                            "chunked"),
    "SSE event: error": ("error_event", lambda d: [*d.opening(), event(ERROR, "error")], "chunked"),
    # a gateway's error before the first event, then a whole answer: an error, not a Dify step's `no_tool_call`
    "SSE event: error, then the answer": ("error_event", lambda d: [event(ERROR, "error"), *d.opening(), *d.end],
                                          "chunked"),
    "error object beside the answer": ("error_event", lambda d: [*d.opening(), d.error_beside_answer, *d.end],
                                       "chunked"),
    "error object alone": ("error_event", lambda d: [*d.opening(), event({"error": ERROR})], "chunked"),
    "plain JSON body": ("not_streamed", lambda d: [json.dumps(d.body).encode()], "length"),
    "200 with an error object": ("error_event", lambda d: [json.dumps({"error": ERROR}).encode()], "length"),
    "cut stream (body ends)": ("stream_cut", lambda d: d.opening(), "chunked"),
    "cut stream (connection drops)": ("stream_cut", lambda d: d.opening(), "cut"),
    "end marker split across reads": (None, lambda d: [*d.opening(), *split_end(d)], "chunked"),
    # quiet streams, bounded by the limits (TIMEOUTS): keep-alives and nothing else, or a stall mid-answer
    # (a Dify workflow's Answer node that never finishes)
    "keep-alives only": ("first_token_timeout", lambda d: [d.keepalive] * 3, "hold"),
    "stall after the first tokens": ("read_timeout", lambda d: [*d.opening(), d.keepalive], "hold"),
    "malformed data: line": ("bad_json", lambda d: [*d.opening(), b"data: {\"event\": \"text_chunk\", \n\n", *d.end],
                             "chunked"),
    "data: line over 4 MiB": ("bad_json", lambda d: [*d.opening(), b"data: " + b"x" * (4 * 1024 * 1024 + 16), *d.end],
                              "chunked"),
}


def reply_of(pieces: list[bytes], framing: str) -> Reply:
    headers = {"Content-Type": "application/json" if framing == "length" else "text/event-stream"}
    if framing == "hold":  # the pieces, a little apart, then the connection held open with the body unfinished
        return Reply(pieces=pieces, headers=headers, gap_s=0.05, hold_s=HOLD_S)
    if framing == "cut":  # announce more than is sent, then close: the connection drops mid-body
        return Reply(pieces=pieces, headers=headers, framing="length", length=sum(map(len, pieces)) + 100)
    return Reply(pieces=pieces, headers=headers, framing=framing)


def good(dialect: Dialect) -> Reply:
    return reply_of([*dialect.opening(), *dialect.end], "chunked")


@pytest.fixture(autouse=True)
def short_waits(monkeypatch):
    """These servers hold the connection after the body: the wait for the body's end, shorter."""
    monkeypatch.setattr(stream_module, "DRAIN_TIMEOUT_S", 0.05)


async def chat_probe(reply: Reply) -> list[str | None]:
    with HostileServer(reply) as server:
        async with HttpClient() as client:
            sample = await run_probe(client, endpoint(server.url, model="m", **TIMEOUTS))
    return [sample.error_kind]


async def completions_probe(reply: Reply) -> list[str | None]:
    with HostileServer(reply) as server:
        async with HttpClient() as client:
            sample = await run_probe(client, endpoint(server.url, model="m", api="completions", **TIMEOUTS))
    return [sample.error_kind]


async def agent_step(call1: Reply, call2: Reply, failed_call: int) -> list[str | None]:
    def answer(request: Request) -> Reply:
        return call2 if json.loads(request.body).get("tool_choice") == "none" else call1

    with HostileServer(answer) as server:
        async with HttpClient() as client:
            step = await run_agent_step(client, endpoint(server.url, probes=("agent",), tool_latency_s=0.0,
                                                         **TIMEOUTS), ToolSet(), "m")
    if step.error_kind is not None:
        assert step.failed_call == failed_call, step.error_text
    return [step.error_kind]


async def agent_call1(reply: Reply) -> list[str | None]:
    return await agent_step(reply, good(CHAT), 1)


async def agent_call2(reply: Reply) -> list[str | None]:
    return await agent_step(good(TOOL_CALL), reply, 2)


async def dify_step(reply: Reply) -> list[str | None]:
    with HostileServer(reply) as server:
        async with HttpClient() as client:
            step = await run_dify_step(client, endpoint(server.url, api="dify", probes=("agent",), **TIMEOUTS), ToolSet())
    return [step.error_kind]


async def dify_workflow_step(reply: Reply) -> list[str | None]:
    with HostileServer(reply) as server:
        async with HttpClient() as client:
            step = await run_dify_workflow_step(
                client, endpoint(server.url, api="dify-workflow", probes=("agent",), **TIMEOUTS), ToolSet())
    if step.error_kind in ("read_timeout", "stream_cut"):  # the node that was running is shown unfinished
        assert step.nodes[-1].title == "Answer" and step.nodes[-1].status == "unfinished"
    return [step.error_kind]


async def coze_step(reply: Reply) -> list[str | None]:
    with HostileServer(reply) as server:
        async with HttpClient() as client:
            step = await run_coze_step(
                client, endpoint(server.url, api="coze", bot_id="b1", probes=("agent",), **TIMEOUTS), ToolSet())
    return [step.error_kind]


async def load_step(reply: Reply) -> list[str | None]:
    with HostileServer(reply) as server:
        spec = StepSpec(index=0, endpoint=endpoint(server.url, model="m", **TIMEOUTS), model="m", include_usage=True,
                        warmup_s=0.0, duration_s=0.1, concurrency=1)
        async with HttpClient() as client:
            run = StepRun(spec, client, LoopLag())
            await run.run()
    assert run.counted.records, "the step counted no request"
    return sorted({r.error_kind for r in run.counted.records}, key=str)


PATHS: dict[str, tuple[Dialect, Callable]] = {
    "chat probe": (CHAT, chat_probe),
    "completions probe": (COMPLETIONS, completions_probe),
    "agent call 1": (TOOL_CALL, agent_call1),
    "agent call 2": (CHAT, agent_call2),
    "dify app": (DIFY, dify_step),
    "dify workflow": (DIFY_WORKFLOW, dify_workflow_step),
    "coze bot": (COZE, coze_step),
    "load request": (CHAT, load_step),
}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("ending", list(ENDINGS))
async def test_one_classification_per_ending_on_every_path(ending, path):
    expected, pieces_of, framing = ENDINGS[ending]
    dialect, run = PATHS[path]
    pieces = pieces_of(dialect)
    if pieces is None:
        pytest.skip(f"a {dialect.name} stream cannot carry this ending")
    assert expected is None or expected in ERROR_KINDS
    assert await run(reply_of(pieces, framing)) == [expected]
