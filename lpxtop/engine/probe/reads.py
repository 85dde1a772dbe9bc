"""A stream's reads as the measured stream takes them: each stamped read to its sink, at once until the
first token and in batches after it, and a body that is not an event stream told apart.
"""

from __future__ import annotations

import json
import time
from typing import Protocol

from lpxtop.engine.probe.errors import StreamError, error_text, short
from lpxtop.engine.probe.sink import StreamSink
from lpxtop.http import BOM, SseParser

# After the first token, reads wait to be parsed together until this many bytes are waiting
LAZY_MAX_BYTES = 65536
# A body that is one JSON document (or an HTML page) instead of an event stream is kept up to this size
MAX_JSON_BODY = 1024 * 1024
_WHITESPACE = b" \t\r\n"
NOT_STREAMED_MESSAGE = (
    'the server answered one JSON body instead of an event stream (it ignores "stream": true, or a proxy '
    "buffers the stream): TTFT and ITL cannot be measured"
)


class Deadline(Protocol):
    """The request's watchdog as the reads see it (stream.py `Watchdog`)."""

    def arm(self, deadline_ns: int) -> None: ...

    def absorb(self) -> bool: ...


class BatchedReads:
    """The stream's reads, parsed at once until the first token and from then on in batches.

    Every read keeps the time it came off the socket, so when it is parsed does not change a figure.
    Up to the first token each read is parsed as it comes, because the first token re-arms the watchdog
    (from the first-token limit to the whole request's). After it, reads wait in a list and are parsed
    together: when one may hold the stream's end or an error (the sink's `markers`; a marker split across
    reads is found in the bytes kept from the reads before), when the list passes LAZY_MAX_BYTES, and when
    the stream ends or fails. A batch that ends inside an event leaves the next reads parsed as they come
    until the event is whole, so an end marker whose blank line comes in a later read still ends the
    stream. A read then costs little more than its wake-up, and the parsing runs in one warm loop instead
    of one cold pass per token: on a 2-core VM with 4 endpoints, the probes' CPU went down by about a
    fifth (perf stat, 273 -> 222 ms per 20 s).

    Before the first event the body is also sniffed: one that begins with `{`, `[` or `<` is a JSON
    document or a page, not an event stream, and is kept whole to be classified when it ends.
    """

    def __init__(self, sink: StreamSink, watchdog: Deadline, total_deadline_ns: int) -> None:
        self._sink = sink
        self._watchdog = watchdog
        self._total_deadline_ns = total_deadline_ns
        self._parser = SseParser()
        self._pending: list[tuple[bytes, int]] = []
        self._pending_bytes = 0
        self._markers = sink.markers
        self._tail_size = max(map(len, sink.markers), default=1) - 1  # a marker may straddle reads
        self._tail = b""
        self._armed = False  # the last batch ended inside an event: parse each read until it is whole
        self._sniffing = True  # no byte other than white space (or a BOM) has come yet
        self._lead = b""  # a BOM's first bytes, while sniffing
        self._body: bytearray | None = None  # the body, when it is not an event stream

    def take(self, chunk: bytes, t_ns: int) -> bool:
        """Response.feed's sink, run in the client's read callback; True stops the reading."""
        if self._sink.first_token_ns is None:
            return self._parse(chunk, t_ns)
        self._pending.append((chunk, t_ns))
        self._pending_bytes += len(chunk)
        if self._armed:
            return self.catch_up()
        seen = self._tail + chunk
        self._tail = seen[-self._tail_size :]
        if self._pending_bytes < LAZY_MAX_BYTES:
            for marker in self._markers:
                if marker in seen:
                    break
            else:
                return False
        return self.catch_up()

    def catch_up(self) -> bool:
        """Parse the reads that wait; True once the stream's end is in. Raises StreamError on a bad event."""
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        if not pending:
            return False
        self._tail = b""
        done = any(self._parse(chunk, t_ns) for chunk, t_ns in pending)
        self._armed = not done and self._parser.pending
        return done

    def catch_up_after_cancel(self) -> None:
        """The task is being cancelled: parse what came, so the outcome counts it; a bad event among it is
        the request's error when the cancellation is the watchdog's (the request ends classified either way)."""
        try:
            self.catch_up()
        except StreamError:
            if self._watchdog.absorb():
                raise
            # cancelled from outside (the engine stopping): the cancellation goes on

    def close(self) -> None:
        """The body ended: a last event without its blank line still counts; a body that was not a
        stream is classified now."""
        if self._body is not None:
            raise body_error(bytes(self._body), self._sink)
        sink = self._sink
        for event in self._parser.close(time.perf_counter_ns()):
            sink.event(event.data, event.event, event.t_ns)
            if sink.done:
                return

    def _parse(self, chunk: bytes, t_ns: int) -> bool:
        if self._sniffing and self._sniff(chunk, t_ns):
            return False
        if self._body is not None:
            self._body += chunk
            if len(self._body) > MAX_JSON_BODY:
                raise StreamError("not_streamed", f"{NOT_STREAMED_MESSAGE} (a body over {MAX_JSON_BODY} bytes)")
            return False
        sink = self._sink
        had_token = sink.first_token_ns is not None
        for event in self._parser.feed(chunk, t_ns):
            sink.event(event.data, event.event, event.t_ns)
            if sink.done:
                return True
        if self._parser.overflowed:
            raise StreamError("bad_json", "an SSE line longer than 4 MiB")
        if not had_token and sink.first_token_ns is not None:
            self._watchdog.arm(self._total_deadline_ns)  # the first token came: from now on only the whole limit
        return False

    def _sniff(self, chunk: bytes, t_ns: int) -> bool:
        """Look at the body's first bytes; True when it is not an event stream (it is then kept whole)."""
        lead = (self._lead + chunk).lstrip(_WHITESPACE)
        if lead.startswith(BOM):
            lead = lead[len(BOM) :].lstrip(_WHITESPACE)
        if not lead or BOM.startswith(lead):
            self._lead = lead
            return False
        self._sniffing = False
        self._lead = b""
        if lead[:1] not in (b"{", b"[", b"<"):
            return False
        self._body = bytearray(lead)
        self._sink.first_event_ns = t_ns
        return True


def body_error(body: bytes, sink: StreamSink) -> StreamError:
    """What a 200 whose body was one document instead of an event stream means.

    A server that ignores `"stream": true` (or a proxy that buffers the stream into one body) answered,
    but nothing lpxtop reports can be measured from one body: TTFT, ITL and TPOT need the tokens' own
    arrival times, and taking the body's arrival as every token's would put E2E into TTFT and zero into
    ITL, bending the endpoint's percentiles. Counting it a success without figures would show the
    endpoint "up" with empty latency columns and no reason why. So it is a failure of its own kind,
    `not_streamed`, whose message says what happened; the sink keeps what it can use (the token count
    from `usage`). A JSON `{"error": ...}` body is that error (`error_event`); a body that is not the
    API's answer is `bad_json`.
    """
    text = body.decode("utf-8", errors="replace")
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        if text.lstrip()[:1] == "<":
            return StreamError("not_streamed", f"the server answered a page, not an event stream: {short(text)[:120]}")
        return StreamError("bad_json", f"the server answered neither an event stream nor JSON: {short(text)[:80]}")
    if isinstance(obj, dict):
        if obj.get("error"):
            return StreamError("error_event", error_text(obj["error"]))
        if sink.whole_body(obj):
            return StreamError("not_streamed", NOT_STREAMED_MESSAGE)
    return StreamError("bad_json", f"the server answered JSON that is not its API's answer: {short(text)[:80]}")
