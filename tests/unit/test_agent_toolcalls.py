"""Streamed tool calls of every shape servers send are reassembled into the right calls.

Real captures (vLLM 0.32, llama-server) and the simulated server's shapes in tests/fixtures/toolcalls/
(provenance in SOURCES.md), then the hard cases inline, then any split of the arguments (hypothesis).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lpxtop.engine.probe.agentcall import ToolCallSink
from lpxtop.engine.probe.chunks import carries_token
from lpxtop.engine.probe.toolcalls import ToolCallAssembler
from lpxtop.http import SseParser

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "toolcalls"
ZURICH = {"city": "Zürich", "unit": "celsius"}


def replay(name: str) -> ToolCallSink:
    """Feed a capture through the parser and the agent probe's event sink, one read per event."""
    raw = (FIXTURES / name).read_bytes()
    events = ToolCallSink()
    parser = SseParser()
    for i, piece in enumerate(raw.split(b"\n\n")):
        for event in parser.feed(piece + b"\n\n", i):
            events.event(event.data, event.event, i)
    return events


@pytest.mark.parametrize("shape", ["vllm", "openai", "name_with_args", "repeated", "placeholder"])
def test_sim_shapes_give_one_whole_call(shape):
    events = replay(f"sim-{shape}.txt")
    (call,) = events.tool_calls.ordered()
    assert call.name == "get_weather"
    assert call.id and call.id.startswith("chatcmpl-tool-")
    # the ASCII arguments were split inside the \u00fc escape: joined, they are the right JSON
    assert "\\u00fc" in call.arguments
    assert json.loads(call.arguments_text) == ZURICH
    assert events.finish_reason == "tool_calls" and events.done


def test_sim_shapes_mark_their_quirks():
    assert {"repeated_name", "repeated_id"} <= replay("sim-repeated.txt").tool_calls.quirks
    assert "placeholder_args" in replay("sim-placeholder.txt").tool_calls.quirks
    assert replay("sim-vllm.txt").tool_calls.quirks == set()


def test_parallel_calls_told_apart_by_index():
    events = replay("sim-parallel.txt")
    first, second = events.tool_calls.ordered()
    assert (first.index, first.name) == (0, "get_weather")
    assert (second.index, second.name) == (1, "search_docs")
    assert json.loads(first.arguments_text) == ZURICH
    assert json.loads(second.arguments_text) == {"query": "streaming tool calls", "top_k": 3}
    assert first.id != second.id


def test_whole_call_in_one_chunk():
    events = replay("sim-whole.txt")
    (call,) = events.tool_calls.ordered()
    assert json.loads(call.arguments_text) == ZURICH
    # the one chunk named the function and completed it: both times are that chunk's
    assert events.tool_calls.first_name_ns == events.tool_calls.last_ns


def test_name_time_and_call_time_are_the_naming_and_last_fragment_chunks():
    events = replay("sim-vllm.txt")
    raw = (FIXTURES / "sim-vllm.txt").read_bytes().split(b"\n\n")
    naming = next(i for i, p in enumerate(raw) if b'"name"' in p)
    last_fragment = max(i for i, p in enumerate(raw) if b'"arguments"' in p)
    assert events.tool_calls.first_name_ns == naming
    assert events.tool_calls.last_ns == last_fragment
    # the finish-only chunk after it (delta {}) is not a token: E2E ends at the last fragment
    assert events.last_token_ns == last_fragment
    assert events.first_token_ns == naming  # the role-only chunk before it is not a token


def test_real_vllm_required_capture():
    events = replay("vllm-0.32.0-required.txt")
    (call,) = events.tool_calls.ordered()
    assert call.name == "get_time" and call.id == "chatcmpl-tool-9f40ce68c0518fce"
    assert json.loads(call.arguments_text) == {}  # the random model's arguments: valid JSON, schema-invalid
    assert events.finish_reason == "tool_calls" and events.usage_completion == 58
    assert events.tool_calls.quirks == set()


def test_real_vllm_named_capture():
    events = replay("vllm-0.32.0-named.txt")
    (call,) = events.tool_calls.ordered()
    assert call.name == "get_weather" and call.arguments_text == "500"
    assert events.finish_reason == "stop"


def test_real_llama_server_answers_text_when_it_does_not_enforce_the_choice():
    for name in ("llamacpp-server-0c1e5709-required.txt", "llamacpp-server-0c1e5709-named.txt"):
        events = replay(name)
        assert events.tool_calls.ordered() == []
        assert events.finish_reason == "length" and events.text


def deltas(*items: dict) -> list[dict]:
    return list(items)


def test_llama_cpp_first_chunk_with_name_id_and_brace():
    a = ToolCallAssembler()
    a.feed([{"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{"}}], 1)
    a.feed([{"index": 0, "function": {"arguments": '"city": "Paris"'}}], 2)
    a.feed([{"index": 0, "function": {"arguments": "}"}}], 3)
    (call,) = a.ordered()
    assert json.loads(call.arguments_text) == {"city": "Paris"}
    assert (a.first_name_ns, a.last_ns) == (1, 3)


