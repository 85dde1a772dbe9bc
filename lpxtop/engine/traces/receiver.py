"""The OTLP/HTTP receiver: `POST /v1/traces` on aiohttp's web server, on its own thread and event loop.

Why its own thread: decoding a body and reading its spans is work the probe loop must never wait
behind (a probe's timestamps are taken on the engine's loop). The receiver's loop does it, in bounded
pieces: a body is at most `max_body_bytes` (before and after gzip), at most `max_concurrent` bodies are
read at once (more get 503 with Retry-After, which OTLP clients retry), and at most `spans_per_s` spans
a second are read for the join (the rest are acknowledged as rejected in `partial_success`, counted,
and still forwarded). A protobuf body is split into its spans in one quick library call and each span
parsed alone (otlp.read_body), yielding to the loop every few hundred, so no single call holds the
interpreter lock for a whole body; JSON bodies, parsed whole, are limited to 256 KiB. The join is handed
segments under its lock, a few hundred at a time.
benchmarks/traces_flood.py measures a probe's timestamp error while 1,000 spans/s arrive.

Answers follow the OTLP specification (see otlp.py): 200 with an `ExportTraceServiceResponse`
(`partial_success` when spans were refused), 400 for a body that cannot be read, 413 for one too
large, 415 for another content type or encoding, 503 + Retry-After when busy, each with a
`google.rpc.Status` in the request's content type.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import Counter

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from lpxtop.engine.traces import otlp
from lpxtop.engine.traces.forward import SpanForwarder
from lpxtop.engine.traces.join import SpanSink
from lpxtop.engine.traces.limits import (  # noqa: F401 - where they were; the settings read them without aiohttp
    DEFAULT_HOST,
    DEFAULT_PORT,
    MAX_BODY_BYTES,
    MAX_CONCURRENT,
    MAX_JSON_BODY_BYTES,
    READ_TIMEOUT_S,
    SPANS_PER_S,
    ReceiverSettings,
)
from lpxtop.engine.traces.spans import read_span
from lpxtop.loopthread import LoopThread
from lpxtop.model.chain import ReceiverStats, SpanSegments

log = logging.getLogger("lpxtop.traces")

HAND_OVER = 256  # segments handed to the join per lock
_START_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 5.0


class _TokenBucket:
    """`rate` per second, at most two seconds' worth saved up."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.capacity = max(1.0, 2.0 * rate)
        self.tokens = self.capacity
        self.stamp = time.monotonic()

    def take(self, wanted: int) -> int:
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        granted = min(wanted, int(self.tokens))
        self.tokens -= granted
        return granted


