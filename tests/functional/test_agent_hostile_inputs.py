"""Hostile agent inputs: huge and deeply nested tool-call arguments from a real loopback server, and a
deeply nested tools file. Each is a classified step or a clear configuration error, never a silent cut
called ok and never a RecursionError."""

from __future__ import annotations

import json
import logging

import pytest

from lpxtop.config import settle_agent_settings
from lpxtop.engine.agent.prober import AgentProber
from lpxtop.engine.agent.step import run_agent_step
from lpxtop.engine.agent.tools import ToolSet, load_tool_set
from lpxtop.engine.probe.toolcalls import MAX_ARGUMENT_CHARS
from lpxtop.http import HttpClient
from tests.support.hostile import HostileServer, Reply, Request
from tests.support.sim import endpoint

pytestmark = pytest.mark.timeout(60)

HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
DEEP = 100_000


def event(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(delta: dict, finish: str | None = None) -> bytes:
    return event({**HEAD, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def tool_delta(arguments: object, name: str | None = None) -> bytes:
    call: dict = {"index": 0, "function": {"arguments": arguments}}
    if name is not None:
        call.update(id="call_1", type="function")
        call["function"]["name"] = name
    return chunk({"tool_calls": [call]})


ROLE = chunk({"role": "assistant", "content": ""})
DONE = b"data: [DONE]\n\n"
ANSWER = [ROLE, chunk({"content": "It rains."}), chunk({}, "stop"), DONE]


def agent_server(call1: list[bytes]) -> HostileServer:
    """Call 1 gets `call1`; call 2 (`tool_choice: "none"`) a short answer."""

    def reply(request: Request) -> Reply:
        second = json.loads(request.body).get("tool_choice") == "none"
        return Reply(pieces=ANSWER if second else call1)

    return HostileServer(reply)


async def step(server: HostileServer):
    async with HttpClient() as client:
        return await run_agent_step(client, endpoint(server.url, probes=("agent",), tool_latency_s=0.0), ToolSet(), "m")


async def test_ten_megabytes_of_arguments_are_bounded_and_classified_not_cut_and_called_ok():
    # 100 fragments of 100 kB: once the bound is passed, a later fragment small enough to fit must not
    # be added after the dropped ones (that gave valid JSON with 9 MB missing, and a step called ok).
    pad = "x" * 100_000
    call1 = [ROLE, tool_delta('{"city": "Paris", "pad": "', name="get_weather"),
             *[tool_delta(pad) for _ in range(100)], tool_delta('"}'), chunk({}, "tool_calls"), DONE]
    with agent_server(call1) as server:
        s = await step(server)
    assert s.error_kind == "bad_tool_args", s.error_text
    assert f"{MAX_ARGUMENT_CHARS}" in s.error_message and "not judged" in s.error_message
    assert s.args_valid_json is False and s.failed_call is None  # the server answered: call 2 still ran
    assert s.step_ms is not None


async def test_arguments_nested_deep_are_a_classified_step_not_a_recursion_error(caplog):
    deep = "[" * DEEP + "]" * DEEP  # 200 kB: under the size bound, far past any parser's depth
    call1 = [ROLE, tool_delta('{"city": ', name="get_weather"), tool_delta(deep), tool_delta("}"),
             chunk({}, "tool_calls"), DONE]
    with agent_server(call1) as server:
        s = await step(server)
        # and through the prober, as the engine runs it: no traceback logged
        caplog.set_level(logging.ERROR)
        prober = AgentProber(endpoint(server.url, probes=("agent",), tool_latency_s=0.0), 60.0, 100)
        async with HttpClient() as client:
            again = await prober.step(client, "m")
    for each in (s, again):
        assert each.error_kind == "bad_tool_args", each.error_text
        assert "nested deeper" in each.error_message
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_arguments_sent_as_an_object_nested_deep_make_the_chunk_bad_json():
    nested = "[" * DEEP + "]" * DEEP
    body = ('data: {"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function",'
            '"function":{"name":"get_weather","arguments":' + nested + '}}]},"finish_reason":null}]}\n\n').encode()
    with agent_server([ROLE, body, chunk({}, "tool_calls"), DONE]) as server:
        s = await step(server)
    assert (s.error_kind, s.failed_call) == ("bad_json", 1), s.error_text


def test_a_tools_file_nested_deep_is_a_clear_configuration_error(tmp_path):
    path = tmp_path / "tools.json"
    nested = "[" * DEEP + "]" * DEEP
    path.write_text('[{"type": "function", "function": {"name": "f", "parameters": ' + nested + "}}]")
    with pytest.raises(ValueError, match="nested deeper"):
        load_tool_set(path)
    # a schema deep enough to parse, yet deeper than any tool needs, is refused too
    schema: dict = {"type": "object"}
    for _ in range(200):
        schema = {"type": "object", "properties": {"a": schema}}
    path.write_text(json.dumps([{"type": "function", "function": {"name": "f", "parameters": schema}}]))
    with pytest.raises(ValueError, match="nested deeper"):
        load_tool_set(path)
    with pytest.raises(ValueError, match="nested deeper"):
        settle_agent_settings(endpoint("http://127.0.0.1:9/v1", probes=("agent",), tools_file=str(path)))
