"""The probe fed any split of a valid stream gives the same Sample; any bytes give a classified one.

The probe's reads (`BatchedReads.take`, what `Response.feed` calls with each read and its arrival time)
is driven here with reads cut anywhere, each stamped with the offset where it ends. Fed one byte per
read, each token event's time is the offset of the byte that completed it; cut any other way, it must
be the end of the read that holds that byte, whichever reads the lazy batching parsed together, and
every other figure (counts, finish, status) must be the same.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lpxtop.engine.probe import chat
from lpxtop.engine.probe.chunks import MAX_TOKEN_COUNT, ChunkSink
from lpxtop.engine.probe.errors import StreamError
from lpxtop.engine.probe.reads import BatchedReads
from lpxtop.engine.probe.stream import StreamOutcome
from lpxtop.engine.probe.tracecontext import new_trace_context
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.probe import ERROR_KINDS
from tests.support.paths import FIXTURES
from tests.support.streams import reads_of, sim_stream

VLLM = (FIXTURES / "sse" / "vllm-0.32.0-chat-stream-include-usage.txt").read_bytes()
LLAMA = (FIXTURES / "sse" / "llamacpp-server-0c1e5709-chat-stream-include-usage.txt").read_bytes()
STREAMS = {
    "vllm": VLLM,
    "llamacpp": LLAMA,
    "sim-chat": sim_stream("chat", 12, 0.3, seed=3),
    "sim-completions": sim_stream("completions", 10, 0.3, seed=4),
    "vllm-crlf": VLLM.replace(b"\n", b"\r\n"),
}
ENDPOINT = EndpointConfig(name="e", url="http://127.0.0.1:1/v1")


class _NoWatchdog:
    """The sink re-arms the probe's watchdog at the first token; here there is no task to cancel."""

    def arm(self, deadline_ns: int) -> None:
        pass

    def absorb(self) -> bool:
        return False


def run_sink(reads: list[tuple[bytes, int]]):
    """What run_probe makes of these reads: (sample, error kind)."""
    sink = ChunkSink()
    events = BatchedReads(sink, _NoWatchdog(), 10**18)
    kind = None
    try:
        ended = True
        for chunk, t in reads:
            if events.take(chunk, t):
                ended = False
                break
        events.catch_up()
        if ended:
            events.close()
        if not sink.token_ns:
            kind = "empty"
        elif not sink.finished:
            kind = "stream_cut"
    except StreamError as err:
        kind = err.kind
    out = StreamOutcome(start_ns=0, wall_time=0.0, sent_wall_ns=0, trace=new_trace_context(), status=200,
                        error_kind=kind)
    return chat._sample(ENDPOINT, sink, out), kind


def figures(sample) -> tuple:
    return (sample.ok, sample.output_tokens, sample.output_tokens_approx, sample.prompt_tokens,
            sample.finish_reason, sample.model, sample.response_id, len(sample.token_event_ms))


_BYTEWISE = {name: run_sink(reads_of(raw, range(len(raw))))[0] for name, raw in STREAMS.items()}


def assert_same_as_bytewise(name: str, cuts) -> None:
    raw = STREAMS[name]
    reads = reads_of(raw, cuts)
    sample, kind = run_sink(reads)
    base = _BYTEWISE[name]
    assert kind is None and sample.ok
    assert figures(sample) == figures(base)
    ends = [t for _, t in reads]
    # each token is stamped with the end of the read holding the byte that completed its event
    expected = tuple(min(e for e in ends if e * 1e-6 >= t - 1e-12) * 1e-6 for t in base.token_event_ms)
    assert sample.token_event_ms == pytest.approx(expected, abs=1e-9)
    assert sample.first_event_ms == pytest.approx(min(e for e in ends if e * 1e-6 >= base.first_event_ms - 1e-12) * 1e-6)


