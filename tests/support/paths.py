"""Where the repository and its test fixtures are."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


def remove_tree_being_written(path: Path, timeout: float = 10.0) -> None:
    """Delete a directory that another process is writing into, as a user's `rm -rf` would.

    `shutil.rmtree` lists the directory and then unlinks each entry; a writer that creates and deletes a
    file between the two (SQLite's rollback journal, once per commit) makes it fail with "no such file" or
    "directory not empty". Try again until the directory is gone, bounded by time."""

    def removed() -> bool:
        with contextlib.suppress(OSError):
            shutil.rmtree(path)
        return not path.exists()

    wait_for(removed, timeout=timeout, step=0.005, what=f"{path} removed")
