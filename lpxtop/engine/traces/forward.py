"""`--traces-forward URL`: every body the receiver accepted, passed on unchanged to the user's collector.

Pointing a server at lpxtop then costs its owner nothing: their own collector still gets every span.
The body goes out as it came (same bytes, `Content-Type` and `Content-Encoding`), from a bounded queue
served by its own tasks on the receiver's loop; when the queue is full or the collector fails, the
body is dropped and counted by reason — reception never waits for the collector.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import Counter
from dataclasses import dataclass

import aiohttp

log = logging.getLogger("lpxtop.traces")

FORWARD_QUEUE = 64  # bodies
FORWARD_MAX_BYTES = 32 * 1024 * 1024  # queued bytes, all bodies together
FORWARD_TIMEOUT_S = 10.0
FORWARD_WORKERS = 2


@dataclass(frozen=True)
class _Body:
    data: bytes
    content_type: str
    content_encoding: str | None


class SpanForwarder:
    """A bounded queue of OTLP bodies POSTed to `url`; start()/stop() on the receiver's loop."""

    def __init__(self, url: str, *, max_queue: int = FORWARD_QUEUE, max_bytes: int = FORWARD_MAX_BYTES,
                 timeout_s: float = FORWARD_TIMEOUT_S, workers: int = FORWARD_WORKERS) -> None:
        self.url = url
        self._max_bytes = max_bytes
        self._timeout_s = timeout_s
        self._workers = workers
        self._queue: asyncio.Queue[_Body] = asyncio.Queue(max_queue)
        self._queued_bytes = 0
        self._tasks: list[asyncio.Task] = []
        self._session: aiohttp.ClientSession | None = None
        self._lock = threading.Lock()
        self.forwarded = 0
        self.dropped: Counter[str] = Counter()

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout_s),
                                              auto_decompress=False)
        self._tasks = [asyncio.create_task(self._work(), name=f"lpxtop-traces-forward-{i}")
                       for i in range(self._workers)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def offer(self, data: bytes, content_type: str, content_encoding: str | None) -> bool:
        """Queue one body (never waits); False, and counted, when the queue or its byte budget is full."""
        if self._queued_bytes + len(data) > self._max_bytes:
            self._count_drop("queue_full")
            return False
        try:
            self._queue.put_nowait(_Body(data, content_type, content_encoding))
        except asyncio.QueueFull:
            self._count_drop("queue_full")
            return False
        self._queued_bytes += len(data)
        return True

    def counts(self) -> tuple[int, dict[str, int]]:
        with self._lock:
            return self.forwarded, dict(self.dropped)

    def _count_drop(self, reason: str) -> None:
        with self._lock:
            self.dropped[reason] += 1

    async def _work(self) -> None:
        while True:
            body = await self._queue.get()
            self._queued_bytes -= len(body.data)
            headers = {"Content-Type": body.content_type}
            if body.content_encoding:
                headers["Content-Encoding"] = body.content_encoding
            session = self._session
            if session is None:
                return
            try:
                async with session.post(self.url, data=body.data, headers=headers) as response:
                    await response.read()
                    ok = 200 <= response.status < 300
                    reason = f"http_{response.status}"
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
                ok, reason = False, "unreachable"
                log.debug("forwarding spans to %s failed: %s", self.url, exc)
            with self._lock:
                if ok:
                    self.forwarded += 1
                else:
                    self.dropped[reason] += 1
