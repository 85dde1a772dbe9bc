"""The exceptions of lpxtop's HTTP client (`lpxtop.http` exports every one).

In a module of their own so that the client's helpers (content decoding, proxies, redirects) raise the
same classes without importing the client. Errors caused by the network are raised `from` the OSError
or ssl error underneath, so `lpxtop.engine.probe.errors` finds refused/dns/tls in the exception chain.
"""

from __future__ import annotations


class HttpError(Exception):
    """Base of every error this client raises."""


class HttpTimeout(HttpError):
    """A connect, pool, read or write timeout, or the request's total limit (the phase it ran out in)."""


class ConnectTimeout(HttpTimeout):
    """No connection (TCP and TLS, and a proxy's tunnel) within the connect timeout."""


class PoolTimeout(HttpTimeout):
    """Every connection of the pool stayed busy for the pool timeout."""


class ReadTimeout(HttpTimeout):
    """No bytes of the response within the read timeout, or not all of them within the total limit."""


class WriteTimeout(HttpTimeout):
    """The request could not be sent within the write timeout."""


class NetworkError(HttpError):
    """The socket failed (the OSError is the `__cause__`)."""


class ConnectError(NetworkError):
    """Connecting failed: refused, name lookup, TLS handshake..."""


class ProxyError(ConnectError):
    """The proxy could not be reached, or refused to open a tunnel (`status_code` is its answer, if any).

    `proxy` names the proxy as `host:port`, never with its credentials.
    """

    def __init__(self, message: str, *, proxy: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.proxy = proxy
        self.status_code = status_code


class ReadError(NetworkError):
    """Reading failed (reset by the peer...)."""


class WriteError(NetworkError):
    """Sending failed (the connection is closed...)."""


class RemoteProtocolError(HttpError):
    """The server broke HTTP/1.1: a garbage status line, a body cut short, an oversized head..."""


class DecodingError(RemoteProtocolError):
    """A body whose Content-Encoding cannot be undone: unknown, corrupt, or decoding past the size limit."""


class InvalidURL(HttpError):
    """A URL without a host, with a bad port, or a header that would break the request."""


class UnsupportedProtocol(HttpError):
    """A URL whose scheme is not http or https (or a proxy URL whose scheme is not http)."""


class BodyTooLarge(HttpError):
    """A body longer than the caller's limit (the connection is closed)."""


class RedirectError(HttpError):
    """A redirect that is not followed: a POST sent to another URL by 301/302/303, a loop, too many hops,
    or a Location that is not an http(s) URL. `status_code` is the redirect's status, `location` where it
    pointed (resolved against `url`, the URL that answered with it)."""

    def __init__(self, message: str, *, status_code: int, url: str, location: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.url = url
        self.location = location
