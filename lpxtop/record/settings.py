"""Whether and where to record, from the command line and the config file's `record` setting.

    record = true                # at the top of the file, or:
    [record]
    enabled = true
    dir = "~/lpxtop-recordings"  # default: $XDG_STATE_HOME/lpxtop (~/.local/state/lpxtop)
    retain = "48h"               # delete data older than this ("forever": never)
    max_size = "1GB"             # at most this much in that directory ("none": no limit)
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lpxtop.record.retention import (
    DEFAULT_MAX_BYTES,
    DEFAULT_RETAIN_S,
    Retention,
    default_directory,
    new_recording_path,
    parse_duration,
    parse_size,
)

RECORD_KEYS = ("enabled", "dir", "retain", "max_size")
NO_LIMIT = ("none", "forever", "never", "0", "off", "unlimited")


def retain_value(value: object) -> float | None:
    """Seconds from a config or flag value ("48h", 3600, "forever" → None)."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as \"48h\", not true/false")
    if isinstance(value, (int, float)):
        if value <= 0:
            return None
        return float(value)
    text = str(value).strip().lower()
    return None if text in NO_LIMIT else parse_duration(text)


def size_value(value: object) -> int | None:
    """Bytes from a config or flag value ("1GB", 500000000, "none" → None)."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as \"1GB\", not true/false")
    if isinstance(value, int):
        return None if value <= 0 else value
    text = str(value).strip().lower()
    return None if text in NO_LIMIT else parse_size(text)


def check_record_table(table: Mapping[str, Any]) -> str | None:
    """The first problem with a `[record]` table, as "key 'x': why", or None (config.py adds file:line)."""
    for key, value in table.items():
        if key not in RECORD_KEYS:
            return f"unknown key {key!r} (known keys: {', '.join(RECORD_KEYS)})"
        try:
            if key == "enabled" and not isinstance(value, bool):
                return "key 'enabled' must be true or false"
            if key == "dir" and not isinstance(value, str):
                return "key 'dir' must be a string (a directory)"
            if key == "retain":
                retain_value(value)
            if key == "max_size":
                size_value(value)
        except ValueError as exc:
            return f"key {key!r}: {exc}"
    return None


@dataclass(frozen=True)
class RecordSettings:
    """What to record to: `path` (a file the user named) or a new file in `directory`."""

    enabled: bool = False
    path: Path | None = None
    directory: Path | None = None
    retention: Retention = Retention()

    def target(self) -> Path:
        return self.path if self.path is not None else new_recording_path(self.directory or default_directory())

    @property
    def cleans_directory(self) -> Path | None:
        """The directory whose older recordings retention may delete: only lpxtop's own (no --out)."""
        if self.path is not None:
            return None
        return self.directory or default_directory()


def add_retention_flags(group: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    group.add_argument("--retain", metavar="DURATION",
                       help=f"delete recorded data older than this (default {DEFAULT_RETAIN_S / 3600:g}h; "
                       "'forever' keeps it)")
    group.add_argument("--max-size", metavar="SIZE",
                       help=f"at most this much recorded in the recordings' directory (default "
                       f"{DEFAULT_MAX_BYTES / 1e9:g}GB; 'none': no limit)")


def resolve(args: argparse.Namespace, table: Mapping[str, Any] | None, *, enabled: bool,
            path: str | None) -> RecordSettings:
    """Flags over the config file's `[record]` table. `enabled`/`path`: what the command line asked."""
    table = dict(table or {})
    retain_s: float | None = DEFAULT_RETAIN_S
    max_bytes: int | None = DEFAULT_MAX_BYTES
    if "retain" in table:
        retain_s = retain_value(table["retain"])
    if "max_size" in table:
        max_bytes = size_value(table["max_size"])
    if getattr(args, "retain", None):
        retain_s = retain_value(args.retain)
    if getattr(args, "max_size", None):
        max_bytes = size_value(args.max_size)
    directory = Path(str(table["dir"])).expanduser() if table.get("dir") else None
    return RecordSettings(
        enabled=enabled or path is not None or bool(table.get("enabled")),
        path=Path(path).expanduser() if path else None,
        directory=directory,
        retention=Retention(retain_s, max_bytes),
    )
