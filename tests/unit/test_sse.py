"""The incremental SSE parser over real captures, split at every possible byte."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from lpxtop.engine.sse import SseParser
from tests.conftest import FIXTURES

VLLM = (FIXTURES / "sse" / "vllm-0.32.0-chat-stream-include-usage.txt").read_bytes()
LLAMA = (FIXTURES / "sse" / "llamacpp-server-0c1e5709-chat-stream-include-usage.txt").read_bytes()


def parse_in_pieces(raw: bytes, cuts: list[int]) -> list[str]:
    parser = SseParser()
    events = []
    last = 0
    for cut in sorted(set(cuts)) + [len(raw)]:
        events += parser.feed(raw[last:cut], cut)
        last = cut
    events += parser.close(len(raw))
    return [e.data for e in events]


def test_vllm_capture_gives_eleven_events_ending_in_done():
    data = parse_in_pieces(VLLM, [])
    # By hand from the file: 1 role chunk, 8 content chunks, 1 usage chunk, [DONE].
    assert len(data) == 11
    assert json.loads(data[0])["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert json.loads(data[9])["usage"]["completion_tokens"] == 8
    assert data[-1] == "[DONE]"


def test_llamacpp_capture_first_chunk_has_null_content():
    data = parse_in_pieces(LLAMA, [])
    assert json.loads(data[0])["choices"][0]["delta"]["content"] is None
    assert data[-1] == "[DONE]"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(VLLM)), max_size=40))
def test_any_split_of_the_vllm_capture_gives_the_same_events(cuts):
    assert parse_in_pieces(VLLM, cuts) == parse_in_pieces(VLLM, [])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(LLAMA)), max_size=40), st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_line_endings_and_splits_do_not_matter(cuts, newline):
    raw = LLAMA.replace(b"\n", newline)
    cuts = [c for c in cuts if c <= len(raw)]
    assert parse_in_pieces(raw, cuts) == parse_in_pieces(LLAMA, [])


def test_split_inside_a_multibyte_character_decodes_whole():
    raw = 'data: {"c": "é漢"}\n\n'.encode()
    for cut in range(1, len(raw)):
        assert parse_in_pieces(raw, [cut]) == ['{"c": "é漢"}']


def test_each_event_carries_the_time_of_the_read_that_completed_it():
    parser = SseParser()
    assert parser.feed(b"data: a\n", 1) == []
    events = parser.feed(b"\ndata: b\n\ndata: c", 2)
    assert [(e.data, e.t_ns) for e in events] == [("a", 2), ("b", 2)]
    assert [(e.data, e.t_ns) for e in parser.close(3)] == [("c", 3)]


def test_comments_multiline_data_and_event_names():
    parser = SseParser()
    events = parser.feed(b": keep-alive\nevent: error\ndata: one\ndata: two\n\n", 0)
    assert [(e.event, e.data) for e in events] == [("error", "one\ntwo")]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_garbage_never_raises(raw):
    parser = SseParser()
    parser.feed(raw, 0)
    parser.close(0)


def test_an_endless_line_is_bounded():
    parser = SseParser()
    for _ in range(5):
        parser.feed(b"x" * (1024 * 1024), 0)
    assert parser.overflowed
