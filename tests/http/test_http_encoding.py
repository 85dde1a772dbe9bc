"""Content-Encoding: a reverse proxy may gzip /metrics, or even a stream, although
lpxtop asked for identity. Decoded incrementally, bounded, each read keeping its own stamp."""

from __future__ import annotations

import asyncio
import gzip
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest

from lpxtop.engine.probe import run_probe
from lpxtop.engine.probe.errors import classify_exception
from lpxtop.engine.scrape.servers import ServerScraper
from lpxtop.http import BodyTooLarge, DecodingError, HttpClient
from lpxtop.http.decoding import DECODE_STEP_BYTES, ContentDecoder
from lpxtop.model.endpoint import EndpointConfig
from tests.support.http_servers import answer_each, raw_server, read_request, sse_response
from tests.support.sim import endpoint

pytestmark = pytest.mark.timeout(60)

METRICS = b"".join(b'vllm:num_requests_running{model_name="m",engine="%d"} %d.0\n' % (i, i) for i in range(2000))


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


def chunked(data: bytes, size: int) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(data[i : i + size]), data[i : i + size]) for i in range(0, len(data), size)) + b"0\r\n\r\n"


@pytest.mark.parametrize(
    ("coding", "encoded"),
    [("gzip", gzip.compress(METRICS)), ("x-gzip", gzip.compress(METRICS)), ("deflate", zlib.compress(METRICS)),
     ("deflate", raw_deflate(METRICS)), ("identity", METRICS), ("gzip, identity", gzip.compress(METRICS)),
     ("GZIP", gzip.compress(METRICS[:1000]) + gzip.compress(METRICS[1000:]))],  # two gzip members: one body
    ids=["gzip", "x-gzip", "deflate-zlib", "deflate-raw", "identity", "gzip-identity", "gzip-members"],
)
@pytest.mark.parametrize("framing", ["length", "chunked", "close"])
async def test_metrics_compressed_by_a_reverse_proxy(coding, encoded, framing):
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Encoding: %s\r\n" % coding.encode()
    if framing == "length":
        answer = head + b"Content-Length: %d\r\n\r\n" % len(encoded) + encoded
    elif framing == "chunked":
        answer = head + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(encoded, 333)
    else:
        answer = head + b"Connection: close\r\n\r\n" + encoded

    async def serve(reader, writer):
        await read_request(reader)
        for i in range(0, len(answer), 1000):  # in several reads
            writer.write(answer[i : i + 1000])
            await writer.drain()
        if framing == "close":
            writer.close()
        else:
            await reader.read()

    async with raw_server(serve) as port, HttpClient(timeout=5.0) as client:
        response = await client.get(f"http://127.0.0.1:{port}/metrics")
    assert response.content == METRICS
    assert response.headers["content-encoding"] == coding, "the header says what came over the wire"


