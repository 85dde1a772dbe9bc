"""A load run as the dashboard sees it: the live Engine's snapshot with the load test's state in it.

The engine keeps scraping the server's /metrics, reading the GPU, the host and the ports (its own probes
are off during a load test: the load's requests are the measurement); the load controller adds the steps.
`snapshot()` is two attribute reads, and builds a new Snapshot only when either side published a new one,
so the UI's "same object, nothing to do" check keeps working.
"""

from __future__ import annotations

import threading
from dataclasses import replace

from lpxtop.engine import Capabilities, LoadTest
from lpxtop.model.snapshot import Snapshot


class LoadSource:
    """SnapshotSource over an Engine (or any source) and a LoadController. It declares the load test (the
    dashboard opens the load screen, whose q stops it) and no controls: a load test runs no probes to
    pause, reset or pace."""

    def __init__(self, engine, controller, *, report_files: tuple[str, ...] = ()) -> None:
        self.engine = engine
        self.controller = controller
        self.capabilities = Capabilities(
            load=LoadTest(stop=controller.stop, report_files=report_files),
            readonly=engine.capabilities.readonly,
        )
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
