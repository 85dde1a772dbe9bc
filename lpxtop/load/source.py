"""A load run as the dashboard sees it: the live Engine's snapshot with the load test's state in it.

The engine keeps scraping the server's /metrics, reading the GPU, the host and the ports (its own probes
are off during a load test: the load's requests are the measurement); the load controller adds the steps.
`snapshot()` is two attribute reads, and builds a new Snapshot only when either side published a new one,
so the UI's "same object, nothing to do" check keeps working.
"""

from __future__ import annotations

import threading
from dataclasses import replace

from lpxtop.model.snapshot import Snapshot


class LoadSource:
    """SnapshotSource over an Engine (or any source) and a LoadController."""

    load_run = True  # the app opens the load screen for a source that says so
    report_files: tuple[str, ...] = ()  # where the report is written when the test ends: its "done" line says

    def __init__(self, engine, controller) -> None:
        self.engine = engine
        self.controller = controller
        self.readonly = bool(getattr(engine, "readonly", True))
        self.is_demo = False
        self._lock = threading.Lock()
        self._key: tuple[int, int] | None = None
        self._snapshot: Snapshot | None = None

    def snapshot(self) -> Snapshot:
        base = self.engine.snapshot()
        load = self.controller.state()
        key = (id(base), load.seq)
        with self._lock:
            if self._snapshot is not None and key == self._key:
                return self._snapshot
            # seq grows when either side publishes: readers that compare seq see every change
            snap = replace(base, load=load, seq=base.seq + load.seq)
            self._key, self._snapshot = key, snap
            return snap

    @property
    def recorder(self):
        """The run's recorder (lpxtop/load/recording.py), for the dashboard's `b`; None with --no-record."""
        return getattr(self.engine, "recorder", None)

    def stop_load(self) -> None:
        """`q` / Ctrl-C in the dashboard: stop the test at once (the report of finished steps is kept)."""
        self.controller.stop()

    def set_paused(self, paused: bool) -> None:
        self.engine.set_paused(paused)  # pauses the scrapes; the load test runs on

    def reset(self) -> None:
        self.engine.reset()

    def set_interval(self, seconds: float) -> None:
        self.engine.set_interval(seconds)

    def request_surge(self, on: bool) -> None:
        pass
