"""A response as it arrives: `Response`, its status and headers, and its body handed over read by read.

The body comes through `receive()`, `aiter_raw()`, `read()` or `feed(sink)` (the sink runs inside the
read callback: one event-loop pass per read). Each piece keeps the stamp of the read that brought it
(`arrived_ns`), also when decoding falls behind: one event-loop step decodes at most a step's work
(`framing.LINES_PER_STEP` chunk lines, `decoding.DECODE_STEP_BYTES` of inflated output) and the rest
waits two loop turns, so reads that came meanwhile (other endpoints' too) are taken and stamped first;
`_marks` then remembers each waiting read's length and stamp. A body read to its end gives its
connection back to the pool; a response closed before that closes its connection.
"""

from __future__ import annotations

import asyncio
import collections
import json as _json
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any

from lpxtop.http.connection import Connection, StreamProtocol
from lpxtop.http.connector import Pool
from lpxtop.http.decoding import ContentDecoder, UnknownEncoding, decoder_for
from lpxtop.http.errors import (
    BodyTooLarge,
    DecodingError,
    HttpError,
    ReadError,
    ReadTimeout,
    RemoteProtocolError,
)
from lpxtop.http.framing import CHUNKED, CLOSE, DONE, DRAIN, LENGTH, ChunkedBody, take_front
from lpxtop.http.timeouts import Budget, timeout_error


async def _after_other_reads() -> None:
    """Yield for two turns of the event loop. A callback made ready in one turn runs at the head of the
    next, before the reads that turn's poll found; after a step of decoding, one cheap turn first lets
    the reads that came during the step be taken (and stamped) before the next step, instead of after it."""
    await asyncio.sleep(0)
    await asyncio.sleep(0)


class _Default:
    """The type of `_DEFAULT`: "the request's own setting"."""


_DEFAULT = _Default()


