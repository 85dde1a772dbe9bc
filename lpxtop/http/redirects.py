"""Which redirects lpxtop's HTTP client follows, where to, and with which headers.

A gateway in front of a server may answer 307/308 to send a request to https or to its canonical URL,
and a GET to a moved page gets 301/302/303. The rules (curl's and requests', narrowed to a monitor):

- 307 and 308 keep the method and the body: the POST of a probe is sent again to the new URL;
- 301, 302 and 303 are followed for GET and HEAD only. Browsers turn a redirected POST into a GET,
  which for a probe would be a request for a page instead of a completion: that is an error
  (`RedirectError`) that names where the server pointed;
- at most `MAX_REDIRECTS` hops, and a URL visited twice with the same method is a loop (an error
  at once rather than after the hop limit);
- credentials are dropped when the target's origin changes (another host, port or scheme), except
  an upgrade from http to https on the same host with the default ports (requests' rule):
  `Authorization`, `Proxy-Authorization`, `Cookie`, and every header whose value carries a secret
  registered with `lpxtop.textsafe` (the config's headers are, e.g. an `api-key`);
- only http and https URLs are followed; the fragment of a Location is dropped.

The client applies them inside the request's total deadline: a redirect never extends it.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urljoin, urlsplit, urlunsplit

from lpxtop import textsafe
from lpxtop.http.errors import RedirectError

MAX_REDIRECTS = 5
REDIRECT_STATUSES = frozenset((301, 302, 303, 307, 308))
_CREDENTIAL_HEADERS = frozenset(("authorization", "proxy-authorization", "cookie"))
_DEFAULT_PORTS = {"http": 80, "https": 443}


def shown_url(url: str, limit: int = 200) -> str:
    """`url` without user:password and without its query (which may hold a key), cut to `limit` characters."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return url[:limit]
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port is not None else host
    query = "…" if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))[:limit]


def next_url(method: str, url: str, status: int, location: str, visited: set[tuple[str, str]], hops: int,
             max_redirects: int = MAX_REDIRECTS) -> str:
    """The absolute URL to follow a `status` redirect to `location` from `url`; RedirectError when the rules
    above say it is not followed. `visited` holds the (method, URL) pairs sent so far (this one included),
    `hops` the redirects followed so far."""
    target = urljoin(url, location.strip())
    target = target.split("#", 1)[0]
    where = f"HTTP {status} from {shown_url(url)} to {shown_url(target)}"
    try:
        scheme = urlsplit(target).scheme.lower()
    except ValueError:
        scheme = ""
    if scheme not in ("http", "https"):
        raise RedirectError(f"{where}: not an http(s) URL, not followed", status_code=status, url=url,
                            location=target)
    if status in (301, 302, 303) and method not in ("GET", "HEAD"):
        raise RedirectError(
            f"{where}: a {method} is not sent again after a {status} (only 307 and 308 keep the method); "
            "point lpxtop at the new URL",
            status_code=status, url=url, location=target,
        )
    if hops >= max_redirects:
        raise RedirectError(f"{where}: more than {max_redirects} redirects", status_code=status, url=url,
                            location=target)
    if (method, target) in visited:
        raise RedirectError(f"{where}: a redirect loop (that URL was already asked)", status_code=status,
                            url=url, location=target)
    return target


def strips_credentials(old_url: str, new_url: str) -> bool:
    """True when following from `old_url` to `new_url` leaves the origin the credentials were meant for."""
    old, new = urlsplit(old_url), urlsplit(new_url)
    if old.hostname != new.hostname:
        return True
    old_port = old.port or _DEFAULT_PORTS.get(old.scheme)
    new_port = new.port or _DEFAULT_PORTS.get(new.scheme)
    if old.scheme == "http" and old_port == 80 and new.scheme == "https" and new_port == 443:
        return False  # the usual upgrade to https on the same host
    return old.scheme != new.scheme or old_port != new_port


def without_credentials(headers: Mapping[str, str] | None) -> dict[str, str]:
    """`headers` less the ones that carry credentials (see the module's docstring)."""
    kept: dict[str, str] = {}
    for name, value in (headers or {}).items():
        if name.lower() in _CREDENTIAL_HEADERS or textsafe.redact(value) != value:
            continue
        kept[name] = value
    return kept
