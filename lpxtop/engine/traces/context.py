"""Reading a W3C `traceparent` header, and whether an endpoint's clock is this host's.

lpxtop writes `traceparent` on every request it sends (lpxtop/engine/probe/tracecontext.py); the
simulator reads it back here to put its span in the request's trace, as vLLM does.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

# version 00: 2 hex version, 32 hex trace id, 16 hex parent id, 2 hex flags (W3C Trace Context, level 1)
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:-.*)?$")


@dataclass(frozen=True)
class ParentContext:
    """The remote parent a `traceparent` names: its trace id, its span id (lowercase hex) and flags."""

    trace_id: str
    span_id: str
    flags: int

    @property
    def sampled(self) -> bool:
        return bool(self.flags & 1)


def parse_traceparent(header: str | None) -> ParentContext | None:
    """The context in a `traceparent` header, or None when it is absent or invalid (as the W3C
    specification says: version ff, all-zero ids, a wrong length or upper-case hex are invalid; a
    version above 00 may carry more fields after the four)."""
    if not header or len(header) > 512:
        return None
    match = _TRACEPARENT.match(header.strip())
    if match is None:
        return None
    version, trace_id, span_id, flags = match.groups()
    if version == "ff" or (version == "00" and len(header.strip()) != 55):
        return None
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return ParentContext(trace_id, span_id, int(flags, 16))


def perf_to_wall_offset_ns(tries: int = 5) -> int:
    """time.time_ns() − time.perf_counter_ns(), read between two perf_counter readings (the closest of
    `tries`): a wall time for a perf_counter stamp is `stamp + offset`. Reading the two clocks one after
    the other instead puts a thread switch's milliseconds between them when other threads are busy
    (seen here: 4-9 ms with the simulator, a receiver and a client in one process on 2 cores)."""
    best: tuple[int, int] | None = None  # (bracket width, offset)
    for _ in range(max(1, tries)):
        before = time.perf_counter_ns()
        wall = time.time_ns()
        after = time.perf_counter_ns()
        if best is None or after - before < best[0]:
            best = (after - before, wall - (before + after) // 2)
    assert best is not None
    return best[1]


def same_host(url: str) -> bool:
    """Whether `url`'s host is this machine (loopback, one of its own addresses or its own name), so a
    span's start time and lpxtop's send time come from one clock. Names are not looked up (no DNS on
    the probe's path): any other name counts as another host."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return False
    if not host:
        return False
    host = host.lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host in _own_names()
    if address.is_loopback or address.is_unspecified:
        return True
    return str(address) in _own_addresses()


@functools.lru_cache(maxsize=1)
def _own_names() -> frozenset[str]:
    return frozenset({socket.gethostname().lower()})  # not getfqdn(): that may ask DNS


@functools.lru_cache(maxsize=1)
def _own_addresses() -> frozenset[str]:
    try:
        import psutil

        return frozenset(a.address.split("%", 1)[0] for addrs in psutil.net_if_addrs().values() for a in addrs
                         if a.family in (socket.AF_INET, socket.AF_INET6))
    except (OSError, ImportError, AttributeError):
        return frozenset()
