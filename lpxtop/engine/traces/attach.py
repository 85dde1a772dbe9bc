"""`--traces-listen` / `--traces-forward` for every command that measures (the dashboard, once, record,
exporter, load), and the ChainFeed started and stopped beside an engine. The commands call these; nothing
here imports opentelemetry-proto (the receiver's process does, once started).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from lpxtop.checks import ConfigError
from lpxtop.engine.traces.settings import add_traces_arguments, join_wait_s, receiver_settings

MISSING = "receiving server spans (--traces-listen) needs the opentelemetry-proto package: {hint}"


def add_traces_flags(parser: argparse.ArgumentParser) -> None:
    """The receiver's flags, in the parser's OpenTelemetry group (lpxtop/cli/otlp.py) when it has one."""
    group = next((g for g in getattr(parser, "_action_groups", ())  # argparse keeps its groups there
                  if (g.title or "").startswith("OpenTelemetry")), None)
    if group is None:
        group = parser.add_argument_group("server spans in (also [traces] in the config file; docs/traces.md)")
    add_traces_arguments(group)  # type: ignore[arg-type]


def start_traces(engine: Any, args: argparse.Namespace, table: Mapping[str, Any] | None = None, *,
                 endpoints: Iterable[Any] = (), wait: bool = True, **feed_kw: Any) -> Any | None:
    """The ChainFeed attached to `engine` (before it starts) with its receiver started, or None when no
    `--traces-listen` (or `[traces] listen`) says to receive. ConfigError (exit 2) for a bad address or
    URL, or without opentelemetry-proto. `wait=False` starts the receiver in the background (the
    dashboard: its first frame does not wait for a process to spawn). `feed_kw` go to ChainFeed."""
    settings = receiver_settings(table, listen=getattr(args, "traces_listen", None),
                                 forward=getattr(args, "traces_forward", None))
    if settings is None:
        return None
    if importlib.util.find_spec("opentelemetry") is None or importlib.util.find_spec("opentelemetry.proto") is None:
        from lpxtop.engine.traces.otlp import INSTALL_HINT

        raise ConfigError(MISSING.format(hint=INSTALL_HINT))
    from lpxtop.engine.traces.feed import ChainFeed

    feed = ChainFeed(settings, wait_s=join_wait_s(table), **feed_kw)
    feed.attach(engine, endpoints)
    feed.start(wait=wait)
    return feed


def stop_traces(feed: Any | None, *, prog: str = "lpxtop", quiet: bool = False) -> None:
    """Stop the receiver and say on stderr how many requests joined."""
    if feed is None:
        return
    feed.stop()
    if not quiet:
        print(f"{prog}: {feed.summary()}", file=sys.stderr)


def finish_once(feed: Any | None, snapshot: Any, seconds: float) -> Any:
    """`once` after its probes: wait (at most `seconds`, what --deadline leaves) for their spans, give up on
    the rest (reason "deadline"), and return the snapshot with each endpoint's final chain."""
    if feed is None:
        return snapshot
    feed.wait_for_spans(seconds)
    feed.join.give_up_pending("deadline")
    return feed.decorate(snapshot)
