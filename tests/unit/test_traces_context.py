"""traceparent parsing (W3C Trace Context) and whether an endpoint's clock is this host's."""

from __future__ import annotations

import socket

import pytest

from lpxtop.engine.traces.context import parse_traceparent, same_host

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


def test_valid_traceparent():
    ctx = parse_traceparent(f"00-{TRACE}-{SPAN}-01")
    assert (ctx.trace_id, ctx.span_id, ctx.flags, ctx.sampled) == (TRACE, SPAN, 1, True)
    assert not parse_traceparent(f"00-{TRACE}-{SPAN}-00").sampled


@pytest.mark.parametrize("header", [
    None, "", "garbage", f"00-{TRACE}-{SPAN}", f"00-{TRACE.upper()}-{SPAN}-01", f"ff-{TRACE}-{SPAN}-01",
    f"00-{'0' * 32}-{SPAN}-01", f"00-{TRACE}-{'0' * 16}-01", f"00-{TRACE}-{SPAN}-01-extra",
    f"00-{TRACE[:-1]}-{SPAN}-01", "00-" + "a" * 600,
])
def test_invalid_traceparents(header):
    assert parse_traceparent(header) is None


def test_a_future_version_may_carry_more_fields():
    assert parse_traceparent(f"01-{TRACE}-{SPAN}-01-more").trace_id == TRACE


@pytest.mark.parametrize("url, local", [
    ("http://127.0.0.1:8000/v1", True), ("http://localhost:8000", True), ("http://[::1]:8000", True),
    ("http://127.3.4.5/v1", True), ("http://0.0.0.0:1", True), (f"http://{socket.gethostname()}:80", True),
    ("http://192.0.2.7:8000", False), ("http://example.invalid", False), ("not a url", False), ("http://", False),
])
def test_same_host(url, local):
    assert same_host(url) is local