def test_empty_object_first_fragment_is_a_placeholder_only_when_more_follows():
    a = ToolCallAssembler()
    a.feed([{"index": 0, "id": "c", "function": {"name": "get_time", "arguments": "{}"}}], 1)
    a.feed([{"index": 0, "function": {"arguments": '{"timezone": "UTC"}'}}], 2)
    assert json.loads(a.ordered()[0].arguments_text) == {"timezone": "UTC"}
    alone = ToolCallAssembler()
    alone.feed([{"index": 0, "id": "c", "function": {"name": "ping", "arguments": "{}"}}], 1)
    assert alone.ordered()[0].arguments_text == "{}"  # a function without arguments


def test_surrogate_pair_split_across_fragments():
    # A server that escapes non-BMP characters and splits between the two halves of the pair: the SSE
    # JSON decodes each half to a lone surrogate; joined, they are one character again.
    a = ToolCallAssembler()
    a.feed(json.loads('[{"index":0,"id":"c","function":{"name":"say","arguments":"{\\"text\\": \\"\\ud83d"}}]'), 1)
    a.feed(json.loads('[{"index":0,"function":{"arguments":"\\ude00\\"}"}}]'), 2)
    assert json.loads(a.ordered()[0].arguments_text) == {"text": "😀"}


def test_repeated_name_is_not_concatenated_and_a_name_in_pieces_is():
    a = ToolCallAssembler()
    for t in range(3):
        a.feed([{"index": 0, "id": "c", "function": {"name": "get_time", "arguments": ""}}], t)
    assert a.ordered()[0].name == "get_time"
    b = ToolCallAssembler()
    b.feed([{"index": 0, "id": "c", "function": {"name": "get_"}}], 1)
    b.feed([{"index": 0, "function": {"name": "time"}}], 2)
    assert b.ordered()[0].name == "get_time"


def test_missing_index_continues_the_call_and_a_new_id_starts_one():
    a = ToolCallAssembler()
    a.feed([{"id": "a", "function": {"name": "get_time", "arguments": '{"timezone":'}}], 1)
    a.feed([{"function": {"arguments": '"UTC"}'}}], 2)
    a.feed([{"id": "b", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}], 3)
    first, second = a.ordered()
    assert json.loads(first.arguments_text) == {"timezone": "UTC"}
    assert (second.name, json.loads(second.arguments_text)) == ("get_weather", {"city": "Oslo"})
    assert "missing_index" in a.quirks


def test_arguments_sent_as_an_object_are_kept_as_json_text():
    a = ToolCallAssembler()
    a.feed([{"index": 0, "id": "c", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}], 1)
    assert json.loads(a.ordered()[0].arguments_text) == {"city": "Rome"}
    assert "arguments_object" in a.quirks


def test_junk_in_tool_calls_is_ignored():
    a = ToolCallAssembler()
    assert not a.feed(None, 1)
    assert not a.feed("x", 1)
    assert not a.feed([1, None, "x", {"index": True}], 1)
    assert not a.feed([{"index": 0, "function": {"arguments": ""}}], 2)  # an empty fragment carries nothing
    assert a.last_ns is None


def test_token_event_rule_of_tool_call_streams():
    """Agent calls are read by the chat probe's one chunk rule (engine/probe/chunks.py)."""

    def is_token(delta: dict, before_first: bool) -> bool:
        return carries_token({"delta": delta}, before_first, with_usage=False)

    assert not is_token({"role": "assistant", "content": ""}, True)  # the role-only opening chunk
    assert not is_token({}, False)  # finish-only
    assert is_token({"content": ""}, True)  # a first chunk with a token key and no role
    assert is_token({"content": ""}, False)  # an empty token after the first (split UTF-8)
    assert is_token({"content": None, "tool_calls": [{"index": 0}]}, True)
    assert not is_token({"content": None, "tool_calls": []}, False)
    assert is_token({"reasoning_content": "x"}, True)


@settings(max_examples=60, deadline=None)
@given(
    args=st.dictionaries(st.sampled_from(["city", "query", "note", "n"]),
                         st.one_of(st.text(max_size=12), st.integers(-999, 999), st.booleans()), max_size=4),
    ascii_only=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
)
def test_any_split_of_the_arguments_reassembles(args, ascii_only, cuts):
    text = json.dumps(args, ensure_ascii=ascii_only)
    points = sorted({c % (len(text) + 1) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]
    a = ToolCallAssembler()
    a.feed([{"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}], 0)
    for t, piece in enumerate(pieces, start=1):
        # through the wire: each fragment is itself JSON-encoded in its chunk, then decoded
        wire = json.dumps([{"index": 0, "function": {"arguments": piece}}], ensure_ascii=ascii_only)
        a.feed(json.loads(wire), t)
    assert json.loads(a.ordered()[0].arguments_text) == args
