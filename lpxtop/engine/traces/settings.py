"""Whether and where to receive spans, from the command line and the config file's `[traces]` table.

    [traces]
    listen = "127.0.0.1:4318"                       # HOST:PORT, :PORT (all interfaces) or PORT (loopback)
    forward = "http://127.0.0.1:14318/v1/traces"    # the user's own collector: every body passed on
    spans_per_s = 5000                              # spans read for the join per second (more: refused)
    max_body_bytes = 4194304                        # per body, before and after gzip
    wait = 30                                       # seconds a request waits for its span

`--traces-listen HOST:PORT` and `--traces-forward URL` override the file. No `listen` anywhere: no
receiver (the chain is `null` in JSON).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from typing import Any

from lpxtop.checks import ConfigError, check_http_url
from lpxtop.durations import DurationError, parse_duration
from lpxtop.engine.traces.limits import DEFAULT_WAIT_S, MAX_BODY_BYTES, SPANS_PER_S, ReceiverSettings

TRACES_KEYS = ("listen", "forward", "spans_per_s", "max_body_bytes", "wait")
MAX_SPANS_PER_S = 1_000_000.0
MAX_BODY_LIMIT = 64 * 1024 * 1024  # the OTLP specification recommends 20 MiB as a receiver's default limit
MAX_WAIT_S = 600.0


def add_traces_arguments(parser: argparse.ArgumentParser) -> None:
    """--traces-listen and --traces-forward, for every command that probes (dashboard, once, record, ...)."""
    parser.add_argument(
        "--traces-listen", metavar="ADDR", default=None,
        help="receive the server's spans here, e.g. 127.0.0.1:4318",
    )  # fmt: skip
    parser.add_argument(
        "--traces-forward", metavar="URL", default=None,
        help="forward every span received to this OTLP/HTTP URL",
    )  # fmt: skip


def check_traces_table(table: Mapping[str, Any]) -> str | None:
    """The first problem with a `[traces]` table, as "key 'x': why", or None (config.py adds file:line)."""
    for key, value in table.items():
        if key not in TRACES_KEYS:
            return f"unknown key {key!r} (known keys: {', '.join(TRACES_KEYS)})"
        try:
            _value(key, value)
        except ConfigError as exc:
            return f"key {key!r}: {exc}"
    return None


def receiver_settings(table: Mapping[str, Any] | None = None, *, listen: str | None = None,
                      forward: str | None = None) -> ReceiverSettings | None:
    """The receiver's settings from the file's table with the flags over it; None when nothing says listen.

    Raises ConfigError with what to do (a forward without a listen address, a bad address or URL)."""
    table = dict(table or {})
    if listen is not None:
        table["listen"] = listen
    if forward is not None:
        table["forward"] = forward
    values = {key: _value(key, value) for key, value in table.items()}
    if "listen" not in values:
        if "forward" in values:
            raise ConfigError("--traces-forward passes on the spans lpxtop receives: give --traces-listen too")
        return None
    host, port = values.pop("listen")
    return ReceiverSettings(
        host=host, port=port, forward_url=values.get("forward"),
        spans_per_s=values.get("spans_per_s", SPANS_PER_S),
        max_body_bytes=values.get("max_body_bytes", MAX_BODY_BYTES),
    )


def join_wait_s(table: Mapping[str, Any] | None) -> float:
    """How long a request waits for its span: the table's `wait`, or the join's default."""
    if table and "wait" in table:
        return _value("wait", table["wait"])
    return DEFAULT_WAIT_S


def _value(key: str, value: Any) -> Any:
    if key == "listen":
        if not isinstance(value, str):
            raise ConfigError("must be a string such as \"127.0.0.1:4318\"")
        from lpxtop.export.settings import parse_listen  # the exporter's: one HOST:PORT rule for lpxtop

        return parse_listen(value)
    if key == "forward":
        if not isinstance(value, str):
            raise ConfigError("must be an http:// URL such as \"http://127.0.0.1:14318/v1/traces\"")
        return check_http_url(value, "the forward URL")
    if key == "spans_per_s":
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                or not 1 <= value <= MAX_SPANS_PER_S:
            raise ConfigError(f"must be a number of spans a second between 1 and {MAX_SPANS_PER_S:g}")
        return float(value)
    if key == "max_body_bytes":
        if isinstance(value, bool) or not isinstance(value, int) or not 1024 <= value <= MAX_BODY_LIMIT:
            raise ConfigError(f"must be a whole number of bytes between 1024 and {MAX_BODY_LIMIT}")
        return value
    if key == "wait":
        try:
            return parse_duration(value, low=0.1, high=MAX_WAIT_S)  # type: ignore[arg-type]
        except DurationError as exc:
            raise ConfigError(str(exc)) from None
    raise ConfigError(f"unknown key {key!r}")
