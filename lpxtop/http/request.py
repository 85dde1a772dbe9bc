"""What the client sends: the URL taken apart, and the request head.

A request's target, `Host` header and pool key come from its URL (`split_url`: http and https only,
no line breaks or spaces that would break the head); through an http proxy the target is the URL in
absolute form (`absolute_target`). The head (`request_head`) holds the caller's headers over the
client's defaults (`Accept-Encoding: identity`: lpxtop asks for the bytes as the server made them);
framing, connection handling and the proxy's credentials are the client's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from lpxtop.http.errors import InvalidURL, UnsupportedProtocol

_DEFAULT_HEADERS = (("Accept", "*/*"), ("Accept-Encoding", "identity"), ("User-Agent", "lpxtop"))


def check_head_text(text: str) -> str:
    """`text` (a URL, a header name or value) for the request head; InvalidURL if a line break or NUL
    in it would end the line early."""
    if "\r" in text or "\n" in text or "\0" in text:
        raise InvalidURL("a header name or value with a line break")
    return text


def request_head(
    method: str, target: str, host: str, headers: Mapping[str, str] | None, content: bytes | None, is_json: bool,
    proxy_authorization: str | None = None,
) -> bytes:
    """The request line and headers, ending with the blank line (the body, if any, follows)."""
    merged = {name.lower(): (name, value) for name, value in _DEFAULT_HEADERS}
    if is_json:
        merged["content-type"] = ("Content-Type", "application/json")
    if headers:
        for name, value in headers.items():
            merged[name.lower()] = (check_head_text(name), check_head_text(value))
    for name in ("host", "content-length", "transfer-encoding", "connection", "proxy-authorization"):
        merged.pop(name, None)  # framing, connection handling and the proxy are this client's
    if proxy_authorization is not None:
        merged["proxy-authorization"] = ("Proxy-Authorization", proxy_authorization)
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines.extend(f"{name}: {value}" for name, value in merged.values())
    if content is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(content or b'')}")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1", errors="strict")


def absolute_target(url: str) -> str:
    """`url` as a request target for a proxy: without user:password and fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    shown = f"[{host}]" if ":" in host else host
    netloc = shown if parts.port is None else f"{shown}:{parts.port}"
    target = f"{parts.scheme.lower()}://{netloc}{parts.path or '/'}"
    return f"{target}?{parts.query}" if parts.query else target


def split_url(url: str) -> tuple[str, str, int, str, str]:
    """(scheme, host, port, request target, Host header) of an absolute http(s) URL."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidURL(f"invalid URL {url[:80]!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise UnsupportedProtocol(f"unsupported URL scheme {scheme or '(none)'!r} in {url[:80]!r}")
    host = parts.hostname
    if not host:
        raise InvalidURL(f"no host in URL {url[:80]!r}")
    check_head_text(url)
    if " " in url:
        raise InvalidURL(f"a space in URL {url[:80]!r}")
    default = 443 if scheme == "https" else 80
    if port is None:
        port = default
    shown = f"[{host}]" if ":" in host else host
    host_header = shown if port == default else f"{shown}:{port}"
    target = parts.path or "/"
    if parts.query:
        target = f"{target}?{parts.query}"
    return scheme, host, port, target, host_header
