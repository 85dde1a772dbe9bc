"""What marks a file as an lpxtop recording, without SQLite: the format versions and the header check.

Kept apart from `store` so that the dashboard's start (its `--version` text, its retention flags) does
not import sqlite3 (~1.7 MB of resident memory) when it does not record.
"""

from __future__ import annotations

from pathlib import Path

FORMAT_VERSION = 1
OLDEST_READABLE = 1
APPLICATION_ID = 0x6C707872  # "lpxr"


def is_recording(path: str | Path) -> bool:
    """True when `path` is a SQLite file carrying lpxtop's application id (read from its header only)."""
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except OSError:
        return False
    return (len(header) == 100 and header.startswith(b"SQLite format 3\x00")
            and int.from_bytes(header[68:72], "big") == APPLICATION_ID)
