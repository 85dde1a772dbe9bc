"""The OTLP receiver in its own process: what lpxtop's commands run, so spans never cost a probe a timestamp.

Why a process, not only a thread: the receiver's thread shares the engine's interpreter lock. Measured
with benchmarks/traces_flood.py (2 cores, load average ~10, 1 ms switch interval): with the receiver
as a thread of the engine's process, 1,000 vLLM spans a second raised a probe's TTFT error p99 from
~5 ms to ~16 ms and its worst token gap error to hundreds of ms — each span's decoding and reading is
Python work that a probe's read of its bytes must wait behind, and a descheduled thread keeps the lock.
In a child process the engine's process only unpickles the segments of the spans that were read
(the few fields a joined request needs) and hands them to its TraceJoin.

The child (multiprocessing, spawn) runs TraceReceiverServer on its own loop with a sink that batches
segments and drop counts onto a pipe every PIPE_FLUSH_S; the parent's reader thread feeds them to
the join and keeps the child's latest ReceiverStats. The child stops when told, or when the pipe
closes (the parent died); the parent's `stop()` ends it in any case (terminate, then kill).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import signal
import threading
from collections.abc import Iterable
from typing import Any

from lpxtop.engine.traces.join import SpanSink
from lpxtop.engine.traces.otlp import OtelUnavailable
from lpxtop.engine.traces.receiver import ReceiverSettings, TraceReceiverServer
from lpxtop.model.chain import ReceiverStats, SpanSegments

log = logging.getLogger("lpxtop.traces")

PIPE_FLUSH_S = 0.05  # how often the child sends what it read (a span joins at most this much later)
STATS_EVERY_S = 0.5
MAX_BUFFERED = 4096  # segments waiting in the child for the next send
START_TIMEOUT_S = 30.0  # a spawned interpreter importing aiohttp and protobuf on a busy 2-core machine
STOP_TIMEOUT_S = 5.0


class TraceReceiverProcess:
    """The receiver in a child process, feeding `join` in this one: `start()` returns (host, port) once the
    child listens (OSError if it cannot, OtelUnavailable without opentelemetry-proto); `stats()` is the
    child's latest counts; `stop()` ends it. The same face as TraceReceiver (the in-process one)."""

    def __init__(self, join: SpanSink, settings: ReceiverSettings | None = None) -> None:
        self.join = join
        self.settings = settings or ReceiverSettings()
        self.address: tuple[str, int] | None = None
        self._process: Any = None
        self._conn: Any = None
        self._reader: threading.Thread | None = None
        self._stats = ReceiverStats()
        self._lock = threading.Lock()

    def start(self) -> tuple[str, int]:
        context = multiprocessing.get_context("spawn")  # no fork of a process that holds threads and loops
        parent, child = context.Pipe(duplex=True)
        process = context.Process(target=_child_main, args=(self.settings, child), name="lpxtop-traces",
                                  daemon=True)
        process.start()
        child.close()
        self._process, self._conn = process, parent
        try:
            if not parent.poll(START_TIMEOUT_S):
                raise TimeoutError(f"the trace receiver did not start within {START_TIMEOUT_S:.0f} s")
            kind, *rest = parent.recv()
        except BaseException:
            self.stop()
            raise
        if kind == "error":
            self.stop()
            error, errno, message = rest
            if error == "otel":
                raise OtelUnavailable(message)
            raise OSError(errno, message) if errno is not None else OSError(message)
        host, port = rest[0]
        self.address = (host, port)
        with self._lock:
            self._stats = ReceiverStats(listening=f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
        self._reader = threading.Thread(target=self._read, name="lpxtop-traces-pipe", daemon=True)
        self._reader.start()
        return self.address

    def stats(self) -> ReceiverStats:
        with self._lock:
            return self._stats

    def stop(self) -> None:
        conn, process = self._conn, self._process
        if conn is not None:
            with contextlib.suppress(OSError, ValueError, BrokenPipeError):
                conn.send(("stop",))
        if process is not None:
            process.join(STOP_TIMEOUT_S)
            if process.is_alive():
                process.terminate()
                process.join(STOP_TIMEOUT_S)
            if process.is_alive():
                process.kill()
                process.join(STOP_TIMEOUT_S)
        reader = self._reader
        if reader is not None and reader is not threading.current_thread():
            reader.join(STOP_TIMEOUT_S)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.close()
        self._conn = self._process = self._reader = None

    def __enter__(self) -> TraceReceiverProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _read(self) -> None:
        conn = self._conn
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                with self._lock:
                    if self._process is not None:  # not a stop() of ours: the child went away
                        self._stats = _with_error(self._stats, "the trace receiver's process exited")
                return
            kind = message[0]
            if kind == "segments":
                _, segments, drops = message
                if segments:
                    self.join.add_segments(segments)
                if drops:
                    self.join.note_receiver_drop(drops)
            elif kind == "stats":
                with self._lock:
                    self._stats = message[1]
            elif kind == "stopped":
                return


def _with_error(stats: ReceiverStats, error: str) -> ReceiverStats:
    from dataclasses import replace

    return replace(stats, listening=None, error=error)


class _PipeSink:
    """The child's sink: segments and drop counts buffered, sent to the parent every PIPE_FLUSH_S."""

    def __init__(self) -> None:
        self.segments: list[SpanSegments] = []
        self.drops = 0
        self.lost = 0  # segments past MAX_BUFFERED (the parent is not reading): counted as drops

    def add_segments(self, readings: Iterable[SpanSegments]) -> None:
        for segments in readings:
            if len(self.segments) < MAX_BUFFERED:
                self.segments.append(segments)
            else:
                self.lost += 1
                self.drops += 1

    def note_receiver_drop(self, spans: int = 1) -> None:
        self.drops += max(1, spans)

    def take(self) -> tuple[list[SpanSegments], int]:
        segments, drops = self.segments, self.drops
        self.segments, self.drops = [], 0
        return segments, drops


def _child_main(settings: ReceiverSettings, conn: Any) -> None:
    """The child process: serve until told to stop or the parent's end of the pipe closes."""
    # The terminal's Ctrl-C reaches the whole process group: the parent decides when the child stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Nothing on the terminal the dashboard draws on: the child's log records go nowhere (its counts,
    # errors included, reach the parent as ReceiverStats).
    logging.getLogger().addHandler(logging.NullHandler())
    asyncio.run(_serve(settings, conn))


async def _serve(settings: ReceiverSettings, conn: Any) -> None:
    sink = _PipeSink()
    try:
        server = TraceReceiverServer(sink, settings)
        address = await server.start()
    except OtelUnavailable as exc:
        conn.send(("error", "otel", None, str(exc)))
        return
    except OSError as exc:
        conn.send(("error", "os", exc.errno, exc.strerror or str(exc)))
        return
    conn.send(("ready", address))
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_message() -> None:
        try:
            while conn.poll():
                if conn.recv()[0] == "stop":
                    stop.set()
        except (EOFError, OSError):  # the parent is gone
            stop.set()

    loop.add_reader(conn.fileno(), on_message)
    ticks = 0
    try:
        while not stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), PIPE_FLUSH_S)
            ticks += 1
            segments, drops = sink.take()
            try:
                if segments or drops:
                    conn.send(("segments", segments, drops))
                if ticks * PIPE_FLUSH_S >= STATS_EVERY_S or stop.is_set():
                    ticks = 0
                    stats = server.stats()
                    if sink.lost:
                        from dataclasses import replace

                        stats = replace(stats, dropped={**stats.dropped, "pipe_full": sink.lost})
                    conn.send(("stats", stats))
            except (OSError, ValueError):  # the parent is gone
                break
    finally:
        loop.remove_reader(conn.fileno())
        await server.stop()
        with contextlib.suppress(OSError, ValueError):
            conn.send(("stopped",))
