"""HTTP/1.1 framing, held to h11: the response head, which framing the body has, and undoing chunked framing.

The head: a status line and header lines up to the first blank line (`find_head_end`, `parse_head`),
parsed to RFC 9110/9112's grammar as h11 reads it, bounded in bytes (`MAX_HEAD_BYTES`) and in lines
(`MAX_HEADERS`). The body's framing (`body_framing`, RFC 9112 section 6): none (HEAD, 1xx, 204, 304),
chunked, Content-Length, or until the server closes. A chunked body is undone by `ChunkedBody`, a few
bytearray operations per chunk, at most `LINES_PER_STEP` chunk lines (~1 µs each on a 2-core VM) per
event-loop step so that one response's decoding never holds the loop for long (benchmarks/http_cost.py).

Held to h11, the reference parser, by a differential test that feeds both the same bytes split at
every point (tests/http/test_http_differential.py).
"""

from __future__ import annotations

import re

from lpxtop.http.errors import RemoteProtocolError

MAX_HEAD_BYTES = 64 * 1024  # status line + headers (and, separately, the trailers of a chunked body)
MAX_HEADERS = 256
MAX_CHUNK_LINE = 1024  # a chunk-size line with its extensions
# Lines (chunk sizes, trailers) decoded in one event-loop step; the rest waits a turn of the loop.
# ~1 µs a line on a 2-core VM: a step stays near 0.1 ms whatever the chunking (benchmarks/http_cost.py).
LINES_PER_STEP = 128

# Body framing of a response; DRAIN: the framing is done, the content decoder still has output
DONE, LENGTH, CHUNKED, CLOSE, DRAIN = 0, 1, 2, 3, 4
# Where a chunked body is: a size line next, chunk data, the CRLF after the data, the trailers
_SIZE, _DATA, _DATA_END, _TRAILERS = 0, 1, 2, 3
_HEX = b"0123456789abcdefABCDEF"

_BLANK_LINE = re.compile(rb"\n\r?\n")
# RFC 9110/9112 grammar, as h11 (the reference the framing is held to) reads it
_STATUS_LINE = re.compile(rb"HTTP/([0-9]\.[0-9]) ([0-9]{3})(?: ((?:[ \t]|[^\x00\s])*))?")
_HEADER_LINE = re.compile(rb"([-!#$%&'*+.^_`|~0-9a-zA-Z]+):[ \t]*((?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?)[ \t]*")
_FOLD = re.compile(rb"[ \t]+")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;[^\n]*)?[ \t]*")


def find_head_end(buffer: bytearray, start: int = 0) -> tuple[int, int]:
    """(end of the head, length of the blank line after it), or (-1, 0) while incomplete. The head ends at
    the first blank line (LF, optional CR, LF); `start`: where to look from (earlier bytes were searched)."""
    if buffer[:1] == b"\n":
        return 0, 1
    if buffer[:2] == b"\r\n":
        return 0, 2
    found = _BLANK_LINE.search(buffer, start)
    if found is None:
        return -1, 0
    return found.start(), found.end() - found.start()


def header_lines(lines: list[bytes], what: str) -> dict[str, str]:
    """Header (or trailer) lines, CR removed, as a dict of lower-case names; repeated names joined with ", "."""
    if len(lines) > MAX_HEADERS:
        raise RemoteProtocolError(f"more than {MAX_HEADERS} {what}s")
    headers: dict[str, str] = {}
    folded: list[bytes] = []
    for line in lines:
        fold = _FOLD.match(line)
        if fold is not None:  # obsolete line folding: continues the line before
            if not folded:
                raise RemoteProtocolError(f"a continuation line at the start of the {what}s: {line[:60]!r}")
            folded[-1] = folded[-1] + b" " + line[fold.end() :]
            continue
        folded.append(line)
    for line in folded:
        match = _HEADER_LINE.fullmatch(line)
        if match is None:
            raise RemoteProtocolError(f"malformed {what} line {line[:60]!r}")
        name = match.group(1).decode("ascii").lower()
        value = match.group(2).decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


def _split_lines(head: bytes) -> list[bytes]:
    lines = head.split(b"\n")
    return [line[:-1] if line[-1:] == b"\r" else line for line in lines]


def parse_head(head: bytes) -> tuple[int, str, str, dict[str, str]]:
    """(status, reason, HTTP version, headers) of a response head, its blank line excluded."""
    lines = _split_lines(head)
    status = _STATUS_LINE.fullmatch(lines[0])
    if status is None:
        raise RemoteProtocolError(f"malformed status line {lines[0][:60]!r}")
    headers = header_lines(lines[1:], "header")
    reason = status.group(3)
    version = f"HTTP/{status.group(1).decode('ascii')}"
    return int(status.group(2)), reason.decode("latin-1") if reason else "", version, headers


def body_framing(method: str, status: int, version: str, headers: dict[str, str]) -> tuple[int, int, bool]:
    """(framing, Content-Length, keep-alive) of a response, from RFC 9112 section 6 (as h11 reads it)."""
    tokens = {t.strip(" \t").lower() for t in headers.get("connection", "").split(",")}
    keep_alive = "close" not in tokens if version >= "HTTP/1.1" else "keep-alive" in tokens
    length = headers.get("content-length")
    size = 0
    if length is not None:
        values = {v.strip(" \t") for v in length.split(",")}
        value = values.pop() if len(values) == 1 else ""
        if not value.isascii() or not value.isdigit() or len(value) > 20:
            raise RemoteProtocolError(f"bad Content-Length {length[:40]!r}")
        size = int(value)
        headers["content-length"] = value  # "2, 2" is 2 (as h11 normalizes it)
    encoding = headers.get("transfer-encoding")
    if encoding is not None:
        if encoding.lower() != "chunked":
            raise RemoteProtocolError(f"unsupported Transfer-Encoding {encoding[:40]!r} (only chunked is understood)")
        headers["transfer-encoding"] = "chunked"
    if method == "HEAD" or status in (204, 304) or status < 200 or (method == "CONNECT" and status < 300):
        return DONE, 0, keep_alive
    if encoding is not None:
        return CHUNKED, 0, keep_alive
    if length is not None:
        return (LENGTH if size else DONE), size, keep_alive
    return CLOSE, 0, False


