"""The error classes of a measured request: what a transport failure, an HTTP status or a failing
answer is called, with a short message each (the classes are listed in docs/measurement.md and
`lpxtop.model.probe.ERROR_KINDS`)."""

from __future__ import annotations

import errno
import json
import math
import socket
import sys
import time
from email.utils import parsedate_to_datetime

from lpxtop.http import (
    ConnectError,
    DecodingError,
    HttpError,
    InvalidURL,
    ProxyError,
    ReadError,
    RedirectError,
    RemoteProtocolError,
    Response,
    UnsupportedProtocol,
    WriteError,
)

MAX_ERROR_BODY = 8192  # bytes of an error status's body read for its message
MAX_MESSAGE = 200
# Retry-After beyond a day is not a plan; the runner caps its wait lower still
MAX_RETRY_AFTER_S = 86400.0


class StreamError(Exception):
    """A classified failure of one measured request: `kind` is one of ERROR_KINDS.

    Raised by the measured stream and by a stream's sink (an error event, a malformed chunk); the
    measured stream turns it into the request's outcome, so it never leaves `measured_stream`.
    """

    def __init__(self, kind: str, message: str, status: int | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.retry_after = retry_after


def short(text: str) -> str:
    """Text on one line, at most MAX_MESSAGE characters."""
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def error_text(err: object) -> str:
    """The message of an error object a server sent (`{"message": ...}`, a string, or anything)."""
    if isinstance(err, dict):
        err = err.get("message") or err.get("detail") or err
    return short(str(err))


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


async def raise_http_error(response: Response, budget_s: float) -> None:
    """Raise the StreamError of a final status other than 200, with the message its body gives."""
    body = await _read_error_body(response, budget_s)
    message = error_message(body) or response.reason_phrase or "error"
    raise StreamError(
        http_error_kind(response.status_code),
        f"HTTP {response.status_code}: {message}",
        response.status_code,
        retry_after(response.headers.get("retry-after")),
    )


async def _read_error_body(response: Response, budget_s: float) -> bytes:
    """Up to MAX_ERROR_BODY bytes of an error's body, for at most `budget_s` in all: what came by then."""
    deadline = time.monotonic() + budget_s
    parts: list[bytes] = []
    size = 0
    try:
        while size < MAX_ERROR_BODY:
            data = await response.receive(max(0.0, deadline - time.monotonic()))
            if not data:
                break
            parts.append(data)
            size += len(data)
    except (HttpError, OSError):
        pass  # a timeout, or the server hung up: the status and what came are enough
    return b"".join(parts)[:MAX_ERROR_BODY]


def error_message(body: bytes) -> str:
    """The message an error body carries: its JSON `error.message` / `detail` (Coze's `code` and `msg`), or its
    text."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return short(text)
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            if err is obj and isinstance(obj.get("msg"), str) and obj["msg"]:  # Coze: {"code", "msg", "detail"}
                return short(f"{obj.get('code')}: {obj['msg']}" if obj.get("code") is not None else obj["msg"])
            return short(str(err.get("message") or err.get("detail") or err))
        if isinstance(err, str):
            return short(err)
        if "detail" in obj:
            return short(str(obj["detail"]))
    return short(text)


def retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (seconds or an HTTP date), within [0, a day]; None if unreadable."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError, AttributeError):
            return None
    if not math.isfinite(seconds):
        return None
    return min(max(0.0, seconds), MAX_RETRY_AFTER_S)


def _fd_limit_message(exc: BaseException) -> str:
    """lpxtop itself ran out of file descriptors (EMFILE/ENFILE): its own limit, never the server's answer."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        limit = f" (this process may open {soft}: raise it with `ulimit -n`)" if soft != resource.RLIM_INFINITY else ""
    except (ImportError, OSError, ValueError):
        limit = ""
    return f"lpxtop ran out of file descriptors{limit}, not the server: {getattr(exc, 'strerror', None) or exc}"
