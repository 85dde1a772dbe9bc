"""The screens' common ground: `LpxtopScreen` (a help page, a redraw in a new theme) and `SnapshotScreen`, the
base of every screen drawn from the source's snapshots (main, load, detail)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.screen import Screen

from lpxtop.ui.screens import already_shown

if TYPE_CHECKING:
    from lpxtop.model.snapshot import Snapshot
    from lpxtop.ui.screens.help import HelpPage


class LpxtopScreen(Screen):
    """A full screen of lpxtop's: `?` shows its `help_page`, and a theme change redraws it (`rerender`)."""

    def help_page(self) -> HelpPage | None:
        """This screen's keys, for `?` (None: no help page)."""
        return None

    def rerender(self, force: bool = False) -> None:
        """Draw again what is shown (after a key changed the view, a resize or a theme change)."""


class SnapshotScreen(LpxtopScreen):
    """A screen drawn from the app's snapshots.

    The app hands each new snapshot to the screen on top (`show_snapshot`, from its poll: lpxtop/ui/app.py);
    the screen keeps it, and draws it (`draw`) once mounted unless it is the one already drawn. Back on top
    (after the detail screen or a dialog), it catches up with what arrived meanwhile. A subclass implements
    `draw` and calls `begin_drawing` at the end of its `on_mount`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._snap: Snapshot | None = None
        self._mounted_once = False  # snapshots handed over before the widgets exist are kept, drawn then

    def draw(self, force: bool) -> None:
        """Draw `self._snap` (never None here); `force` redraws widgets whose input did not change."""
        raise NotImplementedError

    def begin_drawing(self) -> None:
        """The widgets exist: draw the newest snapshot (the app's, else one handed over before now)."""
        newest = self.app.snapshot  # type: ignore[attr-defined]
        snap = newest if newest is not None else self._snap
        self._mounted_once = True
        self._snap = None
        if snap is not None:
            self.show_snapshot(snap)

    def show_snapshot(self, snap: Snapshot) -> None:
        """Draw `snap` unless it is the one already drawn."""
        if already_shown(self._snap, snap):
            return
        self._snap = snap
        if self._mounted_once:
            self.draw(force=False)

    def rerender(self, force: bool = False) -> None:
        if self._snap is not None and self._mounted_once:
            self.draw(force=force)

    def on_screen_resume(self) -> None:
        snap = self.app.snapshot  # type: ignore[attr-defined]
        if snap is not None:
            self.show_snapshot(snap)

    def timeline_moved(self) -> None:
        """A replay key moved the timeline: draw at once (charts too), not at the next refresh."""
        self.rerender(force=True)

    def interrupt(self) -> bool:
        """Ctrl+C: True when this screen handled it (the load screen stops the test); else the app quits."""
        return False