async def test_a_gzipped_stream_keeps_each_reads_stamp():
    """A proxy that gzips an SSE stream and flushes each event: each event is decoded from its own read
    and carries that read's arrival time, whatever decoding follows."""
    events = [b"data: event %d\n\n" % i for i in range(5)]
    compressor = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    parts = [compressor.compress(e) + compressor.flush(zlib.Z_SYNC_FLUSH) for e in events]
    parts[-1] += compressor.flush()

    async def serve(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        for part in parts:
            await asyncio.sleep(0.05)
            writer.write(b"%x\r\n%s\r\n" % (len(part), part))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await reader.read()

    async with raw_server(serve) as port, HttpClient(timeout=5.0) as client:
        response = await client.stream("GET", f"http://127.0.0.1:{port}/")
        got: list[tuple[bytes, int]] = []
        assert not await response.feed(lambda data, t: got.append((data, t)) or False)
    assert [data for data, _ in got] == events
    stamps = [t for _, t in got]
    assert all(b - a > 0.03e9 for a, b in zip(stamps, stamps[1:])), "each event came in its own read, 50 ms apart"


async def test_a_probe_through_a_gzipping_proxy():
    pieces = sse_response(tokens=6)
    head, framed = pieces[0], pieces[1:]
    events = []
    for piece in framed[:-1]:  # undo the chunks, gzip each event and re-chunk it
        size, _, rest = piece.partition(b"\r\n")
        events.append(rest[: int(size, 16)])
    compressor = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    parts = [compressor.compress(e) + compressor.flush(zlib.Z_SYNC_FLUSH) for e in events]
    parts[-1] += compressor.flush()
    answer = head.replace(b"\r\n\r\n", b"\r\nContent-Encoding: gzip\r\n\r\n") + b"".join(
        b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
    async with raw_server(answer_each(answer)) as port, HttpClient(timeout=5.0) as client:
        sample = await run_probe(client, endpoint(f"http://127.0.0.1:{port}/v1", model="m"))
    assert sample.ok, sample.error_text
    assert sample.output_tokens == 6 and len(sample.token_event_ms) == 6


async def test_a_decompression_bomb_is_an_error_not_an_out_of_memory():
    bomb = gzip.compress(b"\0" * (80 * 1024 * 1024), compresslevel=1)  # 80 MiB of zeros in ~350 KiB
    answer = (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(bomb)) + bomb
    async with raw_server(answer_each(answer)) as port, HttpClient(timeout=10.0) as client:
        tracemalloc.start()
        try:
            with pytest.raises(BodyTooLarge):
                await client.get(f"http://127.0.0.1:{port}/metrics", max_bytes=4 * 1024 * 1024)
            response = await client.stream("GET", f"http://127.0.0.1:{port}/metrics")
            with pytest.raises(DecodingError, match="compression bomb"):
                await response.feed(lambda data, t: False)  # a stream: bounded by the decoder's own limit
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < 32 * 1024 * 1024, f"decoding held {peak / 2**20:.0f} MiB at once"


def test_one_decoding_step_is_bounded():
    decoder = ContentDecoder("gzip")
    out = decoder.decode(gzip.compress(b"a" * (10 * DECODE_STEP_BYTES)))
    assert len(out) == DECODE_STEP_BYTES and decoder.pending
    total = len(out)
    while decoder.pending:
        total += len(decoder.decode(b""))
    assert total == 10 * DECODE_STEP_BYTES
    assert decoder.finish() == b""


@pytest.mark.parametrize(
    ("coding", "body", "match"),
    [("br", b"\x0b\x02\x80hello\x03", "Content-Encoding: br, which lpxtop cannot decode"),
     ("gzip, gzip", gzip.compress(gzip.compress(b"x")), "cannot decode"),
     ("gzip", gzip.compress(METRICS)[:-30], "ends in the middle"),
     ("gzip", b"not gzip at all", "corrupt"),
     ("gzip", gzip.compress(b"x") + b"trailing garbage", "after the end")],
    ids=["brotli", "twice", "truncated", "corrupt", "garbage-after"],
)
async def test_bodies_that_cannot_be_decoded_are_a_clear_error(coding, body, match):
    answer = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Encoding: %s\r\nContent-Length: %d\r\n\r\n"
              % (coding.encode(), len(body))) + body
    async with raw_server(answer_each(answer)) as port, HttpClient(timeout=5.0) as client:
        response = await client.stream("GET", f"http://127.0.0.1:{port}/")
        assert response.status_code == 503, "the status and headers stay usable"
        with pytest.raises(DecodingError, match=match) as caught:
            await response.read()
        assert client.open_connections == 0
        sample = await run_probe(client, endpoint(f"http://127.0.0.1:{port}/v1", model="m"))
    kind, message = classify_exception(caught.value, started_stream=True)
    assert kind == "other" and "decoded" in message
    assert sample.http_status == 503 and sample.error_kind == "http_5xx", "an error's unreadable body keeps its status"


async def test_an_empty_body_with_an_encoding_is_empty():
    answers = [b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 0\r\n\r\n",
               b"HTTP/1.1 204 No Content\r\nContent-Encoding: br\r\n\r\n"]
    for answer in answers:
        async with raw_server(answer_each(answer)) as port, HttpClient(timeout=5.0) as client:
            began = time.monotonic()
            assert (await client.get(f"http://127.0.0.1:{port}/")).content == b""
            assert time.monotonic() - began < 1.0


async def test_the_scraper_reads_a_gzipped_metrics_page():
    """End to end: the engine's /metrics scraper behind a reverse proxy that gzips regardless."""
    page = (Path(__file__).resolve().parents[1] / "fixtures" / "metrics" / "vllm-0.32.0-cpu-local-capture-after-load.txt"
            ).read_bytes()
    body = gzip.compress(page)
    answer = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Encoding: gzip\r\n"
              b"Vary: Accept-Encoding\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    async with raw_server(answer_each(answer)) as port, HttpClient(timeout=5.0) as client:
        metrics = await ServerScraper(EndpointConfig(name="e", url=f"http://127.0.0.1:{port}/v1")).scrape(client)
    assert (metrics.kind, metrics.status) == ("vllm", "ok"), metrics.status
    assert metrics.requests_running is not None
