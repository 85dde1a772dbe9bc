"""Which proxy a request goes through: HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and NO_PROXY (any case).

People probing hosted APIs from a corporate network can only reach them through a proxy. The syntax
is the standard library's (`urllib.request.getproxies_environment` and
`proxy_bypass_environment` read the variables here, so lpxtop agrees with urllib, pip and requests):
lower-case names win over upper-case ones, `HTTP_PROXY` is ignored when `REQUEST_METHOD` is set (CGI,
CVE-2016-1000110), `ALL_PROXY` serves a scheme that has no variable of its own, and `NO_PROXY` is a
comma-separated list of host names and domain suffixes (`.example.com` and `example.com` both match
`api.example.com`; `host:port` matches that port only) or `*` for every host.

lpxtop's own rule on top: **loopback targets never go through a proxy** (127.0.0.0/8, ::1, `localhost`
and `*.localhost`). lpxtop watches servers on its own machine, and a corporate proxy would not reach
them (or would reach its own loopback).

Only `http://` proxies are understood (plain HTTP to the proxy): an http target is sent to the proxy
as an absolute-form request, an https target through a `CONNECT` tunnel with TLS to the target inside
it. Credentials in the proxy URL (`http://user:password@proxy:3128`) are sent as
`Proxy-Authorization: Basic …` and registered with `lpxtop.textsafe.register_secret`; messages name a
proxy by `host:port` only.
"""

from __future__ import annotations

import base64
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from lpxtop import textsafe


@dataclass(frozen=True)
class Proxy:
    """A proxy to send requests through. `error` is set (and used for nothing else) when the variable
    named a proxy lpxtop cannot use: requests that would go through it fail with that message."""

    host: str
    port: int
    authorization: str | None  # the Proxy-Authorization header's value
    variable: str  # where it came from, e.g. "HTTPS_PROXY", for messages
    error: str | None = None

    @property
    def shown(self) -> str:
        """`host:port`, without credentials: what messages say."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 (also IPv4-mapped), `localhost` and names under `.localhost`."""
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def parse_proxy_url(url: str, variable: str) -> Proxy:
    """A Proxy from a proxy URL as the environment gives it (`proxy:3128` means `http://proxy:3128`)."""
    text = url.strip()
    if "://" not in text:
        text = f"http://{text}"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        return Proxy("", 0, None, variable, f"{variable} is not a valid proxy URL: {exc}")
    host = parts.hostname or ""
    scheme = parts.scheme.lower()
    if scheme != "http":
        return Proxy(host, port or 0, None, variable,
                     f"{variable} names a {scheme}:// proxy; lpxtop can use http:// proxies only")
    if not host:
        return Proxy("", 0, None, variable, f"{variable} names no proxy host")
    authorization = None
    if parts.username is not None:
        user, password = unquote(parts.username), unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        textsafe.register_secret(password)
        textsafe.register_secret(token)
        authorization = f"Basic {token}"
    return Proxy(host, port or 80, authorization, variable)


class ProxySettings:
    """The proxies of one client, decided once per (scheme, host, port).

    `proxies` maps a scheme (`http`, `https`, `all`) to a proxy URL and `no` to the NO_PROXY list, as
    `urllib.request.getproxies_environment()` returns them.
    """

    def __init__(self, proxies: Mapping[str, str]) -> None:
        self._proxies = {k.lower(): v for k, v in proxies.items() if v}
        self._parsed: dict[str, Proxy] = {}
        self._decided: dict[tuple[str, str, int], Proxy | None] = {}

    @classmethod
    def from_environment(cls) -> ProxySettings | None:
        """The settings from the environment; None when no proxy variable is set (the usual case)."""
        if not any(name[-6:].lower() == "_proxy" for name in os.environ):
            return None
        import urllib.request  # already loaded by the engine's other imports; only needed here

        proxies = urllib.request.getproxies_environment()
        if not any(k in proxies for k in ("http", "https", "all")):
            return None
        return cls(proxies)

    def __bool__(self) -> bool:
        return any(k in self._proxies for k in ("http", "https", "all"))

    def for_target(self, scheme: str, host: str, port: int) -> Proxy | None:
        """The proxy for a request to scheme://host:port, or None to connect directly."""
        key = (scheme, host, port)
        try:
            return self._decided[key]
        except KeyError:
            pass
        proxy = self._decide(scheme, host, port)
        if len(self._decided) < 1024:  # bounded, whatever URLs redirects bring
            self._decided[key] = proxy
        return proxy

    def _decide(self, scheme: str, host: str, port: int) -> Proxy | None:
        if is_loopback(host):
            return None
        name = scheme if scheme in self._proxies else "all"
        url = self._proxies.get(name)
        if url is None:
            return None
        import urllib.request

        shown = f"[{host}]" if ":" in host else host
        if urllib.request.proxy_bypass_environment(f"{shown}:{port}", self._proxies):
            return None
        if url not in self._parsed:
            self._parsed[url] = parse_proxy_url(url, f"{name.upper()}_PROXY")
        return self._parsed[url]
