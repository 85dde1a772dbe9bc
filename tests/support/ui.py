"""Helpers shared by the UI tests: a recording source, an app factory, an isolated environment.

No tests here.
"""

from __future__ import annotations

import io
from dataclasses import replace

from lpxtop.engine.source import Capabilities, FixedSource
from lpxtop.model.snapshot import Snapshot
from lpxtop.ui.app import LpxtopApp, create_app
from tests.support.snapshot_data import fixed_snapshot


class SwitchableSource(FixedSource):
    """A FixedSource whose snapshot a test can replace, as the engine publishes new ones."""

    def __init__(self, snapshot: Snapshot, readonly: bool = False, capabilities: Capabilities | None = None) -> None:
        super().__init__(snapshot, readonly=readonly, capabilities=capabilities)
        self.reads = 0

    def snapshot(self) -> Snapshot:
        self.reads += 1
        return self._snapshot

    def publish(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot


def make_app(snapshot: Snapshot | None = None, *, readonly: bool = False, demo: bool = False,
             **kwargs) -> tuple[SwitchableSource, LpxtopApp]:
    """An app over a fixed snapshot with the poll timer off (tests call app.poll() themselves); with `demo`,
    the demo's surge switch records into the source's `calls` as ("surge", on)."""
    source = SwitchableSource(snapshot or fixed_snapshot(), readonly=readonly)
    kwargs.setdefault("ssh", False)
    if demo:
        kwargs["demo"] = lambda on: source.calls.append(("surge", on))
    return source, create_app(source, poll=False, readonly=readonly, **kwargs)


def bump(snapshot: Snapshot, **changes) -> Snapshot:
    """The same snapshot published again with changes and the next seq."""
    return replace(snapshot, seq=snapshot.seq + 1, **changes)


def text_of(widget) -> str:
    """The plain text a Static was last given (a table rendered 200 columns wide)."""
    content = widget.content
    if hasattr(content, "plain"):
        return content.plain
    if isinstance(content, str):
        return content
    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO(), color_system=None)
    console.print(content)
    return console.export_text()


def screen_lines(app) -> list[str]:
    """What the terminal shows now, line by line (the screen on top, composited)."""
    return [strip.text for strip in app.screen._compositor.render_strips()]
