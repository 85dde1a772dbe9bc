"""The HTTP client's rules that need no socket: redirect targets and credentials, timeouts, the
content decoder against zlib's one-shot decoding at any chunking."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lpxtop.http import RedirectError, Timeout
from lpxtop.http.decoding import ContentDecoder, UnknownEncoding, decoder_for
from lpxtop.http.redirects import next_url, shown_url, strips_credentials, without_credentials


@pytest.mark.parametrize(
    ("old", "new", "strips"),
    [
        ("http://a.example/x", "http://a.example/y", False),
        ("http://a.example/x", "https://a.example/x", False),  # the upgrade to https, default ports
        ("http://a.example:80/x", "https://a.example:443/x", False),
        ("https://a.example/x", "http://a.example/x", True),  # a downgrade
        ("http://a.example:8000/x", "https://a.example/x", True),
        ("http://a.example/x", "http://a.example:8080/x", True),
        ("http://a.example/x", "http://b.example/x", True),
        ("http://127.0.0.1:8000/x", "http://localhost:8000/x", True),
        ("https://a.example/x", "https://A.EXAMPLE/y", False),  # host names compare without case
    ],
)
def test_credentials_follow_the_origin(old, new, strips):
    assert strips_credentials(old, new) is strips


def test_without_credentials_drops_secrets_in_any_header():
    from lpxtop import textsafe

    textsafe.register_secret("a-registered-secret-value")
    headers = {"Authorization": "Bearer abcdefgh", "Cookie": "s=1", "Proxy-Authorization": "Basic eHg6eXk=",
               "api-key": "a-registered-secret-value", "X-Query": "access_token=abcdefgh123", "Accept": "text/event-stream"}
    assert without_credentials(headers) == {"Accept": "text/event-stream"}


@pytest.mark.parametrize(
    ("url", "location", "expected"),
    [
        ("http://h/a/b", "/c", "http://h/c"),
        ("http://h/a/b", "c?x=1", "http://h/a/c?x=1"),
        ("http://h/a/b", "https://other:8443/d#frag", "https://other:8443/d"),
        ("http://h/a/b", "//cdn.example/e", "http://cdn.example/e"),
        ("http://h/a/b", "  /padded  ", "http://h/padded"),
    ],
)
def test_locations_resolve_against_the_url_that_answered(url, location, expected):
    assert next_url("GET", url, 302, location, {("GET", url)}, 0) == expected


def test_redirect_rules():
    visited = {("POST", "http://h/v1/chat/completions")}
    assert next_url("POST", "http://h/v1/chat/completions", 307, "/v2", visited, 0) == "http://h/v2"
    for status in (301, 302, 303):
        with pytest.raises(RedirectError) as caught:
            next_url("POST", "http://h/v1/chat/completions", status, "https://h/v1/chat/completions", visited, 0)
        assert caught.value.location == "https://h/v1/chat/completions" and caught.value.status_code == status
    assert next_url("HEAD", "http://h/a", 301, "/b", set(), 0) == "http://h/b"
    with pytest.raises(RedirectError, match="more than 5"):
        next_url("GET", "http://h/a", 302, "/b", set(), 5)
    with pytest.raises(RedirectError, match="loop"):
        next_url("GET", "http://h/a", 302, "/a", {("GET", "http://h/a")}, 1)
    with pytest.raises(RedirectError, match="not an http"):
        next_url("GET", "http://h/a", 302, "javascript:alert(1)", set(), 0)


def test_messages_show_urls_without_credentials_or_queries():
    assert shown_url("https://user:secret@h.example:8443/v1/x?api_key=k#f") == "https://h.example:8443/v1/x?…"
    with pytest.raises(RedirectError) as caught:
        next_url("POST", "http://u:pw123456@h/a?key=zz", 302, "http://u:pw123456@i/b?key=zz", set(), 0)
    assert "pw123456" not in str(caught.value) and "zz" not in str(caught.value)


def test_timeouts():
    assert Timeout.of(5) == Timeout(5, 5, 5, 5, 5)
    assert Timeout(connect=2, read=7, write=1, pool=3).with_total().total == 7
    assert Timeout(1, 2, 3, 4, total=9).with_total().total == 9
    assert Timeout(None, None, None, None).with_total().total is None


def test_which_decoder():
    assert decoder_for(None) is None and decoder_for("identity") is None and decoder_for(" Identity ") is None
    assert isinstance(decoder_for("gzip"), ContentDecoder) and decoder_for("x-gzip").coding == "gzip"
    assert decoder_for("deflate, identity").coding == "deflate"
    for coding in ("br", "zstd", "compress", "gzip, deflate", "gzip, gzip"):
        assert isinstance(decoder_for(coding), UnknownEncoding), coding


_PAYLOADS = st.one_of(st.binary(max_size=3000), st.integers(0, 200_000).map(lambda n: b"abc" * n))


@settings(max_examples=60, deadline=None)
@given(_PAYLOADS, st.sampled_from(["gzip", "deflate-zlib", "deflate-raw"]), st.lists(st.integers(1, 500), max_size=8),
       st.integers(1, 70_000))
def test_the_decoder_gives_what_zlib_gives_at_any_chunking(payload, form, cuts, step):
    if form == "gzip":
        encoded, coding = gzip.compress(payload), "gzip"
    elif form == "deflate-zlib":
        encoded, coding = zlib.compress(payload), "deflate"
    else:
        compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        encoded, coding = compressor.compress(payload) + compressor.flush(), "deflate"
    decoder = ContentDecoder(coding, step=step)
    out: list[bytes] = []
    position = 0
    for size in [*cuts, len(encoded)]:
        piece = encoded[position : position + size]
        position += len(piece)
        out.append(decoder.decode(piece))
        assert len(out[-1]) <= step
        while decoder.pending:
            out.append(decoder.decode(b""))
            assert len(out[-1]) <= step
    out.append(decoder.finish())
    while decoder.pending:
        out.append(decoder.finish())
    assert b"".join(out) == payload
