"""What a reader of snapshots (the UI, exporters) may ask of the engine.

The UI depends on this protocol only, so it can be driven by the live Engine or, in snapshot tests,
by a FixedSource that never changes.
"""

from __future__ import annotations

from typing import Protocol

from lpxtop.model.snapshot import Snapshot


class SnapshotSource(Protocol):
    """The engine as the UI sees it. Every method returns at once; none waits on the network."""

    readonly: bool

    def snapshot(self) -> Snapshot: ...

    def set_paused(self, paused: bool) -> None: ...

    def reset(self) -> None: ...

    def set_interval(self, seconds: float) -> None: ...

    def request_surge(self, on: bool) -> None:
        """Demo only: raise the simulated load (no-op on real endpoints)."""
        ...


class FixedSource:
    """A source that always returns the same snapshot: for snapshot tests and screenshots."""

    def __init__(self, snapshot: Snapshot, readonly: bool = True) -> None:
        self._snapshot = snapshot
        self.readonly = readonly
        self.calls: list[tuple[str, object]] = []  # what the UI asked for, so tests can check keys

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def set_paused(self, paused: bool) -> None:
        self.calls.append(("set_paused", paused))

    def reset(self) -> None:
        self.calls.append(("reset", None))

    def set_interval(self, seconds: float) -> None:
        self.calls.append(("set_interval", seconds))

    def request_surge(self, on: bool) -> None:
        self.calls.append(("request_surge", on))
