"""`LoopThread`: a daemon thread that owns an asyncio event loop, the one way lpxtop runs a loop beside the
caller's thread (the engine, the load generator, the fleet view, the exporter's /probe, the simulated server,
the trace receiver).

The loop runs a `main` coroutine to its end, or, without one, until `stop()`. `start()` returns once the loop
runs and raises `TimeoutError` when it does not within its timeout. Other threads hand it work with `submit`
(a `concurrent.futures.Future`), `run` (wait for the result, bounded) and `call_soon`. `stop()` ends it as
`asyncio.run` ends its loop: `main` is cancelled and awaited, then every task still pending is cancelled and
let finish on a loop that still runs (their connections close, their `finally` blocks run), then async
generators are shut down and the loop is closed; the thread is joined, bounded.

Its loop (and `run_loop`'s, the one lpxtop runs in the caller's thread) waits through a `LagSelector`, which
times the loop between two waits for whoever watches its lateness (lpxtop/engine/probe/clientlimit.py)
without waking it for that.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import selectors
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger("lpxtop.loopthread")

_T = TypeVar("_T")
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
_LEFTOVER_ROUNDS = 3  # a task that starts another as it is cancelled: a few rounds, bounded
# A stretch of the loop's callbacks shorter than this is not checked for events that waited through it: the
# lateness limits are several times longer (clientlimit.py), and the check is one more system call
PENDING_CHECK_NS = 1_000_000


class LagSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """The loop's selector, which also tells its listeners how late the loop was, while any listens, without
    waking the loop for it.

    Two figures, in ns, each the most that something may have waited for the loop:
    - **a busy stretch that held events back**: the loop ran callbacks this long since it last woke, and when
      it came back to wait, events were already pending: a read that arrived meanwhile was taken that much
      later at most. A stretch during which nothing arrived delayed nothing and is not reported.
    - **a late timer**: a wait that ended on its timeout, how long after it the loop ran again (the thread
      waiting for the interpreter lock or for a CPU).

    A timer ticking only to be measured (what a lateness watch had before) costs a wake-up each tick, and a
    wake-up is most of a waiting loop's CPU: ~110-170 µs of CPU per asyncio timer on the 2-core VM
    (benchmarks/loop_wakeups.py), a third of the dashboard's engine thread with four endpoints.
    """

    def __init__(self) -> None:
        super().__init__()
        self.listeners: list[Callable[[int], None]] = []
        self._woke_ns = time.perf_counter_ns()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if not self.listeners:
            ready = super().select(timeout)
            self._woke_ns = time.perf_counter_ns()
            return ready
        entered_ns = time.perf_counter_ns()
        busy_ns = entered_ns - self._woke_ns
        polling = timeout is not None and timeout <= 0
        if polling or busy_ns >= PENDING_CHECK_NS:
            ready = super().select(0)
            if ready or polling:
                self._woke_ns = time.perf_counter_ns()
                if ready and busy_ns >= PENDING_CHECK_NS:
                    self._tell(busy_ns)
                return ready
            entered_ns = time.perf_counter_ns()
        ready = super().select(timeout)
        woke_ns = self._woke_ns = time.perf_counter_ns()
        if not ready and timeout is not None:
            # epoll and poll wait whole milliseconds, rounded up
            late_ns = woke_ns - entered_ns - math.ceil(timeout * 1e3) * 1_000_000
            if late_ns > 0:
                self._tell(late_ns)
        return ready

    def _tell(self, late_ns: int) -> None:
        for listener in tuple(self.listeners):
            listener(late_ns)


_SELECTORS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LagSelector] = weakref.WeakKeyDictionary()


def new_event_loop() -> asyncio.AbstractEventLoop:
    """An event loop that waits through a `LagSelector`."""
    selector = LagSelector()
    loop = asyncio.SelectorEventLoop(selector)
    _SELECTORS[loop] = selector
    return loop


def lag_selector(loop: asyncio.AbstractEventLoop) -> LagSelector | None:
    """The `LagSelector` `loop` waits through, or None for a loop not made by `new_event_loop`."""
    return _SELECTORS.get(loop)


def run_loop(main: Coroutine[Any, Any, _T]) -> _T:
    """`asyncio.run(main)` on a `new_event_loop()`: run it in this thread to its end, then end the loop as
    asyncio.run does (the tasks left cancelled and let finish, async generators and the default executor
    shut down)."""
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(main)
    finally:
        _close(loop, "run_loop", executor=True)


class LoopThread:
    """A daemon thread running one asyncio event loop; see the module's docstring.

    `workers`: the size of the loop's default executor (`asyncio.to_thread`), named `<name>-worker`;
    None keeps asyncio's default.
    """

    def __init__(self, name: str, *, workers: int | None = None) -> None:
        self.name = name
        self._workers = workers
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._body: asyncio.Task | None = None
        self._running = threading.Event()
        self._stop_requested = threading.Event()
        self._closed = threading.Event()

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop, from `start()` until it is closed."""
        loop = self._loop
        return None if loop is None or loop.is_closed() else loop

    @property
    def started(self) -> bool:
        return self._thread is not None

    def is_alive(self) -> bool:
        """Whether the thread still runs (its loop, or the loop's shutdown)."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def on_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def start(self, main: Coroutine[Any, Any, Any] | None = None, timeout: float = START_TIMEOUT_S) -> None:
        """Start the thread; return once its loop runs (`main`, if given, has begun). TimeoutError when the loop
        does not run within `timeout` (the thread is then asked to stop). Starting twice is an error."""
        if self._thread is not None:
            if main is not None:
                main.close()
            raise RuntimeError(f"{self.name}: started already")
        self._thread = threading.Thread(target=self._thread_main, args=(main,), name=self.name, daemon=True)
        self._thread.start()
        if not self._running.wait(timeout):
            self.stop(0)
            raise TimeoutError(f"{self.name}: the event loop did not start within {timeout:g} s")

    def submit(self, coro: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        """Run `coro` on the loop; RuntimeError when the loop does not run (not started, or stopped)."""
        loop = self.loop
        if loop is None or self._closed.is_set():
            coro.close()
            raise RuntimeError(f"{self.name}: the event loop does not run")
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def run(self, coro: Coroutine[Any, Any, _T], timeout: float) -> _T:
        """`coro`'s result, waited for from another thread at most `timeout` seconds; on TimeoutError (the
        built-in one) the coroutine is cancelled. Its own exception is raised as it is."""
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"{self.name}: no answer within {timeout:g} s") from None

    def call_soon(self, fn: Callable[..., object], *args: Any) -> bool:
        """Call `fn(*args)` on the loop, from any thread; False when the loop does not run (nothing called)."""
        loop = self.loop
        if loop is None or self._closed.is_set():
            return False
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # closed in between
            return False
        return True

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """End the loop (see the module's docstring) and join the thread, at most `timeout` seconds.
        Safe to call twice, before `start()`, and from the loop's own thread (which is not joined)."""
        self._stop_requested.set()  # a loop that has not started yet ends as soon as it does
        self.call_soon(self._cancel_body)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to end (after `main` returned, or `stop()`), at most `timeout` seconds."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # ---- on the thread ----

    def _thread_main(self, main: Coroutine[Any, Any, Any] | None) -> None:
        loop = new_event_loop()
        asyncio.set_event_loop(loop)
        if self._workers is not None:
            # a few threads are enough for collectors that are each single-flight, and each extra thread
            # would keep a malloc arena of its own
            loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(
                max_workers=self._workers, thread_name_prefix=f"{self.name}-worker"))
        self._loop = loop
        try:
            self._body = loop.create_task(self._run_body(main))
            loop.run_until_complete(self._body)
        except asyncio.CancelledError:
            pass  # stop()
        except Exception:  # noqa: BLE001 - the owner's main failed: logged, the loop still shuts down cleanly
            log.exception("%s: event loop failed", self.name)
        finally:
            self._closed.set()  # no new work from other threads from here on
            try:
                _close(loop, self.name)
            finally:
                if main is not None:
                    main.close()  # a main cancelled before its first step is not left "never awaited"
                self._running.set()  # a start() still waiting returns

    async def _run_body(self, main: Coroutine[Any, Any, Any] | None) -> None:
        if self._stop_requested.is_set():  # start() gave up waiting for the loop
            return
        self._running.set()
        if main is None:
            await asyncio.get_running_loop().create_future()  # until stop() cancels it
        else:
            await main

    def _cancel_body(self) -> None:
        if self._body is not None:
            self._body.cancel()


def _close(loop: asyncio.AbstractEventLoop, name: str, executor: bool = False) -> None:
    """End a loop whose main is done: its leftover tasks finished, async generators (and with `executor`, the
    default executor's threads) shut down, closed."""
    try:
        _finish_leftovers(loop)
        loop.run_until_complete(loop.shutdown_asyncgens())
        if executor:
            loop.run_until_complete(loop.shutdown_default_executor())
    except Exception:  # noqa: BLE001
        log.exception("%s: shutting the event loop down failed", name)
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def _finish_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks still pending and let them end, as asyncio.run does: none is destroyed pending, and
    their connections close on a loop that still runs."""
    for _ in range(_LEFTOVER_ROUNDS):
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        if not pending:
            return
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))

