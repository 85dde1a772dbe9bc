"""Which chunks are token events, on real captures and on the simulator with ground truth.

vLLM streams one chunk per token, and a token that completes no UTF-8 character arrives as
`"content": ""`. Counting only non-empty chunks turned two token gaps into one: ITL p95 and mean about
twice the benchmark's, and TTFT one gap late when the first token was such a chunk.
"""

from __future__ import annotations

import json
import statistics

import pytest

from lpxtop.engine.probe import run_probe
from lpxtop.http import HttpClient
from lpxtop.sim.config import SimConfig
from lpxtop.sim.records import token_times_ns
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.hostile import HostileServer, Reply
from tests.support.paths import FIXTURES
from tests.support.sim import endpoint, fidelity_errors, p

pytestmark = pytest.mark.timing  # measures time against tolerances: runs alone under pytest-xdist

VLLM = (FIXTURES / "sse" / "vllm-0.32.0-chat-stream-include-usage.txt").read_bytes()
LLAMA = (FIXTURES / "sse" / "llamacpp-server-0c1e5709-chat-stream-include-usage.txt").read_bytes()
TOLERANCE_MS = 3.0


def events_of(raw: bytes) -> list[bytes]:
    """A capture as a server writes it: one event per write."""
    return [e + b"\n\n" for e in raw.split(b"\n\n") if e.startswith(b"data:")]


async def probe_once(url: str, **kw):
    async with HttpClient() as client:
        return await run_probe(client, endpoint(url, model="tiny-llama", **kw))


async def test_vllm_capture_every_chunk_after_the_role_chunk_is_a_token_even_empty():
    pieces = events_of(VLLM)
    empties = sum(b'"delta":{"content":""}' in e for e in pieces[1:])
    assert empties == 4  # the capture: 4 of the 8 token chunks complete no character
    with HostileServer(Reply(pieces, gap_s=0.01)) as server:
        sample = await probe_once(server.url)
    assert sample.ok, sample.error_text
    assert len(sample.token_event_ms) == 8 == sample.output_tokens and not sample.output_tokens_approx
    assert sample.first_event_ms < sample.ttft_ms, "the role-only chunk is not the first token"
    # one token per event: TPOT is exactly the mean of the gaps
    assert sample.tpot_ms == pytest.approx(statistics.fmean(sample.itl_ms), rel=1e-9)


async def test_llamacpp_capture_role_with_null_content_and_finish_only_chunk_are_not_tokens():
    with HostileServer(Reply(events_of(LLAMA), gap_s=0.01)) as server:
        sample = await probe_once(server.url)
    assert sample.ok, sample.error_text
    # 7 content chunks for 8 tokens: llama-server sends no chunk for a token that completes no character
    # (it holds the bytes back), so only `usage` has the count
    assert len(sample.token_event_ms) == 7 and sample.output_tokens == 8 and not sample.output_tokens_approx
    assert sample.finish_reason == "length"


