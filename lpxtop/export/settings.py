"""What the exporter is told: the listen address, the `host` label, bucket edges, the `/probe` limits.

They come from `lpxtop exporter` flags and from the config file's `[exporter]` table:

```toml
[exporter]
listen = "127.0.0.1:9464"
host = "gpu-node-3"                 # the `host` label (default: this machine's host name)
ttft_buckets = [0.1, 0.2, 0.3, 0.5, 1, 2]   # seconds; also itl_buckets, tpot_buckets, e2e_buckets,
                                            # agent_step_buckets, agent_tool_call_buckets, chain_buckets
probe = true                        # serve /probe?target= (false: 404)
probe_timeout = 10                  # seconds, when Prometheus sends no scrape timeout header
```
"""

from __future__ import annotations

import math
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lpxtop.checks import ConfigError
from lpxtop.durations import DurationError, format_duration, parse_duration

DEFAULT_LISTEN = "127.0.0.1:9464"
# OpenTelemetry's Prometheus exporter uses 9464 too: on a host that runs one, pass --listen with another port.
DEFAULT_PORT = 9464

# Edges in seconds, dense where service-level objectives sit (TTFT 100 ms – 2 s, a token gap 10–100 ms),
# so `histogram_quantile` and "share within the SLO" (`le="0.5"`) are precise there across a fleet.
DEFAULT_BUCKETS: Mapping[str, tuple[float, ...]] = {
    "ttft": (0.01, 0.025, 0.05, 0.075, 0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0,
             1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0),
    "itl": (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06,
            0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5),
    "tpot": (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06,
             0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5),
    "e2e": (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0,
            45.0, 60.0, 120.0),
    # the agent-step probe: a whole step (two calls and the tool), and call 1's time to a complete tool call
    "agent_step": (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0,
                   45.0, 60.0, 120.0),
    "agent_tool_call": (0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0,
                        30.0, 60.0),
    # a probe's segments from its own server span (--traces-listen): queue, prefill and outside share these;
    # fine at the bottom, where the time outside the engine (a few ms) and an idle queue (~0) sit
    "chain": (0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5,
              0.75, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
}
MAX_BUCKETS = 64  # per histogram: each edge is a series per endpoint

DEFAULT_PROBE_TIMEOUT_S = 10.0
MAX_PROBE_TIMEOUT_S = 120.0
PROBE_TIMEOUT_MARGIN_S = 0.5  # as blackbox_exporter's --timeout-offset: the answer must be back in time
MAX_CONCURRENT_PROBES = 8

EXPORTER_KEYS = ("listen", "host", "ttft_buckets", "itl_buckets", "tpot_buckets", "e2e_buckets",
                 "agent_step_buckets", "agent_tool_call_buckets", "chain_buckets", "probe", "probe_timeout")


@dataclass(frozen=True)
class ExporterSettings:
    """Everything the exporter needs besides the engine."""

    listen_host: str = "127.0.0.1"
    listen_port: int = DEFAULT_PORT
    host_label: str = field(default_factory=socket.gethostname)
    buckets: Mapping[str, tuple[float, ...]] = field(default_factory=lambda: dict(DEFAULT_BUCKETS))
    probe_enabled: bool = True
    probe_timeout_s: float = DEFAULT_PROBE_TIMEOUT_S
    max_concurrent_probes: int = MAX_CONCURRENT_PROBES

    @property
    def listen(self) -> str:
        host = f"[{self.listen_host}]" if ":" in self.listen_host else self.listen_host
        return f"{host}:{self.listen_port}"


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` (all interfaces), ``[::1]:PORT`` or ``PORT`` (loopback) → (host, port)."""
    raw = text.strip()
    if not raw:
        raise ConfigError("an empty listen address (try 127.0.0.1:9464)")
    if raw.isdigit():
        host, port_text = "127.0.0.1", raw
    elif raw.startswith("["):
        end = raw.find("]")
        if end < 0 or raw[end + 1:end + 2] != ":":
            raise ConfigError(f"{text!r}: write an IPv6 listen address as [::1]:9464")
        host, port_text = raw[1:end], raw[end + 2:]
    else:
        host, sep, port_text = raw.rpartition(":")
        if not sep:
            raise ConfigError(f"{text!r}: a listen address is HOST:PORT (for example 127.0.0.1:9464)")
        host = host or "0.0.0.0"
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(f"{text!r}: the port is not a number between 0 and 65535")
    return host, int(port_text)


def check_buckets(values: object, what: str) -> tuple[float, ...]:
    """Bucket edges in seconds: a non-empty list of increasing, positive, finite numbers (+Inf is implied)."""
    if not isinstance(values, list | tuple) or not values:
        raise ConfigError(f"{what} must be a non-empty list of seconds, e.g. [0.1, 0.25, 0.5, 1]")
    edges: list[float] = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{what}: {value!r} is not a positive number of seconds (+Inf is always added)")
        if edges and value <= edges[-1]:
            raise ConfigError(f"{what}: the edges must increase ({edges[-1]:g} then {value:g})")
        edges.append(float(value))
    if len(edges) > MAX_BUCKETS:
        raise ConfigError(f"{what}: {len(edges)} edges; at most {MAX_BUCKETS} (each is a series per endpoint)")
    return tuple(edges)


def settings_from_table(table: Mapping[str, object], path: str | Path | None = None,
                        **overrides: object) -> ExporterSettings:
    """ExporterSettings from a config file's `[exporter]` table, then the flags in `overrides` (None = unset)."""
    where = _KeyLines(path)
    values: dict[str, object] = {}
    for key, value in table.items():
        if key not in EXPORTER_KEYS:
            raise ConfigError(f"{where(key)}: [exporter]: unknown key {key!r} (known keys: {', '.join(EXPORTER_KEYS)})")
        if key == "listen":
            if not isinstance(value, str):
                raise ConfigError(f"{where(key)}: [exporter]: key 'listen' must be a string like \"127.0.0.1:9464\"")
            try:
                values["listen_host"], values["listen_port"] = parse_listen(value)
            except ConfigError as exc:
                raise ConfigError(f"{where(key)}: [exporter]: key 'listen': {exc}") from None
        elif key == "host":
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"{where(key)}: [exporter]: key 'host' must be a non-empty string")
            values["host_label"] = value.strip()
        elif key.endswith("_buckets"):
            try:
                edges = check_buckets(value, f"key {key!r}")
            except ConfigError as exc:
                raise ConfigError(f"{where(key)}: [exporter]: {exc}") from None
            values.setdefault("buckets", dict(DEFAULT_BUCKETS))[key[: -len("_buckets")]] = edges  # type: ignore[index]
        elif key == "probe":
            if not isinstance(value, bool):
                raise ConfigError(f"{where(key)}: [exporter]: key 'probe' must be true or false")
            values["probe_enabled"] = value
        elif key == "probe_timeout":
            try:
                seconds = parse_duration(value, low=0.0, high=MAX_PROBE_TIMEOUT_S)  # type: ignore[arg-type]
                if seconds <= 0:
                    raise DurationError(f"{value!r} is not a positive duration")
            except DurationError as exc:
                raise ConfigError(f"{where(key)}: [exporter]: key 'probe_timeout' must be a duration in (0s, "
                                  f"{format_duration(MAX_PROBE_TIMEOUT_S)}] (10s, 500ms, or seconds): {exc}") from None
            values["probe_timeout_s"] = seconds
    for key, value in overrides.items():
        if value is not None:
            values[key] = value
    return ExporterSettings(**values)  # type: ignore[arg-type]


class _KeyLines:
    """`FILE:LINE` of a key inside the file's [exporter] table (the file name alone when not found)."""

    _header = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.\"-]+)\s*\]\]?")

    def __init__(self, path: str | Path | None) -> None:
        self.path = path
        self.lines: list[str] = []
        if path is not None:
            try:
                self.lines = Path(path).read_text(encoding="utf-8").splitlines()
            except OSError:
                pass

    def __call__(self, key: str) -> str:
        if self.path is None:
            return "[exporter]"
        table = None
        for number, line in enumerate(self.lines, start=1):
            header = self._header.match(line)
            if header:
                table = header.group(1).strip('"')
                continue
            if table == "exporter" and re.match(rf"^\s*\"?{re.escape(key)}\"?\s*=", line):
                return f"{self.path}:{number}"
        return str(self.path)
