"""The one way a test waits: ask a condition until it holds, bounded by time (never a fixed sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 10.0, step: float = 0.02, what: str = "condition") -> T:
    """`predicate()`'s first true value, asked every `step` s; fails the test after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not met in {timeout:g} s")
        time.sleep(step)