def chat(delta: dict, finish: str | None = None, **extra) -> bytes:
    obj = {"id": "x", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def text(value: str | None, finish: str | None = None, **extra) -> bytes:
    choice = {"index": 0, "finish_reason": finish} | ({} if value is None else {"text": value})
    return b"data: " + json.dumps({"id": "x", "model": "m", "choices": [choice], **extra}).encode() + b"\n\n"


USAGE3 = b'data: {"id":"x","choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3}}\n\n'
DONE = b"data: [DONE]\n\n"


@pytest.mark.parametrize(
    ("label", "pieces", "n_events", "first"),
    [
        ("first chunk without role, empty content: the first token",
         [chat({"content": ""}), chat({"content": "a"}), chat({"content": "b"}), USAGE3, DONE], 3, 0),
        ("role and text together: the first token",
         [chat({"role": "assistant", "content": "a"}), chat({"content": ""}), chat({"content": "b"}), USAGE3, DONE], 3, 0),
        ("role-only, then an empty first token",
         [chat({"role": "assistant", "content": ""}), chat({"content": ""}), chat({"content": "a"}),
          chat({"content": "b"}, "stop"), USAGE3, DONE], 3, 1),
        ("content null is no token; reasoning and tool calls are",
         [chat({"role": "assistant", "content": None}), chat({"reasoning_content": ""}), chat({"reasoning": "r"}),
          chat({"content": None, "tool_calls": [{"index": 0, "function": {"arguments": ""}}]}),
          chat({"content": None}, "tool_calls"), USAGE3, DONE], 3, 1),
        ("finish-only delta {} is no token",
         [chat({"content": "a"}), chat({"content": ""}), chat({"content": "b"}), chat({}, "stop"), USAGE3, DONE], 3, 0),
        ("completions: empty text is a token, llama-server's closing chunk is not",
         [text(""), text("a"), text(""), text("", "length", usage={"completion_tokens": 3, "prompt_tokens": 2}), DONE], 3, 0),
        ("completions: an empty last token with its finish reason is a token",
         [text("a"), text(""), text("", "length"), USAGE3, DONE], 3, 0),
    ],
)
async def test_token_event_rule(label, pieces, n_events, first):
    with HostileServer(Reply(pieces, gap_s=0.02)) as server:
        sample = await probe_once(server.url, api="completions" if "completions" in label else "chat")
    assert sample.ok, (label, sample.error_text)
    assert len(sample.token_event_ms) == n_events, label
    assert sample.output_tokens == 3 and not sample.output_tokens_approx
    # the first token is piece `first`: stamped after that piece was written and before the next one was
    first_token_ns = sample.start_ns + sample.ttft_ms * 1e6
    writes = server.writes_ns
    assert writes[first] <= first_token_ns, (label, sample.ttft_ms)
    if first + 1 < len(writes):
        assert first_token_ns < writes[first + 1], (label, sample.ttft_ms)


async def _probe_sim(config: SimConfig, n: int, **kw):
    with start_sim_in_thread(config) as sim:
        async with HttpClient() as client:
            samples = [await run_probe(client, endpoint(sim.url, **kw)) for _ in range(n)]
        assert all(s.ok for s in samples), [s.error_text for s in samples]
        records = [sim.server.record_for(s.response_id) for s in samples]
        ttft_err, itl_err = fidelity_errors(samples, sim.server)
    return samples, records, ttft_err, itl_err


async def test_itl_over_every_token_equals_the_record_with_empty_chunks():
    config = SimConfig(model="m", ttft_ms=8, itl_ms=4, jitter=0.5, empty_chunk_rate=0.25, seed=11)
    samples, records, ttft_err, itl_err = await _probe_sim(config, 10, max_tokens=16)
    empties = sum(kind == "empty_content" for r in records for _, kind, _ in r.events)
    assert empties >= 20, "about a quarter of 150 token chunks are empty"
    # every token is an event: as many events as tokens, and as many gaps as the record has
    truth_gaps: list[float] = []
    for s, r in zip(samples, records):
        truth = token_times_ns(r.events)
        assert len(s.token_event_ms) == len(truth) == s.output_tokens == 16
        truth_gaps += [(b - a) / 1e6 for a, b in zip(truth, truth[1:])]
    measured = [g for s in samples for g in s.itl_ms]
    assert len(measured) == len(truth_gaps)
    # pooled figures of the measured gaps against the record's (the error of each figure is bounded by the
    # largest per-gap error, and the median error is small)
    assert abs(p(itl_err, 0.5)) < TOLERANCE_MS / 3, itl_err
    for q in (0.5, 0.95):
        assert abs(p(measured, q) - p(truth_gaps, q)) < TOLERANCE_MS, q
    assert abs(statistics.fmean(measured) - statistics.fmean(truth_gaps)) < TOLERANCE_MS / 3
    # TPOT and the ITL mean agree (they are the same quantity when every token is an event)
    for s in samples:
        assert s.tpot_ms == pytest.approx(statistics.fmean(s.itl_ms), rel=1e-9)
    assert abs(p(ttft_err, 0.5)) < TOLERANCE_MS


async def test_an_empty_first_token_does_not_inflate_ttft():
    # every token but the last is sent as "content": "": the first token is an empty chunk
    config = SimConfig(model="m", ttft_ms=10, itl_ms=15, jitter=0.0, empty_chunk_rate=1.0)
    samples, records, ttft_err, _ = await _probe_sim(config, 4, max_tokens=6)
    for s, r in zip(samples, records):
        first_empty = r.times_ns("empty_content")[0]
        first_text = r.times_ns("content", "finish")[0]
        assert first_empty < first_text
        assert token_times_ns(r.events)[0] == first_empty
        assert s.ttft_ms < (first_text - s.start_ns) / 1e6 - 10, "TTFT is not one token gap (15 ms) late"
    assert abs(p(ttft_err, 0.5)) < TOLERANCE_MS and min(ttft_err) > -0.5
