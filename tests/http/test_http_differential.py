"""lpxtop's HTTP/1.1 response framing held to h11's (rule 7: a hand-written parser answers to a reference).

The same response bytes, cut into reads at every point and in random chunkings (hypothesis), go to
lpxtop's client (a real connection; each piece is one socket read, see tests/support/http_reference.py) and to h11:
the status, the headers, the body, which read handed over which body bytes, and whether the body was
complete must be the same; a malformed response is an error in both, never an uncaught exception or a
hang. The long runs (thousands of cases) are marked slow; the main suite runs a short version.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.http_reference import Outcome, ours, reference, split

pytestmark = pytest.mark.timeout(300)

CANONICAL = [
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"6\r\ndata: \r\nC;name=value\r\n{\"a\": \"b\"}\n\n\r\n1A \r\ndata: [DONE]\n\ndata: more\n\n\r\n0\r\nX-Trailer: yes\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n"
    b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"error\": 42}",
    b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nclose-delimited\r\nbody",
    b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",  # bare LF heads: both accept
    b"HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\n",
    b"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"HTTP/1.1 200\r\nX-Folded: a\r\n  b\r\nX-Folded: c\r\nContent-Length: 2, 2\r\n\r\nok",
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"0000a\r\n0123456789\r\n0\r\n\r\n",
]

MALFORMED = [
    b"garbage\r\n\r\n",
    b"HTTP/1.1 2000 OK\r\n\r\n",
    b"HTTP/1.1 099 Too Low\r\n\r\n",
    b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nName : space before the colon\r\n\r\n",
    b"HTTP/1.1 200 OK\r\n continuation first\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nok\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n 2\r\nok\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokay\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nbad trailer\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
    b"HTTP/1.1 200 OK\r\nContent-",
    b"",
]


def key(outcome: Outcome) -> tuple:
    """What must agree. After an error only that there was one (and the status, if the head was read):
    the body bytes a reader was handed before the error may differ by the read that failed."""
    if outcome.error is not None:
        return outcome.status, "error"
    return outcome.status, outcome.headers, outcome.per_read, outcome.complete


async def assert_same(pieces: list[bytes], method: str = "GET") -> tuple[Outcome, Outcome]:
    mine, theirs = await ours(pieces, method), reference(pieces, method)
    assert key(mine) == key(theirs), (pieces, mine, theirs)
    return mine, theirs


@pytest.mark.parametrize("data", CANONICAL, ids=range(len(CANONICAL)))
async def test_valid_responses_at_every_split_point_and_byte_by_byte(data):
    mine, _ = await assert_same([data])
    assert mine.error is None and mine.complete
    for cut in range(1, len(data)):
        await assert_same(split(data, [cut]))
    await assert_same([data[i : i + 1] for i in range(len(data))])


@pytest.mark.parametrize("data", MALFORMED, ids=range(len(MALFORMED)))
async def test_malformed_responses_are_an_error_in_both(data):
    for cut in range(0, len(data) + 1, max(1, len(data) // 24)):
        mine, theirs = await assert_same(split(data, [cut]) if data else [])
        assert mine.error is not None and theirs.error is not None, (data, cut)


async def test_head_requests_have_no_body():
    data = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"
    mine, _ = await assert_same([data], method="HEAD")
    assert mine.complete and mine.body == b""


# --- generated responses -------------------------------------------------------------------------------

_TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!#$%&'*+^`|~",
                 min_size=1, max_size=12)
_VISIBLE = st.binary(min_size=1, max_size=10).map(lambda b: bytes(c for c in b if c > 0x20 and c != 0x7F) or b"v")
_VALUE = st.lists(_VISIBLE, min_size=0, max_size=3).map(lambda words: b" ".join(words))
_OWS = st.sampled_from([b"", b" ", b"\t", b"  "])
_EOL = st.sampled_from([b"\r\n", b"\n"])
_RESERVED = {"content-length", "transfer-encoding", "connection", "content-encoding"}


@st.composite
def responses(draw) -> bytes:
    """A valid HTTP/1.1 response (interim answers, any framing, folded and repeated headers, trailers)."""
    eol = draw(_EOL)  # heads may use bare LF (both accept); the chunked framing uses CRLF (h11 needs it)
    out = bytearray()
    for _ in range(draw(st.integers(0, 2))):
        code = draw(st.sampled_from([100, 102, 103]))
        out += b"HTTP/1.1 %d Interim%s" % (code, eol)
        if draw(st.booleans()):
            out += b"Link: </style.css>; rel=preload" + eol
        out += eol
    method_head = False
    status = draw(st.sampled_from([200, 200, 200, 201, 204, 206, 302, 304, 400, 404, 429, 500, 503, 599, 777]))
    version = draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0"]))
    reason = draw(st.one_of(st.none(), st.just(b""), _VALUE))
    out += version + b" %03d" % status + (b"" if reason is None else b" " + reason) + eol
    for _ in range(draw(st.integers(0, 5))):
        name = draw(_TOKEN)
        if name.lower() in _RESERVED:
            continue
        out += name.encode() + b":" + draw(_OWS) + draw(_VALUE) + draw(_OWS) + eol
        if draw(st.integers(0, 4)) == 0:  # obsolete line folding
            out += draw(st.sampled_from([b" ", b"\t", b"   "])) + draw(_VISIBLE) + eol
    body = draw(st.binary(max_size=300))
    no_body = status in (204, 304) or method_head
    framing = draw(st.sampled_from(["length", "chunked", "close"]))
    if framing == "length":
        out += b"Content-Length:" + draw(_OWS) + str(len(body)).encode() + eol + eol
        if not no_body:
            out += body
    elif framing == "chunked":
        out += b"Transfer-Encoding: " + draw(st.sampled_from([b"chunked", b"Chunked", b"CHUNKED"])) + eol + eol
        if not no_body:
            cuts = draw(st.lists(st.integers(0, len(body)), max_size=6))
            for piece in split(body, cuts) if body else []:
                size = b"%x" % len(piece)
                size = draw(st.sampled_from([size, size.upper(), b"00" + size]))
                ext = draw(st.sampled_from([b"", b";a=b", b';name="quoted value"', b";x"]))
                out += size + ext + draw(st.sampled_from([b"", b" ", b"\t"])) + b"\r\n" + piece + b"\r\n"
            out += b"0\r\n"
            for _ in range(draw(st.integers(0, 2))):
                out += draw(_TOKEN).encode() + b": " + draw(_VALUE) + b"\r\n"
            out += b"\r\n"
    else:
        out += eol
        if not no_body:
            out += body
    return bytes(out)


def chunkings(data: bytes):
    return st.lists(st.integers(1, max(1, len(data) - 1)), max_size=12).map(lambda cuts: split(data, cuts))


@st.composite
def cases(draw) -> list[bytes]:
    data = draw(responses())
    if draw(st.integers(0, 9)) == 0:
        return [data[i : i + 1] for i in range(len(data))]
    return draw(chunkings(data))


async def check_generated(pieces: list[bytes]) -> None:
    mine, theirs = await assert_same(pieces)
    assert theirs.error is None, theirs.error  # the generator makes valid responses only
    assert mine.complete == theirs.complete


_SHORT = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_LONG = settings(max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SHORT
@given(cases())
async def test_generated_responses_in_random_reads(pieces):
    await check_generated(pieces)


@pytest.mark.slow
@_LONG
@given(cases())
async def test_generated_responses_in_random_reads_long(pieces):
    await check_generated(pieces)


# --- mutated responses -----------------------------------------------------------------------------------

@st.composite
def mutated(draw) -> list[bytes]:
    data = bytearray(draw(responses()))
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.integers(0, max(0, len(data) - 1)))
        action = draw(st.sampled_from(["flip", "insert", "delete", "duplicate"]))
        if action == "flip" and data:
            data[where] = draw(st.sampled_from([0x00, 0x09, 0x0A, 0x0D, 0x20, 0x3A, 0x3B, 0x30, 0x66, 0x7F, 0xFF]))
        elif action == "insert":
            data[where:where] = draw(st.sampled_from([b"\r\n", b"\n", b":", b" ", b"0", b"\r\n\r\n", b"HTTP/1.1 "]))
        elif action == "delete" and data:
            del data[where : where + draw(st.integers(1, 4))]
        else:
            data[where:where] = data[where : where + draw(st.integers(1, 8))]
    return draw(chunkings(bytes(data)))


async def check_mutated(pieces: list[bytes]) -> None:
    """Never an uncaught exception or a hang (ours() raises those), and the same result as h11's."""
    mine, theirs = await ours(pieces), reference(pieces)
    assert key(mine) == key(theirs), (pieces, mine, theirs)


@_SHORT
@given(mutated())
async def test_mutated_responses_never_crash_or_hang(pieces):
    await check_mutated(pieces)


@pytest.mark.slow
@_LONG
@given(mutated())
async def test_mutated_responses_never_crash_or_hang_long(pieces):
    await check_mutated(pieces)
