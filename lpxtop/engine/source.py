"""What a reader of snapshots (the UI) may ask of a source: the newest `snapshot()`, and `capabilities`, a
record of what else the source can do. The UI reads these two and nothing else of a source.

The sources: the live Engine (lpxtop/engine/runner.py: its controls), a replay (lpxtop/record/replay.py:
a timeline), a load run (lpxtop/load/source.py: the load test), the fleet view (lpxtop/fleet/source.py:
no controls, and why), and `FixedSource` below (snapshot tests and screenshots). What the command line
attaches beside a source (a live recorder, the demo's load surge) it hands to `create_app`
(lpxtop/ui/app.py), which adds it to what the source declared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from lpxtop.model.snapshot import Snapshot


class Controls(Protocol):
    """Steering a live measurement: p pauses it, r resets the statistics, + / - change the probe interval.
    Every call returns at once; none waits on the network."""

    def set_paused(self, paused: bool) -> None: ...

    def reset(self) -> None: ...

    def set_interval(self, seconds: float) -> None: ...


class Timeline(Protocol):
    """A recording's clock, which the replay keys move and the time bar shows (lpxtop/record/replay.py).
    Times are Unix seconds."""

    @property
    def start(self) -> float: ...

    @property
    def end(self) -> float: ...

    def position(self) -> float: ...

    def play(self, on: bool | None = None) -> bool: ...

    def step(self, seconds: float) -> float: ...

    def seek(self, t: float) -> float: ...

    def seek_text(self, text: str) -> float: ...

    def faster(self) -> float: ...

    def slower(self) -> float: ...

    def next_mark(self, direction: int = 1, kinds: Iterable[str] | None = None) -> Any: ...

    def state(self) -> Any: ...


class Recorder(Protocol):
    """A live recording (lpxtop/record/recorder.py): REC in the header, `b` bookmarks a moment."""

    @property
    def recording(self) -> bool: ...

    @property
    def path(self) -> Any: ...

    def status_line(self) -> str: ...

    def bookmark(self, note: str, wall_time: float | None = None) -> None: ...


@dataclass(frozen=True)
class LoadTest:
    """A load test under way (`lpxtop load`): the dashboard opens the load screen, whose q and Ctrl-C call
    `stop`; its last line names the report files written when the test ends."""

    stop: Callable[[], None]
    report_files: tuple[str, ...] = ()


NO_REFUSALS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class Capabilities:
    """What a source can do besides `snapshot()`; each optional part is None when the source cannot.

    controls: p, r, + / - (the live engine).
    timeline: a replay's clock; the replay keys and the time bar show only with one.
    recorder: a live recording (added by `create_app(recorder=...)`: the command line attaches it).
    load: a load test; the dashboard opens the load screen instead of the main one.
    readonly: process actions (T/K) are refused.
    refusals: why a key does nothing here, by action ("pause", "reset", "interval", "signal"), said
        when it is pressed (the fleet view has no probing to steer, and its processes are elsewhere).
    warming_up: True until the first figures are in; the app reads snapshots often meanwhile.
    default_sort: the endpoints table's first sort (a key of lpxtop/ui/widgets/endpoints_table.py
        SORT_KEYS), when not by name; interval_label: what the header's interval times; empty_message:
        what the endpoints panel says with no endpoint (None: the dashboard's own words).
    """

    controls: Controls | None = None
    timeline: Timeline | None = None
    recorder: Recorder | None = None
    load: LoadTest | None = None
    readonly: bool = True
    refusals: Mapping[str, str] = field(default_factory=lambda: NO_REFUSALS)
    warming_up: Callable[[], bool] | None = None
    default_sort: str | None = None
    interval_label: str = "probe"
    empty_message: str | None = None


class SnapshotSource(Protocol):
    """A source as the UI sees it. `snapshot()` returns at once; it never waits on the network."""

    @property
    def capabilities(self) -> Capabilities: ...

    def snapshot(self) -> Snapshot: ...


class FixedSource:
    """A source that always returns the same snapshot: for snapshot tests and screenshots. Its controls
    record what the UI asked for (`calls`), so tests can check keys; `capabilities` replaces what it
    declares (the default: these controls, and `readonly`)."""

    def __init__(self, snapshot: Snapshot, readonly: bool = True, capabilities: Capabilities | None = None) -> None:
        self._snapshot = snapshot
        self.calls: list[tuple[str, object]] = []
        self.capabilities = capabilities or Capabilities(controls=self, readonly=readonly)

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def set_paused(self, paused: bool) -> None:
        self.calls.append(("set_paused", paused))

    def reset(self) -> None:
        self.calls.append(("reset", None))

    def set_interval(self, seconds: float) -> None:
        self.calls.append(("set_interval", seconds))
