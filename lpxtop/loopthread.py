"""`LoopThread`: a daemon thread that owns an asyncio event loop, the one way lpxtop runs a loop beside the
caller's thread (the engine, the load generator, the fleet view, the exporter's /probe, the simulated server,
the trace receiver).

The loop runs a `main` coroutine to its end, or, without one, until `stop()`. `start()` returns once the loop
runs and raises `TimeoutError` when it does not within its timeout. Other threads hand it work with `submit`
(a `concurrent.futures.Future`), `run` (wait for the result, bounded) and `call_soon`. `stop()` ends it as
`asyncio.run` ends its loop: `main` is cancelled and awaited, then every task still pending is cancelled and
let finish on a loop that still runs (their connections close, their `finally` blocks run), then async
generators are shut down and the loop is closed; the thread is joined, bounded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger("lpxtop.loopthread")

_T = TypeVar("_T")
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
_LEFTOVER_ROUNDS = 3  # a task that starts another as it is cancelled: a few rounds, bounded


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
        loop = asyncio.new_event_loop()
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
                _finish_leftovers(loop)
                loop.run_until_complete(loop.shutdown_asyncgens())
            except Exception:  # noqa: BLE001
                log.exception("%s: shutting the event loop down failed", self.name)
            finally:
                if main is not None:
                    main.close()  # a main cancelled before its first step is not left "never awaited"
                asyncio.set_event_loop(None)
                loop.close()
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

