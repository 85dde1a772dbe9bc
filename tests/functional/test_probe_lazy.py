"""After its first token a probe parses its reads in batches (`BatchedReads`, engine/probe/reads.py): the same sample, on time.

Each case is a raw loopback server that writes a chunked SSE stream in the pieces it chooses, so a
marker can straddle two reads and a stream can stop without its end.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from lpxtop.engine.probe import reads as reads_module
from lpxtop.engine.probe import run_probe
from lpxtop.http import HttpClient
from tests.support.sim import endpoint

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
ROLE = b'data: {"id":"x","model":"m","choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'
DONE = b"data: [DONE]\n\n"


def token(i: int) -> bytes:
    return b'data: {"id":"x","model":"m","choices":[{"index":0,"delta":{"content":"t%d "}}]}\n\n' % i


def finish(tokens: int) -> bytes:
    usage = {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": tokens + 5}
    return b'data: {"id":"x","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n' + (
        b"data: " + json.dumps({"id": "x", "model": "m", "choices": [], "usage": usage}).encode() + b"\n\n"
    )


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def serve(pieces: list[bytes], gap_s: float = 0.01, hold_s: float = 0.0, end: bool = True):
    """A server that answers one request with `pieces`, each its own HTTP chunk and write, `gap_s` apart;
    then the chunked end, or (end=False) nothing for `hold_s` with the connection open."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(HEAD)
        for piece in pieces:
            writer.write(chunk(piece))
            await writer.drain()
            await asyncio.sleep(gap_s)
        if end:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        else:
            await asyncio.sleep(hold_s)
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def probe_of(server: asyncio.Server, **kw):
    port = server.sockets[0].getsockname()[1]
    async with server, HttpClient() as client:
        began = time.monotonic()
        sample = await run_probe(client, endpoint(f"http://127.0.0.1:{port}/v1", model="m", **kw))
        return sample, time.monotonic() - began


async def test_a_done_split_across_two_reads_ends_the_probe_without_the_body_end():
    tokens = [token(i) for i in range(6)]
    split = finish(6) + DONE
    pieces = [ROLE, *tokens, split[:-5], split[-5:]]  # "[DO" | "NE]\n\n"
    sample, took = await probe_of(await serve(pieces, end=False, hold_s=5.0), first_token_timeout_s=3.0)
    assert sample.ok, sample.error_text
    assert sample.output_tokens == 6 and not sample.output_tokens_approx
    assert took < 2.0, "[DONE] was seen when it came, not at the read timeout"


async def test_an_error_event_after_tokens_ends_the_probe_when_it_comes():
    error = b'data: {"error":{"message":"engine died"}}\n\n'
    pieces = [ROLE, token(0), token(1), error[:12], error[12:]]  # '... {"err' | 'or": ...'
    sample, took = await probe_of(await serve(pieces, end=False, hold_s=5.0), first_token_timeout_s=3.0)
    assert sample.error_kind == "error_event" and "engine died" in sample.error_message
    assert took < 2.0


@pytest.mark.parametrize("end", [True, False])
async def test_bad_json_after_the_first_token_is_still_bad_json(end):
    pieces = [ROLE, token(0), token(1), b"data: {not json\n\n", token(2)]
    sample, took = await probe_of(await serve(pieces, end=end, hold_s=3.0), first_token_timeout_s=0.5)
    # with the stream left open, it is found when the read times out, and reported as what it is
    assert sample.error_kind == "bad_json", sample.error_text
    assert took < 2.0


async def test_a_stream_stopped_by_the_whole_request_limit_counts_every_token_that_came():
    pieces = [ROLE, *(token(i) for i in range(200))]
    sample, _ = await probe_of(await serve(pieces, gap_s=0.01, end=False), timeout_s=0.6, first_token_timeout_s=0.5)
    assert sample.error_kind == "read_timeout"
    came = int(sample.error_message.split("after ")[1].split()[0])
    assert came >= 20, sample.error_message  # ~0.6 s of tokens 10 ms apart, not just the first one


async def test_a_long_stream_is_parsed_in_bounded_batches(monkeypatch):
    batches: list[int] = []
    real = reads_module.BatchedReads.catch_up

    def counting(self):
        batches.append(len(self._pending))
        return real(self)

    monkeypatch.setattr(reads_module.BatchedReads, "catch_up", counting)
    monkeypatch.setattr(reads_module, "LAZY_MAX_BYTES", 2000)
    n = 300
    pieces = [ROLE, *(token(i) for i in range(n)), finish(n) + DONE]
    sample, _ = await probe_of(await serve(pieces, gap_s=0.0005))
    assert sample.ok, sample.error_text
    assert sample.output_tokens == n
    assert len(batches) > 10 and max(batches) * len(token(999)) < 2000 + 2 * len(token(999))


async def test_token_times_are_the_reads_arrival_times_not_the_parse_times():
    pieces = [ROLE, *(token(i) for i in range(8)), finish(8) + DONE]
    sample, _ = await probe_of(await serve(pieces, gap_s=0.05))
    assert sample.ok, sample.error_text
    assert len(sample.itl_ms) == 7
    # tokens written 50 ms apart arrive ~50 ms apart, though most were parsed together at the end
    assert all(30 < gap < 150 for gap in sample.itl_ms), sample.itl_ms


async def test_cancelling_from_outside_with_a_bad_event_waiting_is_still_a_cancellation():
    pieces = [ROLE, token(0), token(1), b"data: {not json\n\n"]
    server = await serve(pieces, end=False, hold_s=5.0)
    port = server.sockets[0].getsockname()[1]
    async with server, HttpClient() as client:
        task = asyncio.ensure_future(run_probe(client, endpoint(f"http://127.0.0.1:{port}/v1", model="m")))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
