"""Turn transport failures into the error classes of DESIGN.md, with a short message each."""

from __future__ import annotations

import errno
import socket
import sys

from lpxtop.engine.httpclient import (
    ConnectError,
    DecodingError,
    InvalidURL,
    ProxyError,
    ReadError,
    RedirectError,
    RemoteProtocolError,
    UnsupportedProtocol,
    WriteError,
)


def http_error_kind(status: int) -> str:
    """The error class of a final status the caller cannot use. Every status keeps its own number in the
    sample; the class says what to do: auth (401/403), path or model (404), rate (429), other client
    errors, server errors, a redirect that was not followed (3xx), or a status that is no error and
    no answer either (a 2xx other than the one expected, a number beyond 599; the client itself skips
    interim 1xx answers and refuses a 101 it did not ask for)."""
    if status in (401, 403, 404, 429):
        return f"http_{status}"
    if 500 <= status <= 599:
        return "http_5xx"
    if 400 <= status <= 499:
        return "http_4xx"
    if 300 <= status <= 399:
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
    for link in _chain(exc):
        if isinstance(link, RedirectError):
            return "http_3xx", str(link)
        if isinstance(link, ProxyError):  # the proxy's own failure: its message names the proxy
            if link.status_code is not None:
                return http_error_kind(link.status_code), str(link)
            cause = link.__cause__
            kind = classify_exception(cause, started_stream=False)[0] if cause is not None else "refused"
            return (kind if kind in ("refused", "dns", "tls") else "refused"), str(link)
    ssl = sys.modules.get("ssl")
    for link in _chain(exc):
        if ssl is not None and isinstance(link, ssl.SSLError | ssl.CertificateError):
            return "tls", f"TLS failed: {link}"
        if isinstance(link, socket.gaierror):
            return "dns", f"name lookup failed: {link.strerror or link}"
        if getattr(link, "errno", None) in (errno.EMFILE, errno.ENFILE):
            return "client_fd_limit", _fd_limit_message(link)
        if isinstance(link, ConnectionRefusedError) or getattr(link, "errno", None) == errno.ECONNREFUSED:
            return "refused", "connection refused: nothing listens on that port"
    text = str(exc) or type(exc).__name__
    lowered = text.lower()
    if "too many open files" in lowered:
        return "client_fd_limit", _fd_limit_message(exc)
    if "name or service not known" in lowered or "nodename nor servname" in lowered or "temporary failure in name resolution" in lowered:
        return "dns", f"name lookup failed: {text}"
    if "ssl" in lowered or "certificate" in lowered:
        return "tls", f"TLS failed: {text}"
    if isinstance(exc, ConnectError):
        if "refused" in lowered or "errno 111" in lowered:
            return "refused", "connection refused: nothing listens on that port"
        return "refused", f"could not connect: {text}"
    if isinstance(exc, DecodingError):
        return "other", f"the server's body could not be decoded: {text}"
    if isinstance(exc, RemoteProtocolError | ReadError | WriteError | ConnectionError):
        where = "mid-stream" if started_stream else "before answering"
        return "stream_cut", f"the server closed the connection {where}: {text}"
    if isinstance(exc, UnsupportedProtocol | InvalidURL):
        return "other", f"bad URL: {text}"
    return "other", f"{type(exc).__name__}: {text}"


def _fd_limit_message(exc: BaseException) -> str:
    """lpxtop itself ran out of file descriptors (EMFILE/ENFILE): its own limit, never the server's answer."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        limit = f" (this process may open {soft}: raise it with `ulimit -n`)" if soft != resource.RLIM_INFINITY else ""
    except (ImportError, OSError, ValueError):
        limit = ""
    return f"lpxtop ran out of file descriptors{limit}, not the server: {getattr(exc, 'strerror', None) or exc}"
