"""Where recordings go, and the limits that keep a recorder left running from filling a disk.

Defaults: recordings in `$XDG_STATE_HOME/lpxtop/` (`~/.local/state/lpxtop/`); data older than 48 h
deleted (`--retain`), and at most 1 GB of recordings in that directory (`--max-size`). Both apply to the
file being written (its oldest minutes go first) and to older recordings in the same directory (oldest
files first). Only files lpxtop wrote are ever deleted (SQLite header with lpxtop's application id).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from lpxtop import durations
from lpxtop.humanize import file_size
from lpxtop.record.fileformat import is_recording

DEFAULT_RETAIN_S = 48 * 3600.0
DEFAULT_MAX_BYTES = 1_000_000_000
SUFFIX = ".lpxrec"
# A file written to within this long may belong to another recorder still running: the size limit
# leaves it alone (the age limit cannot reach it anyway).
IN_USE_S = 600.0

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)b?\s*$", re.IGNORECASE)


def parse_duration(text: str) -> float:
    """Seconds from "90", "90s", "15m", "48h", "2d", "1h30m" (lpxtop.durations); ValueError unless positive."""
    seconds = durations.parse_duration(text)
    if seconds <= 0:
        raise ValueError(f"{text!r} is not a positive duration (examples: 90s, 15m, 48h, 2d)")
    return seconds


def parse_size(text: str) -> int:
    """Bytes from "1GB", "500MB", "1.5G", "2GiB", "800k" (decimal units; "i" for binary ones)."""
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a size (examples: 500MB, 1GB, 2GiB)")
    number, prefix, binary = float(m.group(1)), m.group(2).lower(), bool(m.group(3))
    base = 1024 if binary else 1000
    value = int(number * base ** " kmgt".index(prefix or " "))
    if value <= 0:
        raise ValueError(f"{text!r} is not a positive size")
    return value


def default_directory() -> Path:
    """`$XDG_STATE_HOME/lpxtop`, else `~/.local/state/lpxtop`."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "lpxtop"


def new_recording_path(directory: Path | None = None, now: float | None = None, label: str = "lpxtop") -> Path:
    """A fresh file name in `directory` (default: the state directory), by local start time."""
    directory = directory or default_directory()
    stamp = time.strftime("%Y-%m-%dT%H-%M-%S", time.localtime(now if now is not None else time.time()))
    path = directory / f"{label}-{stamp}{SUFFIX}"
    n = 2
    while path.exists():
        path = directory / f"{label}-{stamp}-{n}{SUFFIX}"
        n += 1
    return path


@dataclass(frozen=True)
class Retention:
    """How long data is kept and how much of it, in the file being written and in its directory."""

    retain_s: float | None = DEFAULT_RETAIN_S
    max_bytes: int | None = DEFAULT_MAX_BYTES

    def describe(self) -> str:
        age = "forever" if self.retain_s is None else f"{self.retain_s / 3600:g} h"
        size = "no size limit" if self.max_bytes is None else f"at most {file_size(self.max_bytes)}"
        return f"kept {age}, {size}"


def clean_directory(directory: Path, retention: Retention, *, keep: Path | None = None,
                    now: float | None = None) -> list[Path]:
    """Delete older recordings in `directory` beyond the age and size limits (oldest first); never `keep`,
    never a file lpxtop did not write. Returns what was deleted."""
    now = time.time() if now is None else now
    files: list[tuple[float, int, Path]] = []
    try:
        entries = list(directory.iterdir())
    except OSError:
        return []
    keep_resolved = keep.resolve() if keep is not None else None
    for path in entries:
        if not path.name.endswith(SUFFIX) or not path.is_file():
            continue
        if keep_resolved is not None and path.resolve() == keep_resolved:
            continue
        if not is_recording(path):
            continue
        try:
            stat = path.stat()
        except OSError:
            continue
        files.append((stat.st_mtime, _size_with_wal(path), path))
    files.sort()
    deleted: list[Path] = []
    if retention.retain_s is not None:
        for mtime, _, path in list(files):
            if now - mtime > retention.retain_s and _delete(path):
                deleted.append(path)
                files.remove((mtime, _, path))
    if retention.max_bytes is not None:
        kept_size = _size_with_wal(keep) if keep is not None else 0
        total = kept_size + sum(size for _, size, _ in files)
        for mtime, size, path in files:
            if total <= retention.max_bytes:
                break
            if now - mtime < IN_USE_S:
                continue
            if _delete(path):
                deleted.append(path)
                total -= size
    return deleted


def _size_with_wal(path: Path) -> int:
    total = 0
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(OSError):
            total += os.path.getsize(f"{path}{suffix}")
    return total


def _delete(path: Path) -> bool:
    ok = False
    for suffix in ("", "-wal", "-shm"):
        try:
            os.unlink(f"{path}{suffix}")
            ok = ok or suffix == ""
        except FileNotFoundError:
            pass
        except OSError:
            if suffix == "":
                return False
    return ok
