"""How long each phase of a request may take: `Timeout` (public), a request's total `Budget`, and `Deadline`.

Every wait of the client is bounded: the pool wait, connecting, writing, each read (and the whole
response head), and with `Timeout.total` the whole request, redirects and a retry included. A phase
takes the smaller of its own limit and what is left of the total (`bound`), and the error for a phase
that ran out says which of the two it was (`timeout_error`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from lpxtop.http.errors import HttpTimeout

# Python >= 3.11 tasks count cancellation requests, which tells our own from an outside one.
TASKS_COUNT_CANCELS = sys.version_info >= (3, 11)


@dataclass(frozen=True)
class Timeout:
    """Seconds for each phase of a request, and for all of it; None waits forever.

    `read` bounds each wait for bytes (and the whole response head). `total` bounds the request from
    the pool wait to the body's last byte, redirects and a retry included; for `stream()` it covers
    the body as it is read through the Response. `request()`/`get()`/`post()` without a total use the
    longest of the phases as one.
    """

    connect: float | None = 30.0
    read: float | None = 30.0
    write: float | None = 30.0
    pool: float | None = 30.0
    total: float | None = None

    @classmethod
    def of(cls, value: float | Timeout | None) -> Timeout:
        """A Timeout from a Timeout, or the same seconds for every phase and for the whole request."""
        if isinstance(value, Timeout):
            return value
        return cls(value, value, value, value, value)

    def with_total(self) -> Timeout:
        """This Timeout, with the longest phase as its total when it has none."""
        if self.total is not None:
            return self
        phases = [t for t in (self.connect, self.read, self.write, self.pool) if t is not None]
        return dataclasses.replace(self, total=max(phases)) if phases else self


class Budget:
    """A request's total deadline on the loop's clock; phases take the smaller of their own limit and what is left."""

    __slots__ = ("loop", "deadline", "total")

    def __init__(self, loop: asyncio.AbstractEventLoop, total: float) -> None:
        self.loop = loop
        self.total = total
        self.deadline = loop.time() + total

    def bound(self, seconds: float | None) -> float | None:
        left = max(0.0, self.deadline - self.loop.time())
        return left if seconds is None or left < seconds else seconds

    def expired(self) -> bool:
        return self.loop.time() >= self.deadline - 0.002  # timers may run up to the clock's resolution early

    def message(self, what: str) -> str:
        return f"{what}: the request did not complete within its limit of {self.total:g} s"


def bound(seconds: float | None, budget: Budget | None) -> float | None:
    """A phase's limit: its own `seconds`, or what is left of the request's budget if that is less."""
    return seconds if budget is None else budget.bound(seconds)


def timeout_error(error: type[HttpTimeout], what: str, seconds: float | None, budget: Budget | None) -> HttpTimeout:
    """The error for a phase that ran out: its own limit, or the request's total."""
    if budget is not None and budget.expired():
        return error(budget.message(what))
    return error(f"{what} within {seconds:g} s" if seconds is not None else what)


class Deadline:
    """`with Deadline(timeout, Error):` cancels the current task after `timeout` s and raises Error instead.

    For connecting (TCP and TLS), which awaits asyncio coroutines that only a cancellation interrupts.
    One TimerHandle, no extra task (unlike `asyncio.wait_for`); works on Python 3.10, which has no
    `asyncio.timeout()`. A cancellation that is not this timer's propagates as CancelledError.
    """

    __slots__ = ("_timeout", "_error", "_task", "_handle", "_fired", "_cancelling")

    def __init__(self, timeout: float | None, error: type[Exception]) -> None:
        self._timeout = timeout
        self._error = error
        self._task: asyncio.Task[Any] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._fired = False
        self._cancelling = 0

    def __enter__(self) -> Deadline:
        if self._timeout is None:
            return self
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Deadline needs to run inside an asyncio task")
        self._task = task
        if TASKS_COUNT_CANCELS:
            self._cancelling = task.cancelling()
        self._handle = asyncio.get_running_loop().call_later(max(0.0, self._timeout), self._fire)
        return self

    def _fire(self) -> None:
        self._fired = True
        if self._task is not None:
            self._task.cancel()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if not self._fired or self._task is None:
            return
        outside = False
        if TASKS_COUNT_CANCELS:
            # Undo our request; any still pending came from elsewhere and must win.
            outside = self._task.uncancel() > self._cancelling
        # Python 3.10 keeps no count: a cancellation that coincides with our timer is taken as ours.
        if exc_type is asyncio.CancelledError and not outside:
            raise self._error(f"timed out after {self._timeout:g} s") from exc
