"""Turn transport failures into the error classes of DESIGN.md, with a short message each."""

from __future__ import annotations

import errno
import socket
import sys

from lpxtop.engine.httpclient import (
    ConnectError,
    InvalidURL,
    ReadError,
    RemoteProtocolError,
    UnsupportedProtocol,
    WriteError,
)


def http_error_kind(status: int) -> str:
    """The class of a status other than 200: a redirect left unfollowed and an unexpected 1xx/2xx (204 No
    Content, 202 Accepted...) are not client errors, so they are not called `http_4xx`."""
    if status in (401, 403, 404, 429):
        return f"http_{status}"
    if status >= 500:
        return "http_5xx"
    if status >= 400:
        return "http_4xx"
    if status >= 300:
        return "http_3xx"
    return "http_other"


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def classify_exception(exc: BaseException, *, started_stream: bool) -> tuple[str, str]:
    """(kind, message) for an exception raised while connecting or reading."""
    # ssl is imported by whoever made a TLS connection (asyncio, the client's https path): if it is not
    # loaded, no exception can be an ssl one.
    ssl = sys.modules.get("ssl")
    for link in _chain(exc):
        if ssl is not None and isinstance(link, ssl.SSLError | ssl.CertificateError):
            return "tls", f"TLS failed: {link}"
        if isinstance(link, socket.gaierror):
            return "dns", f"name lookup failed: {link.strerror or link}"
        if isinstance(link, ConnectionRefusedError) or getattr(link, "errno", None) == errno.ECONNREFUSED:
            return "refused", "connection refused: nothing listens on that port"
    text = str(exc) or type(exc).__name__
    lowered = text.lower()
    if "name or service not known" in lowered or "nodename nor servname" in lowered or "temporary failure in name resolution" in lowered:
        return "dns", f"name lookup failed: {text}"
    if "ssl" in lowered or "certificate" in lowered:
        return "tls", f"TLS failed: {text}"
    if isinstance(exc, ConnectError):
        if "refused" in lowered or "errno 111" in lowered:
            return "refused", "connection refused: nothing listens on that port"
        return "refused", f"could not connect: {text}"
    if isinstance(exc, RemoteProtocolError | ReadError | WriteError | ConnectionError):
        where = "mid-stream" if started_stream else "before answering"
        return "stream_cut", f"the server closed the connection {where}: {text}"
    if isinstance(exc, UnsupportedProtocol | InvalidURL):
        return "other", f"bad URL: {text}"
    return "other", f"{type(exc).__name__}: {text}"
