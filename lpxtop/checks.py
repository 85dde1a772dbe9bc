"""`ConfigError`, the one error of a usage or configuration mistake, and the value checks that config.py and
each feature's settings module share (config.py imports those modules to check their tables, so what they
share lives here, below all of them)."""

from __future__ import annotations

from urllib.parse import urlsplit


class ConfigError(Exception):
    """A usage or configuration mistake; the message says where and what to do. Exit status 2."""


def check_http_url(text: str, what: str) -> str:
    """An absolute http(s) URL with a host (a metrics URL), stripped; ConfigError otherwise."""
    url = text.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{what} {text!r} must be an http:// or https:// URL with a host")
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError:
        raise ConfigError(f"{what} {text!r}: the port is not a number between 0 and 65535") from None
    return url