class Response:
    """The status and headers of a response, and its body as it arrives.

    `receive()` / `aiter_raw()` / `feed()` hand over the body's bytes (chunked framing removed, content
    decoded) as the socket delivers them; `arrived_ns` is the `perf_counter_ns()` of the read that
    brought the bytes last handed over. When the body has been read to its end the connection goes back
    to the pool; closing a response before that closes its connection.

    About the request that got it: `url` (the final URL, after redirects), `redirects` ((status, URL)
    of each redirect followed), `start_ns` (when the request counts as sent: see `HttpClient.stream`),
    `pool_wait_ns` (time spent waiting for a free connection of this client's pool), `retried`
    (sent again on a new connection after a kept-alive one turned out closed).
    """

    def __init__(
        self, status_code: int, reason_phrase: str, http_version: str, headers: dict[str, str],
        conn: Connection, pool: Pool, framing: int, length: int, keep_alive: bool, read_timeout: float | None,
        budget: Budget | None = None,
    ) -> None:
        self.status_code = status_code
        self.reason_phrase = reason_phrase
        self.http_version = http_version
        self.headers = headers  # lower-case names; repeated headers joined with ", "
        self.arrived_ns = conn.protocol.arrived_ns
        self.url = ""
        self.redirects: tuple[tuple[int, str], ...] = ()
        self.start_ns = 0
        self.pool_wait_ns = 0
        self.retried = False
        self._excluded_ns = 0  # this hop's pool wait and failed attempt: kept out of start_ns
        self._conn: Connection | None = conn
        self._pool = pool
        self._framing = framing
        self._remaining = length  # Content-Length left
        self._chunks = ChunkedBody() if framing == CHUNKED else None
        self._keep_alive = keep_alive
        self._read_timeout = read_timeout
        self._budget = budget
        self._content: bytes | None = None
        self._sink: Callable[[bytes, int], bool] | None = None  # feed()'s state
        self._sink_stopped = False
        self._sink_error: BaseException | None = None
        self._feed_timeout: float | None = None
        self._continuation: asyncio.Handle | None = None
        # A step that ran out of budget (_more) leaves bytes to decode: `_marks` then holds [length, stamp]
        # of each buffered read not decoded yet, oldest first, so that every byte keeps its read's stamp.
        self._more = False
        self._marks: collections.deque[list[int]] | None = None
        self._marked = 0
        encoding = headers.get("content-encoding")
        self._decoder: ContentDecoder | UnknownEncoding | None = (
            decoder_for(encoding) if encoding is not None and framing != DONE else None
        )
        if framing == DONE:
            self._finish()

    @property
    def is_complete(self) -> bool:
        """True once the whole body has been read."""
        return self._framing == DONE

    @property
    def content(self) -> bytes:
        """The body read by `read()` (or by `request()`/`get()`)."""
        if self._content is None:
            raise HttpError("the body has not been read: await read() first")
        return self._content

    @property
    def text(self) -> str:
        """The body as UTF-8 (undecodable bytes replaced)."""
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON (ValueError when it is not JSON)."""
        return _json.loads(self.content)

    async def receive(self, timeout: float | None | _Default = _DEFAULT) -> bytes:
        """The next bytes of the body, b"" at its end. `timeout`: this call's read timeout (default: the
        request's); the request's total limit, if it has one, applies too."""
        if timeout is _DEFAULT:
            timeout = self._read_timeout
        return await self._receive(timeout, self._budget)  # type: ignore[arg-type]

    async def _receive(self, timeout: float | None, budget: Budget | None) -> bytes:
        while True:
            conn = self._conn
            if conn is None:
                if self._framing == DONE:
                    return b""
                raise ReadError("the response was closed")
            protocol = conn.protocol
            if self._marks is not None:
                await _after_other_reads()  # the last step ran out of budget: let the loop serve others first
                if self._conn is None:
                    continue
            if protocol.buffer or self._marks is not None or self._framing == DRAIN:
                data, stamp = self._step(protocol)
                if self._framing == DONE:
                    self._finish()
                if data:
                    self.arrived_ns = stamp
                    return data
                if self._framing == DONE:
                    return b""
                if self._marks is not None or self._framing == DRAIN:
                    continue
            if protocol.eof or protocol.lost:
                if self._stream_ended(conn):
                    continue  # a close-delimited body ended: its decoder may still hold output
                return b""
            # Wait for bytes (inline rather than through conn.wait: this is once per chunk of a stream).
            wait = timeout if budget is None else budget.bound(timeout)
            waiter = conn.arm(wait)
            try:
                arrived = await waiter
            finally:
                protocol.waiter = None
            if not arrived:
                raise timeout_error(ReadTimeout, "no data", wait, budget)

    async def feed(self, sink: Callable[[bytes, int], bool], timeout: float | None | _Default = _DEFAULT) -> bool:
        """Hand the body to `sink(data, arrived_ns)` as each read brings it, until the body ends (False)
        or the sink returns True (True; the rest of the body stays unread).

        The sink runs inside the transport's read callback, so a stream of small reads costs one
        event-loop pass per read instead of two (the read, then the waiting task's wake-up). It must not
        block. What it raises is raised here. `timeout`: the longest wait for bytes, restarted by every
        read (default: the request's read timeout); the request's total limit applies too.
        """
        if timeout is _DEFAULT:
            timeout = self._read_timeout
        conn = self._conn
        if conn is None:
            if self._framing == DONE:
                return False
            raise ReadError("the response was closed")
        protocol = conn.protocol
        budget = self._budget
        self._sink = sink
        self._sink_stopped = False
        self._sink_error = None
        self._feed_timeout = timeout  # type: ignore[assignment]
        protocol.on_data = self._take_fed
        try:
            if self._marks is not None:
                self._continue_later()
            elif protocol.buffer or self._framing == DRAIN:
                self._feed_step()  # bytes that came in with the head
            while True:
                if self._sink_error is not None:
                    raise self._sink_error
                if self._sink_stopped:
                    return True
                conn = self._conn
                if conn is None:  # the body ended: _feed_step finished it
                    return False
                if protocol.eof or protocol.lost:
                    if self._marks is not None:
                        await asyncio.sleep(0)  # the continuation decodes what came before the end
                        continue
                    if self._stream_ended(conn):
                        self._feed_step()
                    continue
                wait = timeout if budget is None else budget.bound(timeout)  # type: ignore[arg-type]
                waiter = conn.arm(wait)
                if self._feed_timeout is None and budget is not None:
                    self._feed_timeout = wait  # reads then move the timer no further than the deadline
                try:
                    arrived = await waiter
                finally:
                    if protocol.waiter is waiter:  # a finished body's connection may serve another request now
                        protocol.waiter = None
                if not arrived:
                    raise timeout_error(ReadTimeout, "no data", wait, budget)
        finally:
            if self._continuation is not None:
                self._continuation.cancel()
                self._continuation = None
            if protocol.on_data == self._take_fed:
                protocol.on_data = self._note_arrival if self._marks is not None else None
            self._sink = None
            self._sink_error = None

    def _take_fed(self) -> None:
        """`feed()`'s work, called by the protocol on each read: decode, hand over, wake the reader when done."""
        if self._conn is None or self._sink is None:
            return
        if self._marks is not None:
            self._note_arrival()  # decoding is behind: these bytes wait their turn, with their own stamp
            return
        self._feed_step()

    def _feed_step(self) -> None:
        conn = self._conn
        if conn is None or self._sink is None:
            return
        protocol = conn.protocol
        ended = False
        try:
            data, stamp = self._step(protocol)
            ended = self._framing == DONE
            if data:
                self.arrived_ns = stamp
                self._sink_stopped = bool(self._sink(data, stamp))
        except Exception as exc:  # noqa: BLE001 - raised again by feed(), in the reading task
            self._sink_error = exc
        if ended or self._sink_stopped or self._sink_error is not None:
            protocol.on_data = None  # later bytes wait in the buffer, as with receive()
            waiter = protocol.waiter
            protocol.waiter = None
            if waiter is not None and not waiter.done():
                waiter.set_result(True)
            if ended:
                self._finish()  # after the wake-up: the pool may hand the connection to another request
            return
        if self._marks is not None:
            self._continue_later()
        if self._feed_timeout is not None:
            deadline = conn.loop.time() + self._feed_timeout  # the lazy read timer follows the reads
            budget = self._budget
            conn.deadline = deadline if budget is None or deadline < budget.deadline else budget.deadline

    def _continue_later(self) -> None:
        """The next step in two loop turns (see `_after_other_reads`)."""
        if self._continuation is None:
            self._continuation = self._conn.loop.call_soon(self._hop)  # type: ignore[union-attr]

    def _hop(self) -> None:
        if self._conn is not None:
            self._continuation = self._conn.loop.call_soon(self._continue_fed)

    def _continue_fed(self) -> None:
        self._continuation = None
        self._feed_step()

    def _note_arrival(self) -> None:
        """A read came while decoding is behind: remember its length and stamp; wake a waiting reader."""
        conn = self._conn
        if conn is None:
            return
        protocol = conn.protocol
        marks = self._marks
        if marks is not None:
            new = len(protocol.buffer) - self._marked
            if new > 0:
                marks.append([new, protocol.arrived_ns])
                self._marked += new
        protocol.pause_if_full()
        waiter = protocol.waiter
        if waiter is not None and not waiter.done() and self._sink is None:
            waiter.set_result(True)

    def _step(self, protocol: StreamProtocol) -> tuple[bytes, int]:
        """Decode what is buffered, at most a step's work: (body bytes, the stamp of the read they came in)."""
        marks = self._marks
        if marks is None:  # the usual case: decoding keeps up with the reads
            data = self._take_buffer(protocol, len(protocol.buffer))
            stamp = protocol.arrived_ns
            if self._more:  # out of budget: the rest of the buffer came with this read
                self._marks = collections.deque([[len(protocol.buffer), stamp]])
                self._marked = len(protocol.buffer)
                if protocol.on_data is None:
                    protocol.on_data = self._note_arrival
            return data, stamp
        region = marks[0]
        before = len(protocol.buffer)
        data = self._take_buffer(protocol, region[0])
        used = before - len(protocol.buffer)
        region[0] -= used
        self._marked -= used
        stamp = region[1]
        if not self._more:
            # This read is decoded, or what is left of it is a piece that the next read completes.
            marks.popleft()
            if marks:
                marks[0][0] += region[0]
            else:
                self._marks = None
                self._marked = 0
                if protocol.on_data == self._note_arrival:
                    protocol.on_data = None
        return data, stamp

    def _take_buffer(self, protocol: StreamProtocol, end: int) -> bytes:
        """Body bytes from the first `end` buffered bytes, framing removed and content decoded, at most a
        step's work (`_more` then says that more is ready). An incomplete chunk line stays buffered."""
        buffer = protocol.buffer
        framing = self._framing
        self._more = False
        if framing == CHUNKED:
            chunks = self._chunks
            assert chunks is not None
            try:
                data = chunks.take(buffer, end)
            except RemoteProtocolError:
                self._close()
                raise
            if chunks.more:
                self._more = True
            elif chunks.done:
                self._framing = DONE
        elif framing == LENGTH:
            data = self._decode_length(buffer, end)
        elif framing == CLOSE:  # close-delimited: everything until the server closes
            data = take_front(buffer, end)
        else:  # DRAIN
            data = b""
        if protocol.reading_paused:
            protocol.consumed()
        decoder = self._decoder
        if decoder is not None:
            data = self._decode_content(decoder, data)
        return data

    def _decode_content(self, decoder: ContentDecoder | UnknownEncoding, data: bytes) -> bytes:
        try:
            if data or decoder.pending:
                data = decoder.decode(data)
            if self._framing in (DONE, DRAIN):  # the framing is complete: the decoder's end too
                if not decoder.pending:
                    data += decoder.finish()
                self._framing = DRAIN if decoder.pending else DONE
            if decoder.pending:
                self._more = True
        except DecodingError:
            self._close()
            raise
        return data

    def _stream_ended(self, conn: Connection) -> bool:
        """The server closed (or the connection failed) with the buffer read: the end of a close-delimited
        body (True when its decoder still has output to give); for any other body, the error that it was
        cut short."""
        if self._framing == CLOSE and conn.protocol.error is None:
            if self._decoder is not None:
                self._framing = DRAIN
                return True
            self._framing = DONE
            self._finish()
            return False
        error = conn.read_failure()
        self._close()
        raise error

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive (see `receive`)."""
        while data := await self.receive():
            yield data

    async def read(self, max_bytes: int | None = None, *, truncate: bool = False, within: float | None = None) -> bytes:
        """The whole body (also kept as `content`). Over `max_bytes`: BodyTooLarge, or with `truncate`
        its first `max_bytes` bytes (either way the connection is closed unless the body was all in).

        `within`: seconds for the whole read (the request's total limit applies too): when they run out,
        ReadTimeout, or with `truncate` what came so far. For an error's body, whose status matters more
        than a server that trickles its text.
        """
        budget = self._budget
        if within is not None:
            own = Budget(asyncio.get_running_loop(), within)
            if budget is None or own.deadline < budget.deadline:
                budget = own
        parts: list[bytes] = []
        size = 0
        try:
            while True:
                try:
                    data = await self._receive(self._read_timeout, budget)
                except ReadTimeout:
                    if truncate and within is not None and budget is not None and budget.expired():
                        break
                    raise
                if not data:
                    break
                size += len(data)
                if max_bytes is not None and size > max_bytes:
                    if not truncate:
                        raise BodyTooLarge(f"the body is larger than {max_bytes} bytes")
                    parts.append(data[: len(data) - (size - max_bytes)])
                    break
                parts.append(data)
        finally:
            if not self.is_complete:
                self._close()
        self._content = b"".join(parts)
        return self._content

    async def discard(self, max_bytes: int, timeout_s: float) -> bool:
        """Read and drop the rest of the body, at most `max_bytes` for at most `timeout_s` in all, so the
        connection can be reused; True when the body was complete. Gives up quietly (closing it)."""
        budget = Budget(asyncio.get_running_loop(), timeout_s)
        if self._budget is not None and self._budget.deadline < budget.deadline:
            budget = self._budget
        left = max_bytes
        try:
            while not self.is_complete and left > 0:
                left -= len(await self._receive(None, budget))
        except HttpError:
            pass
        if not self.is_complete:
            self._close()
        return self.is_complete

    async def aclose(self) -> None:
        """Done with the response: an unread rest of the body means its connection is closed."""
        self._close()

    async def __aenter__(self) -> Response:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._close()

    def _close(self) -> None:
        conn = self._conn
        if conn is not None:
            self._conn = None
            if conn.protocol.on_data in (self._take_fed, self._note_arrival):
                conn.protocol.on_data = None
            self._pool.release(conn, reusable=False)

    def _finish(self) -> None:
        conn = self._conn
        if conn is not None:
            self._conn = None
            if conn.protocol.on_data == self._note_arrival:
                conn.protocol.on_data = None
            # Bytes beyond the body (a server that sent more than it framed) make the connection unusable.
            self._pool.release(conn, reusable=self._keep_alive and not conn.protocol.buffer)

    def _decode_length(self, buffer: bytearray, end: int) -> bytes:
        data = take_front(buffer, min(self._remaining, end))
        self._remaining -= len(data)
        if self._remaining == 0:
            self._framing = DONE
        return data
