"""The incremental SSE parser over real captures, split at every possible byte."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from lpxtop.http import SseParser
from tests.support.paths import FIXTURES

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


def one_event_per_read(raw: bytes) -> list[bytes]:
    """The capture cut after each blank line: how a server's stream usually arrives, one event per read."""
    pieces = raw.split(b"\n\n")
    return [p + b"\n\n" for p in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])


def test_one_event_per_read_gives_what_byte_splits_give():
    for raw in (VLLM, LLAMA):
        parser = SseParser()
        fast = [(e.data, e.t_ns) for i, piece in enumerate(one_event_per_read(raw)) for e in parser.feed(piece, i)]
        assert [d for d, _ in fast] == parse_in_pieces(raw, list(range(0, len(raw), 7)))
        assert [t for _, t in fast] == list(range(len(fast))), "each event stamped with its own read"


@given(st.sampled_from([
    b"data:x\n\n", b"data:  two spaces\n\n", b"data: \n\n", b"data:\n\n", b"data: a\r\n\r\n",
    b"data: caf\xc3\xa9\n\n", b"data: \xff\n\n", b"data: a\ndata: b\n\n", b"data: a\n\n\n",
    b"data: [DONE]\n\n", b"data: x\n", b": comment\n\n", b"event: e\ndata: x\n\n",
]), st.sampled_from([b"", b"event: before\n", b"data: partial", b"data: a\r"]))
def test_a_single_event_read_parses_as_it_would_in_pieces(chunk, before):
    whole, pieces = SseParser(), SseParser()
    got = whole.feed(before, 0) + whole.feed(chunk, 1) + whole.close(2)
    want = pieces.feed(before, 0)
    for i in range(len(chunk)):  # byte by byte: never the one-event shortcut
        want += pieces.feed(chunk[i : i + 1], 1)
    want += pieces.close(2)
    assert [(e.data, e.event, e.t_ns) for e in got] == [(e.data, e.event, e.t_ns) for e in want]
