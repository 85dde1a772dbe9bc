"""Tests that measure time against a tolerance run alone, also when pytest-xdist runs the suite in workers.

A test marked `timing` holds an exclusive lock while it runs (set-up, call and tear-down; tests/conftest.py
keeps it held across consecutive timing tests, which one worker runs as an xdist group); every other test
holds the same lock shared. So a timing test starts only once the tests under way in the other workers
have ended, and none starts beside it: it measures on a machine as quiet as a one-process run gives it.
A second lock, the turnstile, makes the exclusive request first in line: a worker asking for the shared
lock waits behind a timing test that is waiting, so the timing test cannot starve.

The locks are `fcntl.flock` on two files named by the run's id (`PYTEST_XDIST_TESTRUNUID`, the same in
every worker of one run), in the temporary directory. Outside xdist nothing is locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

MARKER = "timing"


def _lock_paths() -> tuple[Path, Path] | None:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run or not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    base = Path(tempfile.gettempdir()) / f"lpxtop-tests-{run}"
    return base.with_suffix(".turnstile"), base.with_suffix(".lock")


@contextlib.contextmanager
def held(exclusive: bool) -> Iterator[None]:
    """The run's lock, exclusive for a timing test and shared for the others (nothing outside xdist)."""
    paths = _lock_paths()
    if paths is None:
        yield
        return
    turnstile_path, lock_path = paths
    with open(turnstile_path, "a+b") as turnstile, open(lock_path, "a+b") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