class TraceReceiverServer:
    """The receiver on the running loop (`await start()` / `await stop()`); TraceReceiver runs it in a thread."""

    def __init__(self, join: SpanSink, settings: ReceiverSettings | None = None) -> None:
        otlp.load()  # OtelUnavailable now, with what to install, rather than at the first body
        self.join = join
        self.settings = settings or ReceiverSettings()
        self.address: tuple[str, int] | None = None
        self._runner: web.AppRunner | None = None
        self._forwarder = SpanForwarder(self.settings.forward_url) if self.settings.forward_url else None
        self._busy = 0
        self._bucket = _TokenBucket(self.settings.spans_per_s)
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._dropped: Counter[str] = Counter()

    async def start(self) -> tuple[str, int]:
        s = self.settings
        app = web.Application(client_max_size=s.max_body_bytes)
        app.router.add_post("/v1/traces", self._traces)
        # the body is decompressed here, bounded (otlp.gunzip), not by aiohttp
        runner = web.AppRunner(app, access_log=None, handle_signals=False, auto_decompress=False,
                               shutdown_timeout=0.5)
        await runner.setup()
        try:
            site = web.TCPSite(runner, s.host, s.port, backlog=64)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self.address = (str(host), int(port))
        if self._forwarder is not None:
            await self._forwarder.start()
        return self.address

    async def stop(self) -> None:
        if self._forwarder is not None:
            await self._forwarder.stop()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    def stats(self) -> ReceiverStats:
        with self._lock:
            counts, dropped = dict(self._counts), dict(self._dropped)
        forwarded, forward_dropped = self._forwarder.counts() if self._forwarder else (0, {})
        listening = None
        if self.address is not None:
            host, port = self.address
            listening = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return ReceiverStats(
            listening=listening, requests=counts.get("requests", 0), spans_received=counts.get("spans", 0),
            spans_read=counts.get("read", 0), spans_unrecognized=counts.get("unrecognized", 0),
            dropped=dropped, forwarded=forwarded, forward_dropped=forward_dropped,
        )

    def _count(self, requests: int = 0, **counts: int) -> None:
        with self._lock:
            self._counts["requests"] += requests
            self._counts.update(counts)

    def _drop(self, reason: str, spans: int = 1) -> None:
        with self._lock:
            self._dropped[reason] += spans
        self.join.note_receiver_drop(spans)

    async def _traces(self, request: web.Request) -> web.Response:
        self._count(requests=1)
        media = otlp.media_type(request.headers.get("Content-Type"))
        if media is None:
            self._drop("bad_content_type")
            return _status(415, None, "Content-Type must be application/x-protobuf or application/json")
        encoding = (request.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding not in ("identity", "gzip"):
            self._drop("bad_content_encoding")
            return _status(415, media, "Content-Encoding must be gzip or none")
        if self._busy >= self.settings.max_concurrent:
            self._drop("busy")
            return _status(503, media, "lpxtop's receiver is busy; retry", retry_after=1)
        self._busy += 1
        try:
            return await self._read(request, media, encoding)
        finally:
            self._busy -= 1

    async def _read(self, request: web.Request, media: str, encoding: str) -> web.Response:
        limit = self.settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            self._drop("too_large")
            return _status(413, media, f"the body is larger than {limit} bytes")
        try:
            async with asyncio.timeout(self.settings.read_timeout_s) if hasattr(asyncio, "timeout") else \
                    _deadline(self.settings.read_timeout_s):
                raw = await request.content.read(limit + 1)
                while len(raw) <= limit and not request.content.at_eof():
                    more = await request.content.read(limit + 1 - len(raw))
                    if not more:
                        break
                    raw += more
        except (asyncio.TimeoutError, TimeoutError):
            self._drop("slow_body")
            return _status(408, media, "the body did not arrive in time")
        except (ConnectionError, HttpProcessingError):  # the client left mid-body: nobody to answer
            self._drop("cut_body")
            return _status(400, media, "the body was cut short")
        if len(raw) > limit:
            self._drop("too_large")
            return _status(413, media, f"the body is larger than {limit} bytes")
        try:
            body = otlp.gunzip(raw, limit) if encoding == "gzip" else raw
            if media == otlp.CONTENT_JSON and len(body) > MAX_JSON_BODY_BYTES:
                raise otlp.BodyTooLarge(f"a JSON body is limited to {MAX_JSON_BODY_BYTES} bytes; "
                                        "send protobuf (http/protobuf) for larger batches")
            batch = otlp.read_body(body, media)
        except otlp.BodyTooLarge as exc:
            self._drop("too_large")
            return _status(413, media, str(exc))
        except otlp.BadBody as exc:
            self._drop("bad_body")
            return _status(400, media, str(exc))
        if self._forwarder is not None:
            self._forwarder.offer(raw, request.headers.get("Content-Type", media),
                                  None if encoding == "identity" else encoding)
        total = batch.count
        granted = self._bucket.take(total)
        rejected = total - granted
        if rejected:
            self._drop("rate", rejected)
        rejected += await self._hand_over(batch, granted)
        self._count(spans=total)
        message_text = f"{rejected} spans refused (over lpxtop's rate limit of {self.settings.spans_per_s:g}/s, " \
            "or not parseable)" if rejected else ""
        return web.Response(status=200, body=otlp.success_body(media, rejected, message_text),
                            content_type=media)

    async def _hand_over(self, batch: otlp.SpanBatch, granted: int) -> int:
        """Read up to `granted` spans and give their segments to the join, yielding between pieces;
        returns how many spans could not be parsed (refused in the answer's partial_success)."""
        pieces: list[SpanSegments] = []
        read = unrecognized = 0
        dropped: Counter[str] = Counter()
        now_ns = time.time_ns()
        for seen, (source, span) in enumerate(batch.spans()):
            if seen >= granted:
                break
            reading = read_span(span, source, now_ns) if span is not None else None
            if reading is None:
                dropped["bad_span"] += 1
            elif reading.dropped is not None:
                dropped[reading.dropped] += 1
            elif reading.segments is None:
                unrecognized += 1
            else:
                read += 1
                pieces.append(reading.segments)
            if reading is not None and reading.bad_values:
                dropped["bad_value"] += reading.bad_values
            if seen % HAND_OVER == HAND_OVER - 1:  # let the loop serve others between pieces
                if pieces:
                    self.join.add_segments(pieces)
                    pieces = []
                await asyncio.sleep(0)
        if pieces:
            self.join.add_segments(pieces)
        self._count(read=read, unrecognized=unrecognized)
        for reason, n in dropped.items():
            self._drop(reason, n)
        return dropped["bad_span"]


@contextlib.asynccontextmanager
async def _deadline(seconds: float):
    """asyncio.timeout for Python 3.10."""
    task = asyncio.current_task()
    assert task is not None
    handle = asyncio.get_running_loop().call_later(seconds, task.cancel)
    try:
        yield
    except asyncio.CancelledError:
        raise asyncio.TimeoutError from None
    finally:
        handle.cancel()


def _status(status: int, media: str | None, message: str, retry_after: int | None = None) -> web.Response:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return web.Response(status=status, body=otlp.status_body(media, message),
                        content_type=media or otlp.CONTENT_PROTOBUF, headers=headers)


class TraceReceiver:
    """The receiver on its own daemon thread and event loop (lpxtop/loopthread.py): `start()` returns
    (host, port) once it listens (OSError if it cannot, otlp.OtelUnavailable without opentelemetry-proto);
    `stop()` joins."""

    def __init__(self, join: SpanSink, settings: ReceiverSettings | None = None) -> None:
        self.server = TraceReceiverServer(join, settings)
        self._loop_thread = LoopThread("lpxtop-traces")

    @property
    def address(self) -> tuple[str, int] | None:
        return self.server.address

    def stats(self) -> ReceiverStats:
        return self.server.stats()

    def start(self) -> tuple[str, int]:
        self._loop_thread.start(timeout=_START_TIMEOUT_S)
        try:
            self._loop_thread.run(self.server.start(), _START_TIMEOUT_S)
        except TimeoutError:
            self._loop_thread.stop(_STOP_TIMEOUT_S)
            raise TimeoutError(f"the trace receiver did not start within {_START_TIMEOUT_S:.0f} s") from None
        except BaseException:
            self._loop_thread.stop(_STOP_TIMEOUT_S)
            raise
        assert self.server.address is not None
        return self.server.address

    def stop(self) -> None:
        began = time.monotonic()
        if self._loop_thread.loop is not None and not self._loop_thread.on_loop_thread():
            with contextlib.suppress(Exception):  # stopping: the loop shuts down whatever is left
                self._loop_thread.run(self.server.stop(), _STOP_TIMEOUT_S)
        self._loop_thread.stop(max(0.1, _STOP_TIMEOUT_S - (time.monotonic() - began)))

    def __enter__(self) -> TraceReceiver:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