def test_the_streams_have_what_the_splits_are_checked_against():
    assert figures(_BYTEWISE["vllm"])[:3] == (True, 8, False) and len(_BYTEWISE["vllm"].token_event_ms) == 8
    assert figures(_BYTEWISE["llamacpp"])[:3] == (True, 8, False) and len(_BYTEWISE["llamacpp"].token_event_ms) == 7
    assert len(_BYTEWISE["sim-chat"].token_event_ms) == 12 and len(_BYTEWISE["sim-completions"].token_event_ms) == 10


@pytest.mark.parametrize("name", list(STREAMS))
def test_every_split_point_gives_the_same_sample(name):
    raw = STREAMS[name]
    step = 1 if name in ("vllm", "llamacpp") else 5  # every byte of the real captures; the others sampled
    for cut in range(0, len(raw) + 1, step):
        assert_same_as_bytewise(name, [cut])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(STREAMS))
def test_every_split_point_gives_the_same_sample_long(name):
    raw = STREAMS[name]
    for cut in range(len(raw) + 1):
        assert_same_as_bytewise(name, [cut])


@pytest.mark.parametrize("name", list(STREAMS))
def test_one_event_per_read_gives_the_same_sample(name):
    raw = STREAMS[name]
    assert_same_as_bytewise(name, [i + 2 for i in range(len(raw)) if raw[i : i + 2] == b"\n\n"])


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(list(STREAMS)), st.data())
def test_any_chunking_gives_the_same_sample(name, data):
    raw = STREAMS[name]
    assert_same_as_bytewise(name, data.draw(st.lists(st.integers(0, len(raw)), max_size=60)))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=3000), st.lists(st.integers(0, 3000), max_size=20))
def test_arbitrary_bytes_give_a_classified_sample(raw, cuts):
    sample, kind = run_sink(reads_of(raw, cuts))
    assert kind is None or kind in ERROR_KINDS


@st.composite
def mutated(draw) -> bytes:
    """A valid stream with bytes flipped, dropped, duplicated or inserted."""
    raw = bytearray(STREAMS[draw(st.sampled_from(list(STREAMS)))])
    for _ in range(draw(st.integers(1, 8))):
        at = draw(st.integers(0, len(raw) - 1))
        op = draw(st.sampled_from(["flip", "drop", "dup", "insert"]))
        if op == "flip":
            raw[at] = draw(st.integers(0, 255))
        elif op == "drop":
            del raw[at : at + draw(st.integers(1, 40))]
        elif op == "dup":
            raw[at:at] = raw[at : at + draw(st.integers(1, 200))]
        else:
            raw[at:at] = draw(st.sampled_from([b"\n\n", b"data: ", b"[DONE]", b'"error":', b"\r", b"\xef\xbb\xbf", b"{", b"\x00"]))
    return bytes(raw)


@settings(max_examples=300, deadline=None)
@given(mutated(), st.lists(st.integers(0, 4000), max_size=20))
def test_mutated_streams_give_a_classified_sample(raw, cuts):
    sample, kind = run_sink(reads_of(raw, cuts))
    assert kind is None or kind in ERROR_KINDS
    assert sample.output_tokens is None or 0 < sample.output_tokens <= MAX_TOKEN_COUNT


@pytest.mark.slow
@settings(max_examples=5_000, deadline=None)
@given(st.sampled_from(list(STREAMS)), st.data())
def test_any_chunking_gives_the_same_sample_long(name, data):
    raw = STREAMS[name]
    assert_same_as_bytewise(name, data.draw(st.lists(st.integers(0, len(raw)), max_size=400)))


@pytest.mark.slow
@settings(max_examples=10_000, deadline=None)
@given(mutated(), st.lists(st.integers(0, 4000), max_size=40))
def test_mutated_streams_give_a_classified_sample_long(raw, cuts):
    sample, kind = run_sink(reads_of(raw, cuts))
    assert kind is None or kind in ERROR_KINDS
