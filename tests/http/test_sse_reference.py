"""The hand-written SSE parser held to a maintained one (rule 7): httpx-sse's line and event decoders.

Why httpx-sse: it is the SSE decoder of the httpx ecosystem (the OpenAI and Anthropic Python clients
stream through httpx), its decoder follows the WHATWG event-stream interpretation line by line, and it
is pure Python with no I/O of its own, so the same bytes in the same reads can be given to both.

Same bytes, same reads, on both: the events (data and event name) must be equal, and each event must
carry the time of the read that completed it. Where they may differ, by design:
- httpx-sse keeps a read's trailing CR until the next read (to join a CRLF split between reads); lpxtop
  ends the line at the CR (the spec's rule) and then skips the LF. So after a read ending in CR, lpxtop's
  event may be stamped one read earlier, never later;
- httpx-sse dispatches an event that has only `event:`/`id:`/`retry:` fields (empty data); the spec and
  lpxtop do not, so generated blocks with an `event:` line always have data;
- lpxtop drops a leading byte order mark (the spec's rule; tests/http/test_sse.py), httpx-sse does not:
  generated streams have none.
"""

from __future__ import annotations

import codecs

import pytest
from httpx_sse._decoders import SSEDecoder, SSELineDecoder
from hypothesis import given, settings
from hypothesis import strategies as st

from lpxtop.http import SseParser
from tests.support.paths import FIXTURES
from tests.support.streams import reads_of, sim_stream

CAPTURES = [
    (FIXTURES / "sse" / "vllm-0.32.0-chat-stream-include-usage.txt").read_bytes(),
    (FIXTURES / "sse" / "llamacpp-server-0c1e5709-chat-stream-include-usage.txt").read_bytes(),
]
STREAMS = CAPTURES + [sim_stream("chat", 12, 0.3, seed=1), sim_stream("completions", 12, 0.25, seed=2)]


def ours(reads: list[tuple[bytes, int]]) -> list[tuple[str, str, int]]:
    parser = SseParser()
    # an event without a name is of type "message" (the spec's default, which httpx-sse reports)
    return [(e.data, e.event or "message", e.t_ns) for chunk, t in reads for e in parser.feed(chunk, t)]


def reference(reads: list[tuple[bytes, int]]) -> list[tuple[str, str, int]]:
    text = codecs.getincrementaldecoder("utf-8")("replace")
    lines, events = SSELineDecoder(), SSEDecoder()
    out = []
    for chunk, t in reads:
        decoded = text.decode(chunk)
        for line in lines.decode(decoded) if decoded else []:
            event = events.decode(line)
            if event is not None:
                out.append((event.data, event.event, t))
    return out


def assert_same(raw: bytes, cuts: list[int]) -> None:
    reads = reads_of(raw, cuts)
    mine, theirs = ours(reads), reference(reads)
    # A CR at the very end of the stream: httpx-sse holds it for a next read that never comes.
    if raw.endswith(b"\r") and len(theirs) == len(mine) - 1:
        mine = mine[:-1]
    assert [(d, e) for d, e, _ in mine] == [(d, e) for d, e, _ in theirs]
    cr_ends = any(chunk.endswith(b"\r") for chunk, _ in reads)
    for (_, _, t_mine), (_, _, t_ref) in zip(mine, theirs):
        assert t_mine == t_ref or (cr_ends and t_mine < t_ref), (t_mine, t_ref)


@pytest.mark.parametrize("index", range(len(STREAMS)))
@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_every_split_point_of_real_and_simulated_streams_matches_the_reference(index, newline):
    raw = STREAMS[index].replace(b"\n", newline)
    assert len(reference(reads_of(raw, []))) >= 10
    # every byte of the real captures with their own LF; every 7th byte otherwise (the same code paths)
    step = 1 if newline == b"\n" and index < len(CAPTURES) else 7
    for cut in range(0, len(raw) + 1, step):
        assert_same(raw, [cut])


def test_one_event_per_read_matches_the_reference():
    for raw in STREAMS:
        cuts = [i + 2 for i in range(len(raw)) if raw[i : i + 2] == b"\n\n"]
        assert_same(raw, cuts)


_TEXT = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=30)
_NAME = st.text(st.characters(blacklist_characters="\r\n:", blacklist_categories=("Cs",)), max_size=8)
_NEWLINE = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def event_streams(draw) -> bytes:
    """Valid event streams: blocks of data lines (with an optional event name, comments, unknown fields)
    ended by a blank line, with any mix of line endings."""
    out: list[str] = []
    for _ in range(draw(st.integers(0, 8))):
        lines = [f"data:{draw(st.sampled_from(['', ' ']))}{draw(_TEXT)}" for _ in range(draw(st.integers(1, 3)))]
        if draw(st.booleans()):
            lines.insert(draw(st.integers(0, len(lines))), f"event: {draw(_NAME)}")
        for _ in range(draw(st.integers(0, 2))):
            extra = draw(st.sampled_from([f":{draw(_TEXT)}", f"x{draw(_NAME)}: {draw(_TEXT)}", "data"]))
            lines.insert(draw(st.integers(0, len(lines))), extra)
        out += [line + draw(_NEWLINE) for line in lines] + [draw(_NEWLINE)]
    return "".join(out).encode()


def cuts_of(draw_from: st.DataObject, raw: bytes, most: int) -> list[int]:
    return draw_from.draw(st.lists(st.integers(0, len(raw)), max_size=most))


@settings(max_examples=200, deadline=None)
@given(event_streams(), st.data())
def test_generated_streams_in_any_chunking_match_the_reference(raw, data):
    assert_same(raw, cuts_of(data, raw, 12))


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(STREAMS), st.data())
def test_real_streams_in_any_chunking_match_the_reference(raw, data):
    assert_same(raw, cuts_of(data, raw, 40))


@pytest.mark.slow
@settings(max_examples=10_000, deadline=None)
@given(event_streams(), st.data())
def test_generated_streams_in_any_chunking_match_the_reference_long(raw, data):
    assert_same(raw, cuts_of(data, raw, 40))


@pytest.mark.slow
@settings(max_examples=5_000, deadline=None)
@given(st.sampled_from(STREAMS), st.sampled_from([b"\n", b"\r\n", b"\r"]), st.data())
def test_real_streams_in_any_chunking_match_the_reference_long(raw, newline, data):
    raw = raw.replace(b"\n", newline)
    assert_same(raw, cuts_of(data, raw, 200))
