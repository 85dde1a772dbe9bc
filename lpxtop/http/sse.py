"""Incremental Server-Sent Events parser: bytes in as they arrive, complete events out.

The caller timestamps each network read and passes that time in; every event completed by that read
carries it, so decoding and JSON work never shift a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_PENDING_BYTES = 4 * 1024 * 1024  # a line longer than this is garbage, not an event
BOM = b"\xef\xbb\xbf"  # the stream may begin with one UTF-8 byte order mark, which is not part of a field


@dataclass(frozen=True)
class SseEvent:
    data: str
    t_ns: int  # arrival time of the read that completed the event
    event: str | None = None


class SseParser:
    """Splits a byte stream into SSE events (``data:`` lines joined by newlines, blank line ends an event).

    Accepts LF, CRLF and CR line endings, comments (``:``), ``event:`` fields and data split across reads at
    any byte, including inside a multi-byte UTF-8 character (lines are decoded only once complete), and
    drops a UTF-8 byte order mark at the start of the stream, as the SSE specification says (kept, it
    would make the first line's field name "\\ufeffdata" and lose the first event).
    Held to a maintained parser (httpx-sse's decoder) by tests/http/test_sse_reference.py.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._data: list[str] = []
        self._event: str | None = None
        self._pending_cr = False
        self._started = False  # any byte seen yet (a BOM is only dropped at the very start)
        self.overflowed = False

    @property
    def pending(self) -> bool:
        """True while part of an event (a line, or data lines without their blank line) waits for more bytes."""
        return bool(self._buffer or self._data or self._pending_cr)

    def feed(self, chunk: bytes, t_ns: int) -> list[SseEvent]:
        """Consume one read; return the events it completed, all stamped with `t_ns`."""
        if (
            chunk.startswith(b"data:")
            and chunk.endswith(b"\n\n")
            and chunk.count(b"\n") == 2
            and not self._buffer
            and not self._data
            and not self._pending_cr
            and self._event is None
            and b"\r" not in chunk
        ):
            # The usual read of a stream: exactly one whole `data:` line and the blank line after it.
            self._started = True
            value = chunk[5:-2].decode("utf-8", errors="replace")
            return [SseEvent(data=value[1:] if value.startswith(" ") else value, t_ns=t_ns)]
        if not self._started:
            chunk = self._drop_bom(chunk)
            if not chunk:
                return []
        events: list[SseEvent] = []
        if self._pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]  # the LF of a CRLF split across two reads
        self._pending_cr = False
        self._buffer += chunk
        while True:
            cut, skip = _next_line_end(self._buffer)
            if cut < 0:
                break
            line = bytes(self._buffer[:cut])
            if skip == 1 and self._buffer[cut] == 0x0D and cut + 1 == len(self._buffer):
                self._pending_cr = True  # CR at the end of this read: a LF may follow in the next one
            del self._buffer[: cut + skip]
            event = self._line(line.decode("utf-8", errors="replace"), t_ns)
            if event is not None:
                events.append(event)
        if len(self._buffer) > MAX_PENDING_BYTES:
            self.overflowed = True
            self._buffer.clear()
        return events

    def _drop_bom(self, chunk: bytes) -> bytes:
        """The stream's first bytes without a leading BOM; b"" while they could still be the start of one."""
        head = bytes(self._buffer) + chunk
        if len(head) < len(BOM) and BOM.startswith(head):
            self._buffer = bytearray(head)  # wait: the BOM may be split across reads
            return b""
        self._started = True
        self._buffer.clear()
        return head[len(BOM) :] if head.startswith(BOM) else head

    def close(self, t_ns: int) -> list[SseEvent]:
        """End of stream: a final event with no trailing blank line still counts."""
        events: list[SseEvent] = []
        if self._buffer:
            event = self._line(self._buffer.decode("utf-8", errors="replace"), t_ns)
            self._buffer.clear()
            if event is not None:
                events.append(event)
        event = self._line("", t_ns)
        if event is not None:
            events.append(event)
        return events

    def _line(self, line: str, t_ns: int) -> SseEvent | None:
        if line == "":
            if not self._data:
                self._event = None
                return None
            event = SseEvent(data="\n".join(self._data), t_ns=t_ns, event=self._event)
            self._data = []
            self._event = None
            return event
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        return None


def _next_line_end(buf: bytearray) -> tuple[int, int]:
    """Index of the next line terminator and its length (CRLF = 2), or (-1, 0)."""
    lf = buf.find(b"\n")
    cr = buf.find(b"\r")
    if cr >= 0 and (lf < 0 or cr < lf):
        if cr + 1 < len(buf) and buf[cr + 1] == 0x0A:
            return cr, 2
        return cr, 1
    if lf >= 0:
        return lf, 1
    return -1, 0
