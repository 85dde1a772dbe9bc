"""The recorder: an engine listener that only enqueues, and a writer thread that commits once a second.

On the engine's loop the listener costs one `time.time()` and one `deque.append` per event, so
recording cannot delay a probe's timestamps. Everything else — encoding, compression, SQLite,
retention, working out which alerts began — happens on the writer thread, which wakes once a second.

Failures never stop the monitoring: a full disk or an unwritable path stops the recording, and the
recorder's alert ("recording stopped: …") shows in the alerts bar and in JSON until lpxtop exits; what
was committed before stays in the file, and the alert says until when. The writer checks once a second
that its path still names its file (SQLite writes on into a deleted one without a word): a file deleted,
or its directory, stops the recording the same way, and nothing is then said to be stored.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import socket
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from lpxtop import __version__, textsafe
from lpxtop.model.agent import AgentStepEvent
from lpxtop.model.alerts import Alert
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.events import (
    AlertsEvent,
    ControlEvent,
    GpuEvent,
    SampleEvent,
    ScrapeEvent,
    SnapshotEvent,
    SystemEvent,
)
from lpxtop.model.snapshot import Snapshot
from lpxtop.record.codec import Encoder
from lpxtop.record.records import EndpointInfo
from lpxtop.record.retention import Retention, clean_directory
from lpxtop.record.store import RecordingError, RecordingExists, StoreWriter

log = logging.getLogger("lpxtop.record")

COMMIT_EVERY_S = 1.0
COMPACT_EVERY_S = 60.0
KEYFRAME_EVERY_S = 60.0
RETENTION_EVERY_S = 60.0
DIRECTORY_CLEAN_EVERY_S = 600.0
# Events waiting for the writer; beyond this (a disk slower than the engine for minutes) new ones are
# dropped and counted rather than held in memory.
MAX_PENDING = 100_000
STOP_TIMEOUT_S = 10.0


def mask_endpoint(config: EndpointConfig) -> EndpointConfig:
    """The settings as recorded: every header value masked (they may hold credentials)."""
    if not config.headers:
        return config
    return replace(config, headers=tuple((name, textsafe.MASK) for name, _ in config.headers))


class _MarkRequest:
    __slots__ = ("kind", "payload")

    def __init__(self, kind: str, payload: dict) -> None:
        self.kind = kind
        self.payload = payload


class Recorder:
    """Records an engine's inputs to `path`. Create, `attach(engine)` before `engine.start()`, `close()`.

    `status` is "recording", "stopped: <why>" or "closed"; `alerts()` says so on the dashboard.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        window_s: float | None = None,
        max_samples: int | None = None,
        retention: Retention | None = None,
        clean_dir: Path | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.path = Path(path)
        self.retention = retention or Retention()
        self._clean_dir = clean_dir
        self.status = "recording"
        self.failure: str | None = None
        self.bytes_written = 0
        self.events_written = 0
        self.commits = 0
        self.dropped = 0
        self.writer_cpu_s = 0.0  # CPU time of the writer thread (benchmarks/record_cost.py)
        self._pending: collections.deque = collections.deque()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._engine: Any = None
        self._encoder = Encoder(text=textsafe.redact, sanitizers={EndpointConfig: mask_endpoint})
        self._seq = 0
        self._endpoints: dict[str, tuple[EndpointConfig, str | None]] = {}
        self._alerts_seen: dict[tuple[str, str, str], Alert] = {}
        self._restarts: dict[str, int] = {}
        self._port_states: dict[int, str] = {}
        self._next_keyframe = 0.0
        self._last_retention = time.monotonic()
        self._last_clean = float("-inf")
        self.last_commit_time: float | None = None
        self._closed = False
        self._stored_at_close = 0
        self.kept = True  # False when there is no file of this recording on disk (never created, or deleted)
        info = {
            "lpxtop_version": __version__,
            "host": socket.gethostname(),
            "created_at": time.time(),
            "window_s": window_s,
            "max_samples": max_samples,
            "retain_s": self.retention.retain_s,
            "max_bytes": self.retention.max_bytes,
            **(meta or {}),
        }
        self._writer: StoreWriter | None = StoreWriter(self.path, info)

    # ---- any thread ----

    @classmethod
    def start_for(
        cls,
        engine: Any,
        path: str | Path,
        *,
        endpoints: Iterable[EndpointConfig] = (),
        retention: Retention | None = None,
        clean_dir: Path | None = None,
        strict: bool = False,
        refuse_existing: bool = False,
        meta: Mapping[str, Any] | None = None,
    ) -> Recorder:
        """A recorder attached to `engine` (not yet started). With `strict` a file that cannot be created
        raises RecordingError, with `refuse_existing` only a file that exists already (RecordingExists, a
        usage error); otherwise the recorder comes back stopped, with its alert, and monitoring goes on."""
        settings = getattr(engine, "settings", None)
        meta = {"include_client_limited": bool(getattr(settings, "include_client_limited", False)), **(meta or {})}
        try:
            recorder = cls(path, window_s=getattr(settings, "window_s", None),
                           max_samples=getattr(settings, "max_samples", None), retention=retention,
                           clean_dir=clean_dir, meta=meta)
        except RecordingError as exc:
            if strict or (refuse_existing and isinstance(exc, RecordingExists)):
                raise
            recorder = cls.__new__(cls)
            recorder._init_failed(Path(path), str(exc), retention)
            add_alerts = getattr(engine, "add_alert_source", None)
            if add_alerts is not None:
                add_alerts(recorder.alerts)
            log.warning("not recording: %s", exc)
            return recorder
        recorder.attach(engine, endpoints)
        return recorder

    def _init_failed(self, path: Path, reason: str, retention: Retention | None) -> None:
        self.path = path
        self.retention = retention or Retention()
        self.status = f"stopped: {reason}"
        self.failure = reason
        self.bytes_written = self.events_written = self.commits = self.dropped = 0
        self.writer_cpu_s = 0.0
        self._writer = None
        self._thread = None
        self._engine = None
        self._pending = collections.deque()
        self._stop = threading.Event()
        self._closed = True
        self.last_commit_time = None
        self._stored_at_close = 0
        self.kept = False

    def attach(self, engine: Any, endpoints: Iterable[EndpointConfig] = ()) -> None:
        """Listen to `engine` and start the writer thread. `endpoints` are recorded at once (a headless
        `once` publishes its only snapshot at the end)."""
        configs = list(endpoints)  # their credentials were registered for masking as they were built
        now = time.time()
        for config in configs:
            self._pending.append((now, EndpointInfo(config, config.model)))
        self._engine = engine
        engine.add_listener(self.on_event)
        add_alerts = getattr(engine, "add_alert_source", None)
        if add_alerts is not None:
            add_alerts(self.alerts)
        self.start()

    def start(self) -> None:
        if self._thread is None and self._writer is not None:
            self._thread = threading.Thread(target=self._run, name="lpxtop-recorder", daemon=True)
            self._thread.start()

    def on_event(self, event: object) -> None:
        """The engine listener: runs on the engine's loop, so it only stamps and enqueues."""
        pending = self._pending
        if len(pending) >= MAX_PENDING or self.failure is not None:
            if self.failure is None:
                self.dropped += 1
            return
        pending.append((time.time(), event))

    def mark(self, kind: str, payload: Mapping[str, Any] | None = None, wall_time: float | None = None) -> None:
        """Record a moment worth finding again: a load-test step, a bookmark, anything a writer names.
        Any thread; committed within about a second."""
        if self.failure is not None or self._closed:
            return
        self._pending.append((time.time() if wall_time is None else wall_time, _MarkRequest(kind, dict(payload or {}))))

    def bookmark(self, note: str = "", wall_time: float | None = None) -> None:
        """`b` on the dashboard: this moment, with the user's note."""
        self.mark("bookmark", {"note": textsafe.scrub(note) or ""}, wall_time)

    def alerts(self) -> tuple[Alert, ...]:
        """For the engine's snapshots: why the recording stopped, or that events were dropped."""
        if self.failure is not None:
            return (Alert("warning", "recording",
                          f"recording stopped: {self.failure}. Monitoring goes on; free space or choose another "
                          "place (--record FILE) and restart lpxtop to record again.", "recording"),)
        if self.dropped:
            return (Alert("info", "recording", f"recording dropped {self.dropped} events: the disk is slower than "
                          "the engine", "recording"),)
        return ()

    @property
    def recording(self) -> bool:
        return self.failure is None and not self._closed

    @property
    def kept_path(self) -> Path | None:
        """The recording's file when it is on disk (also after a failure: it holds what was committed
        before), None when there is none (it could not be created, or was deleted while recording)."""
        return self.path if self.kept else None

    def status_line(self) -> str:
        """One line for the header and for `lpxtop record`'s output."""
        if self.failure is not None:
            return f"REC stopped: {self.failure}"
        if self._closed:
            return f"recorded to {self.path}"
        return f"REC {self.path.name}"

    def close(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Commit what is queued, stop the thread and close the file (bounded)."""
        if self._engine is not None:
            with contextlib.suppress(Exception):
                self._engine.remove_listener(self.on_event)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("the recorder's writer did not stop within %.0f s", timeout)
            self._thread = None
        elif self._writer is not None and self.failure is None:
            self._flush()  # never started: commit what attach queued
        if self._writer is not None:
            if self.failure is None and not self._writer.still_there():
                self._vanished()  # also when nothing was committed since
            else:
                self._writer.close()
                self._stored_at_close = self._writer.payload_bytes
                self._writer = None
        self._closed = True
        if self.failure is None:
            self.status = "closed"

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the writer thread ----

    def _run(self) -> None:
        began_cpu = time.thread_time()
        next_commit = time.monotonic() + COMMIT_EVERY_S
        next_compact = time.monotonic() + COMPACT_EVERY_S
        try:
            while True:
                stopping = self._stop.wait(max(0.0, next_commit - time.monotonic()))
                next_commit = time.monotonic() + COMMIT_EVERY_S
                self._flush()
                if stopping or self.failure is not None:
                    break
                if time.monotonic() >= next_compact:
                    next_compact = time.monotonic() + COMPACT_EVERY_S
                    self._compact()
                self._maybe_retain()
                self.writer_cpu_s = time.thread_time() - began_cpu
        finally:
            self.writer_cpu_s = time.thread_time() - began_cpu

    def _flush(self) -> None:
        writer = self._writer
        if writer is None or self.failure is not None:
            self._pending.clear()
            return
        pending = self._pending
        events: list[tuple[int, float, str, Any]] = []
        keyframes: list[tuple[int, float, Any]] = []
        marks: list[tuple[float, str, dict]] = []
        encoder = self._encoder
        try:
            while pending:
                t, item = pending.popleft()
                self._take(t, item, events, keyframes, marks)
            if not (events or keyframes or marks or encoder.new_layouts):
                return
            layouts, encoder.new_layouts = encoder.new_layouts, []
            self.bytes_written += writer.write(layouts=layouts, events=events, keyframes=keyframes, marks=marks)
            if not writer.still_there():
                self._vanished()
                return
            self.events_written += len(events)
            self.commits += 1
            self.last_commit_time = time.time()
        except (sqlite3.Error, OSError, RecordingError) as exc:
            self._fail(exc)
        except Exception as exc:  # noqa: BLE001 - a bug here must not take monitoring down
            log.exception("recorder failed")
            self._fail(exc)

    def _compact(self) -> None:
        if self._writer is None:
            return
        try:
            self._writer.compact()
        except (sqlite3.Error, OSError) as exc:
            self._fail(exc)

    @property
    def stored_bytes(self) -> int:
        """Compressed bytes of what the file holds now (after compaction and retention)."""
        return self._writer.payload_bytes if self._writer is not None else self._stored_at_close

    def _event(self, t: float, record: Any, events: list) -> None:
        self._seq += 1
        cls = type(record)
        events.append((self._seq, t, self._encoder.type_name(cls), self._encoder.encode(record)))

    def _take(self, t: float, item: Any, events: list, keyframes: list, marks: list) -> None:
        kind = type(item)
        if kind is SampleEvent or kind is AgentStepEvent:
            self._event(t, item, events)
        elif kind is ScrapeEvent:
            self._event(item.wall_time, item, events)
            self._check_restart(item, marks)
        elif kind is GpuEvent or kind is ControlEvent:
            self._event(item.wall_time, item, events)
        elif kind is SystemEvent:
            self._event(item.wall_time, item, events)
            self._check_ports(item, marks)
        elif kind is AlertsEvent:
            self._event(item.wall_time, item, events)
            self._check_alerts(item, marks)
        elif kind is SnapshotEvent:
            self._take_snapshot(item.snapshot, events, keyframes)
        elif kind is EndpointInfo:
            self._endpoints[item.config.name] = (item.config, item.model)
            self._event(t, item, events)
        elif kind is _MarkRequest:
            marks.append((t, item.kind, self._plain(item.payload)))
        elif hasattr(item, "wall_time"):  # an event type added later: keep it in the stream
            with contextlib.suppress(TypeError):
                self._event(item.wall_time, item, events)

    def _take_snapshot(self, snap: Snapshot, events: list, keyframes: list) -> None:
        for view in snap.endpoints:
            known = self._endpoints.get(view.name)
            if known is None or known[0] is not view.config and known[0] != view.config or known[1] != view.model:
                self._endpoints[view.name] = (view.config, view.model)
                self._event(snap.wall_time, EndpointInfo(view.config, view.model), events)
        if snap.wall_time >= self._next_keyframe:
            self._next_keyframe = snap.wall_time + KEYFRAME_EVERY_S
            bare = replace(snap, endpoints=tuple(
                replace(v, samples=(), server_history=(), chain=None,  # the chain: rebuilt from its ChainEvents
                        agent=replace(v.agent, samples=()) if v.agent is not None else None)
                for v in snap.endpoints))
            self._encoder.type_name(Snapshot)
            keyframes.append((self._seq, snap.wall_time, self._encoder.encode(bare)))

    def _check_restart(self, event: ScrapeEvent, marks: list) -> None:
        count = event.metrics.restart_count
        before = self._restarts.get(event.endpoint)
        self._restarts[event.endpoint] = count
        if before is not None and count > before:
            marks.append((event.wall_time, "restart", {"endpoint": event.endpoint, "restart_count": count,
                                                         "message": f"{event.endpoint}: the server restarted"}))

    def _check_ports(self, event: SystemEvent, marks: list) -> None:
        for port in event.ports:
            before = self._port_states.get(port.port)
            self._port_states[port.port] = port.status
            if port.status == "restarted" and before not in (None, "restarted"):
                marks.append((event.wall_time, "restart", {"port": port.port, "pid": port.pid,
                                                             "previous_pid": port.previous_pid,
                                                             "message": textsafe.redact(port.detail)}))

    def _check_alerts(self, event: AlertsEvent, marks: list) -> None:
        current = {(a.kind, a.subject, a.severity): a for a in event.alerts}
        for key, alert in current.items():
            if key in self._alerts_seen:
                continue
            payload = {"severity": alert.severity, "alert": alert.kind, "subject": alert.subject,
                       "message": textsafe.redact(alert.message)}
            marks.append((event.wall_time, "alert", payload))
            if alert.severity == "critical":
                marks.append((event.wall_time, "bookmark", {"note": payload["message"], "auto": True}))
        self._alerts_seen = current

    def _plain(self, payload: Mapping[str, Any]) -> dict:
        """A mark's payload as plain JSON with secrets masked."""
        def plain(value: Any) -> Any:
            if isinstance(value, str):
                return textsafe.redact(value)
            if value is None or isinstance(value, (bool, int, float)):
                return value
            if isinstance(value, Mapping):
                return {str(k): plain(v) for k, v in value.items()}
            if isinstance(value, (list, tuple, set, frozenset)):
                return [plain(v) for v in value]
            to_json = getattr(value, "to_json", None)
            if callable(to_json):
                return plain(to_json())
            return textsafe.redact(str(value))

        return plain(dict(payload))

    def _maybe_retain(self) -> None:
        now_m = time.monotonic()
        if now_m - self._last_retention < RETENTION_EVERY_S:
            return
        self._last_retention = now_m
        self.apply_retention()

    def apply_retention(self, now: float | None = None) -> None:
        """Drop what is older than the age limit, then the oldest tenth while over the size limit; then
        older recordings in the directory. Called by the writer thread every minute."""
        writer = self._writer
        if writer is None:
            return
        now = time.time() if now is None else now
        retention = self.retention
        try:
            if retention.retain_s is not None:
                writer.prune_before(now - retention.retain_s)
            if retention.max_bytes is not None:
                for _ in range(10):
                    if writer.size_bytes() <= retention.max_bytes:
                        break
                    cut = writer.oldest_times(0.1)
                    if cut is None or not writer.prune_before(cut):
                        break
            if self._clean_dir is not None and time.monotonic() - self._last_clean >= DIRECTORY_CLEAN_EVERY_S:
                self._last_clean = time.monotonic()
                for path in clean_directory(self._clean_dir, retention, keep=self.path, now=now):
                    log.info("retention: deleted %s", path)
        except sqlite3.Error as exc:
            self._fail(exc)

    def _vanished(self) -> None:
        """The file was deleted (or its directory, or another file put in its place) while recording."""
        self.kept = False
        self._stop_with(f"{self.path} was deleted or replaced while recording; nothing recorded is left there")

    def _fail(self, exc: BaseException) -> None:
        from lpxtop.record.store import _sqlite_problem

        reason = f"{_sqlite_problem(exc)} writing {self.path}"
        if self.last_commit_time is not None:
            reason += f" (kept up to {time.strftime('%H:%M:%S', time.localtime(self.last_commit_time))})"
        else:
            reason += " (nothing was recorded)"
        self._stop_with(reason)

    def _stop_with(self, reason: str) -> None:
        self.failure = reason
        self.status = f"stopped: {reason}"
        self._pending.clear()
        log.warning("recording stopped: %s", reason)
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
            self._writer = None
