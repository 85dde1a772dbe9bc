"""Helpers shared by the UI tests: a recording source, an app factory, an isolated environment.

No tests here.
"""

from __future__ import annotations

from dataclasses import replace

from lpxtop.engine.source import FixedSource
from lpxtop.model.snapshot import Snapshot
from lpxtop.ui.app import LpxtopApp, create_app
from tests.snapshot_data import fixed_snapshot


class SwitchableSource(FixedSource):
    """A FixedSource whose snapshot a test can replace, as the engine publishes new ones."""

    def __init__(self, snapshot: Snapshot, readonly: bool = False, is_demo: bool = False) -> None:
        super().__init__(snapshot, readonly=readonly)
        self.is_demo = is_demo
        self.reads = 0

    def snapshot(self) -> Snapshot:
        self.reads += 1
        return self._snapshot

    def publish(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot


def make_app(snapshot: Snapshot | None = None, *, readonly: bool = False, demo: bool = False,
             **kwargs) -> tuple[SwitchableSource, LpxtopApp]:
    """An app over a fixed snapshot with the poll timer off (tests call app.poll() themselves)."""
    source = SwitchableSource(snapshot or fixed_snapshot(), readonly=readonly, is_demo=demo)
    kwargs.setdefault("ssh", False)
    return source, create_app(source, poll=False, readonly=readonly, **kwargs)


def bump(snapshot: Snapshot, **changes) -> Snapshot:
    """The same snapshot published again with changes and the next seq."""
    return replace(snapshot, seq=snapshot.seq + 1, **changes)


def text_of(widget) -> str:
    """The plain text a Static was last given."""
    content = widget.content
    return content.plain if hasattr(content, "plain") else str(content)
