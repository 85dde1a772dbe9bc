"""lpxtop's own HTTP/1.1 client on asyncio (moved here from lpxtop/engine; split in the next step)."""

from __future__ import annotations

from lpxtop.http.client import HttpClient, Response, Timeout
from lpxtop.http.errors import (
    BodyTooLarge,
    ConnectError,
    ConnectTimeout,
    DecodingError,
    HttpError,
    HttpTimeout,
    InvalidURL,
    NetworkError,
    PoolTimeout,
    ProxyError,
    ReadError,
    ReadTimeout,
    RedirectError,
    RemoteProtocolError,
    UnsupportedProtocol,
    WriteError,
    WriteTimeout,
)
from lpxtop.http.proxies import is_loopback
from lpxtop.http.redirects import shown_url
from lpxtop.http.sse import BOM, SseEvent, SseParser

__all__ = [
    "BOM",
    "BodyTooLarge",
    "ConnectError",
    "ConnectTimeout",
    "DecodingError",
    "HttpClient",
    "HttpError",
    "HttpTimeout",
    "InvalidURL",
    "NetworkError",
    "PoolTimeout",
    "ProxyError",
    "ReadError",
    "ReadTimeout",
    "RedirectError",
    "RemoteProtocolError",
    "Response",
    "SseEvent",
    "SseParser",
    "Timeout",
    "UnsupportedProtocol",
    "WriteError",
    "WriteTimeout",
    "is_loopback",
    "shown_url",
]
