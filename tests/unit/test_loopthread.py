"""LoopThread (lpxtop/loopthread.py): a start that gives up on time, and a stop that leaves nothing pending."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from lpxtop import loopthread
from lpxtop.loopthread import LoopThread


def test_start_raises_when_the_loop_does_not_run_in_time_and_the_late_loop_ends_by_itself(monkeypatch):
    made = threading.Event()
    real_new_event_loop = loopthread.new_event_loop

    def slow_new_event_loop() -> asyncio.AbstractEventLoop:
        time.sleep(0.3)  # the loop comes up after start() has given up
        made.set()
        return real_new_event_loop()

    monkeypatch.setattr(loopthread, "new_event_loop", slow_new_event_loop)
    lt = LoopThread("test-slow-start")
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="did not start within 0.05 s"):
        lt.start(asyncio.sleep(3600), timeout=0.05)
    assert time.monotonic() - began < 0.25
    assert made.wait(5)
    lt.join(5)
    assert not lt.is_alive()  # it did not run its main for an hour
    assert lt.loop is None


def test_stop_cancels_leftover_tasks_on_a_loop_that_still_runs():
    seen: list[str] = []

    async def leftover() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(0)  # the loop still runs while leftovers end: their connections can close
            seen.append("leftover cancelled")
            raise

    async def spawn() -> None:
        asyncio.get_running_loop().create_task(leftover())
        await asyncio.sleep(0)

    lt = LoopThread("test-leftovers")
    lt.start()
    lt.run(spawn(), 5)
    assert lt.is_alive()
    lt.stop(5)
    assert seen == ["leftover cancelled"]
    assert not lt.is_alive() and lt.loop is None


def test_stop_cancels_main_first_then_the_rest():
    seen: list[str] = []

    async def helper() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            seen.append("helper")

    async def main() -> None:
        asyncio.get_running_loop().create_task(helper())
        try:
            await asyncio.sleep(3600)
        finally:
            seen.append("main")

    lt = LoopThread("test-main")
    lt.start(main())
    time.sleep(0.05)
    lt.stop(5)
    assert seen == ["main", "helper"]
    assert not lt.is_alive()


def test_stop_shuts_down_async_generators():
    seen: list[str] = []
    kept = []

    async def ticks():
        try:
            while True:
                yield 1
        finally:
            seen.append("generator closed")

    async def first_tick() -> int:
        generator = ticks()
        kept.append(generator)  # still referenced: only shutdown_asyncgens closes it
        return await generator.__anext__()

    lt = LoopThread("test-asyncgen")
    lt.start()
    assert lt.run(first_tick(), 5) == 1
    assert seen == []
    lt.stop(5)
    assert seen == ["generator closed"]


def test_a_main_that_returns_ends_the_thread_and_stop_is_safe_twice():
    lt = LoopThread("test-return")
    lt.start(asyncio.sleep(0))
    lt.join(5)
    assert not lt.is_alive()
    lt.stop(1)
    lt.stop(1)
    assert not lt.call_soon(print)
    with pytest.raises(RuntimeError):
        lt.submit(asyncio.sleep(0))


def test_run_times_out_with_the_builtin_error_and_cancels_the_coroutine():
    cancelled = threading.Event()

    async def slow() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    lt = LoopThread("test-run")
    lt.start()
    try:
        with pytest.raises(TimeoutError):
            lt.run(slow(), 0.05)
        assert cancelled.wait(5)
        assert lt.run(asyncio.sleep(0, result="still serving"), 5) == "still serving"
    finally:
        lt.stop(5)
