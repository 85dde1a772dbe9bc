"""Undoing a response's Content-Encoding (gzip, deflate) as the body arrives, within a size bound.

lpxtop asks for `Accept-Encoding: identity`, but a reverse proxy in front of a server may compress
/metrics (or even a stream) regardless. `zlib`'s incremental decompressor undoes gzip and deflate one
read at a time, so a stream's reads keep their own arrival stamps whatever decoding follows.

Bounded twice: the decoded size of a whole body (`max_bytes`: past it the body is a
`DecodingError`, a compression bomb and not an out-of-memory), and the output of one call (`step`:
what is left waits in the decompressor, `pending` says so, and the caller gets it with the next
call, after letting its event loop run) so that inflating one body never holds the loop for long.
An encoding other than gzip, deflate or identity is a `DecodingError` when the body is read (the
status and headers stay usable).
"""

from __future__ import annotations

import zlib

from lpxtop.http.errors import DecodingError

MAX_DECODED_BYTES = 64 * 1024 * 1024
DECODE_STEP_BYTES = 256 * 1024  # one call's output: ~0.2 ms of inflating on a 2-core VM

_GZIP_WBITS = 16 + zlib.MAX_WBITS
_ZLIB_WBITS = zlib.MAX_WBITS
_RAW_WBITS = -zlib.MAX_WBITS


class ContentDecoder:
    """One body's decoder: `decode(data)` for each piece of the body, `finish()` at its end."""

    __slots__ = ("coding", "pending", "_wbits", "_inflater", "_tail", "_left", "_limit", "_step", "_seen",
                 "_fed", "_probe")

    def __init__(self, coding: str, *, max_bytes: int = MAX_DECODED_BYTES, step: int = DECODE_STEP_BYTES) -> None:
        self.coding = coding
        self.pending = False  # compressed input waits for the next call (the last one hit `step`)
        self._wbits = _GZIP_WBITS if coding == "gzip" else _ZLIB_WBITS
        self._inflater = zlib.decompressobj(self._wbits)
        self._tail = b""  # input the inflater has not taken yet
        self._left = self._limit = max_bytes
        self._step = max(1, step)
        self._seen = 0  # compressed bytes given so far
        self._fed = False  # the current inflater (gzip: the current member) has been given bytes
        # deflate is zlib-wrapped by the standard, raw by some servers: the first two bytes tell which
        self._probe: bytes | None = b"" if coding == "deflate" else None

    def decode(self, data: bytes) -> bytes:
        """The decoded bytes of `data` (and of input left from the previous call), at most `step` of them."""
        self._seen += len(data)
        data = self._tail + data if self._tail else data
        self._tail = b""
        if not data and not self.pending:
            return b""
        try:
            if self._probe is not None:
                self._probe += data
                try:
                    out = self._inflate(data)
                except zlib.error:
                    self._inflater = zlib.decompressobj(_RAW_WBITS)
                    self._wbits = _RAW_WBITS
                    out = self._inflate(self._probe)
                    self._probe = None
                if self._probe is not None and len(self._probe) >= 2:
                    self._probe = None
            else:
                out = self._inflate(data)
        except zlib.error as exc:
            raise DecodingError(f"the {self.coding} body is corrupt: {exc}") from exc
        return out

    def _inflate(self, data: bytes) -> bytes:
        outs: list[bytes] = []
        budget = min(self._step, self._left + 1)  # never 0: zlib reads max_length=0 as "no limit"
        full = False  # the output filled the budget: zlib may owe more even with all input taken
        while True:
            inflater = self._inflater
            self._fed = True
            out = inflater.decompress(data, budget)
            if len(out) > self._left:
                raise DecodingError(f"the {self.coding} body decodes to more than {self._limit} bytes (a compression bomb?)")
            self._left -= len(out)
            budget -= len(out)
            full = budget == 0 and not inflater.eof
            outs.append(out)
            self._tail = inflater.unconsumed_tail
            rest = inflater.unused_data if inflater.eof else b""
            if not rest:
                break
            # More after the end of the compressed data: another gzip member (concatenated members are one
            # body), padding NULs, or garbage.
            if self._wbits == _GZIP_WBITS and rest[:2] == b"\x1f\x8b"[: len(rest[:2])]:
                self._inflater = zlib.decompressobj(self._wbits)
                self._fed = False
                data = rest
                if budget > 0:
                    continue
                self._tail = rest
            elif rest.strip(b"\0"):
                raise DecodingError(f"bytes after the end of the {self.coding} data")
            else:  # padding: read it from the eof'd inflater's unused_data no more
                self._inflater = zlib.decompressobj(self._wbits)
                self._fed = False
            break
        self.pending = bool(self._tail) or full
        return b"".join(outs) if len(outs) > 1 else outs[0]

    def finish(self) -> bytes:
        """The last decoded bytes once the body has ended. Call it while `pending` stays True (each call
        gives at most `step` bytes); a compressed stream cut short is a `DecodingError`."""
        out = self.decode(b"") if self.pending else b""
        if not self.pending and self._seen and self._fed and not self._inflater.eof:
            raise DecodingError(f"the {self.coding} body ends in the middle of its compressed data")
        return out


class UnknownEncoding:
    """Stands in for a decoder when the server used a Content-Encoding lpxtop cannot undo: reading the
    body raises, the status and headers stay usable."""

    __slots__ = ("coding",)
    pending = False

    def __init__(self, coding: str) -> None:
        self.coding = coding

    def decode(self, data: bytes) -> bytes:
        if not data:
            return b""
        raise DecodingError(
            f"the server sent Content-Encoding: {self.coding[:40]}, which lpxtop cannot decode "
            "(it asked for identity; gzip and deflate are understood)"
        )

    def finish(self) -> bytes:
        return b""


def decoder_for(content_encoding: str | None) -> ContentDecoder | UnknownEncoding | None:
    """The decoder a body with this Content-Encoding header needs; None for none or identity."""
    if content_encoding is None:
        return None
    codings = [c.strip().lower() for c in content_encoding.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return None
    if len(codings) == 1:
        coding = "gzip" if codings[0] in ("gzip", "x-gzip") else codings[0]
        if coding in ("gzip", "deflate"):
            return ContentDecoder(coding)
    return UnknownEncoding(content_encoding.strip())