def take_front(buffer: bytearray, count: int) -> bytes:
    """The first `count` bytes of `buffer` (all of it when it holds no more), removed from it."""
    if count >= len(buffer):
        data = bytes(buffer)
        buffer.clear()
    else:
        data = bytes(buffer[:count])
        del buffer[:count]
    return data


class ChunkedBody:
    """Where a chunked body is, between reads: `take()` undoes the framing of what is buffered.

    After `take()`: `more` says it stopped at its step's limit of lines with more ready to decode,
    `done` that the last chunk and the trailers have come.
    """

    __slots__ = ("state", "remaining", "scanned", "trailer_bytes", "trailers", "more", "done")

    def __init__(self) -> None:
        self.state = _SIZE
        self.remaining = 0  # what is left of the current chunk's data
        self.scanned = 0  # bytes of an incomplete line already searched for its end
        self.trailer_bytes = 0
        self.trailers: list[bytes] = []
        self.more = False
        self.done = False

    def take(self, buffer: bytearray, end: int) -> bytes:
        """Take the body bytes out of the first `end` bytes of the buffered chunked framing, at most
        `LINES_PER_STEP` lines of it; leave an incomplete line in place. Linear in the bytes whatever
        the chunking: pieces are joined once, and an incomplete line is never searched twice. Broken
        framing is a RemoteProtocolError."""
        self.more = False
        if self.state == _SIZE and end == len(buffer):
            # The usual case of a stream: the buffer holds exactly one whole chunk, without extensions.
            eol = buffer.find(b"\r\n", 0, 17)
            if eol > 0:
                size_hex = buffer[:eol]
                if not size_hex.translate(None, _HEX):
                    size = int(size_hex, 16)
                    stop = eol + 2 + size
                    if size and len(buffer) == stop + 2 and buffer.endswith(b"\r\n"):
                        data = bytes(buffer[eol + 2 : stop])
                        buffer.clear()
                        return data
        pieces: list[bytes] = []
        pos = 0
        state = self.state
        lines = LINES_PER_STEP
        try:
            while pos < end:
                if state == _DATA:
                    take = min(self.remaining, end - pos)
                    pieces.append(buffer[pos : pos + take])
                    pos += take
                    self.remaining -= take
                    if self.remaining == 0:
                        state = _DATA_END
                elif state == _SIZE:
                    if not lines:
                        self.more = True
                        break
                    lines -= 1
                    eol = buffer.find(b"\n", pos + self.scanned, min(end, pos + MAX_CHUNK_LINE + 1))
                    if eol < 0:
                        if end - pos > MAX_CHUNK_LINE:
                            raise RemoteProtocolError(f"a chunk-size line longer than {MAX_CHUNK_LINE} bytes")
                        self.scanned = end - pos
                        break
                    self.scanned = 0
                    line = bytes(buffer[pos : eol - 1])
                    size_match = _CHUNK_SIZE.fullmatch(line) if eol > pos and buffer[eol - 1] == 0x0D else None
                    if size_match is None:
                        raise RemoteProtocolError(f"malformed chunk-size line {line[:40]!r}")
                    pos = eol + 1
                    size = int(size_match.group(1), 16)
                    if size:
                        self.remaining = size
                        state = _DATA
                    else:
                        state = _TRAILERS
                elif state == _DATA_END:  # CR LF after the data (h11 and RFC 9112: no bare LF here)
                    if buffer[pos] != 0x0D or (pos + 1 < end and buffer[pos + 1] != 0x0A):
                        raise RemoteProtocolError("chunk data longer than its announced size")
                    if pos + 1 >= end:
                        break
                    pos += 2
                    state = _SIZE
                else:  # _TRAILERS: header lines until an empty one, then the body is complete
                    if not lines:
                        self.more = True
                        break
                    lines -= 1
                    eol = buffer.find(b"\n", pos + self.scanned, end)
                    if eol < 0:
                        if self.trailer_bytes + end - pos > MAX_HEAD_BYTES:
                            raise RemoteProtocolError(f"chunked trailers larger than {MAX_HEAD_BYTES} bytes")
                        self.scanned = end - pos
                        break
                    self.scanned = 0
                    line_length = eol - pos
                    line = bytes(buffer[pos : eol - 1 if eol > pos and buffer[eol - 1] == 0x0D else eol])
                    pos = eol + 1
                    if not line:
                        header_lines(self.trailers, "trailer")  # the trailers must be header lines
                        self.trailers = []
                        self.done = True
                        break
                    self.trailer_bytes += line_length + 1
                    if self.trailer_bytes > MAX_HEAD_BYTES:
                        raise RemoteProtocolError(f"chunked trailers larger than {MAX_HEAD_BYTES} bytes")
                    self.trailers.append(line)
        finally:
            self.state = state
            if pos:
                del buffer[:pos]
        if not pieces:
            return b""
        return bytes(pieces[0]) if len(pieces) == 1 else b"".join(pieces)
