"""Keys for a replay's timeline, and `b` (bookmark) for a live recording: a mixin of LpxtopApp's actions.

The app takes a replay's `timeline` (lpxtop/record/replay.py) and a live `recorder`
(lpxtop/record/recorder.py) from what the source and the command line declare (lpxtop/engine/source.py
Capabilities); without them these keys are hidden (replay keys) or answer what to do (`b`). A replay
reads a local file, so after a key the app polls at once.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from textual.binding import Binding

from lpxtop.engine import Recorder, Timeline
from lpxtop.record.timeparse import HELP as TIME_FORMS
from lpxtop.record.timeparse import format_moment
from lpxtop.ui.screens.base import SnapshotScreen

REPLAY_BINDINGS = (
    Binding("space", "replay_play", "play/pause"),
    Binding("left", "replay_step(-10)", "−10s", key_display="←"),
    Binding("right", "replay_step(10)", "+10s", key_display="→"),
    Binding("shift+left", "replay_step(-60)", "−1min", show=False),
    Binding("shift+right", "replay_step(60)", "+1min", show=False),
    Binding("left_square_bracket", "replay_speed(-1)", "slower", key_display="[", show=False),
    Binding("right_square_bracket", "replay_speed(1)", "faster", key_display="]", show=False),
    Binding("n", "replay_mark(1)", "next mark"),
    Binding("N", "replay_mark(-1)", "previous mark", show=False),
    Binding("a", "replay_alert", "next alert", show=False),
    Binding("j", "replay_jump", "jump"),
    Binding("less_than_sign", "replay_edge('start')", "start", key_display="<", show=False),
    Binding("greater_than_sign", "replay_edge('end')", "end", key_display=">", show=False),
    Binding("c", "compare", "compare", show=False),
)


class ReplayActions:
    """Mixed into LpxtopApp, which provides these attributes and Textual's App methods (notify,
    push_screen, screen) besides its own poll()."""

    timeline: Timeline | None  # a replay's clock; None on a live source
    recorder: Recorder | None  # a live recording; None when not recording
    comparison: Any  # lpxtop.record.compare.Comparison, or None
    screen: Any

    if TYPE_CHECKING:
        def poll(self) -> None: ...
        def notify(self, message: str, **kwargs: Any) -> None: ...
        def push_screen(self, screen: Any, callback: Any = None) -> Any: ...

    def _timeline_moved(self, message: str | None = None) -> None:
        self.poll()
        if isinstance(self.screen, SnapshotScreen):
            self.screen.timeline_moved()
        if message:
            self.notify(message, timeout=2)

    def action_replay_play(self) -> None:
        playing = self.timeline.play()
        self._timeline_moved("playing" if playing else "paused")

    def action_replay_step(self, seconds: float) -> None:
        self.timeline.step(float(seconds))
        self._timeline_moved()

    def action_replay_speed(self, direction: int) -> None:
        timeline = self.timeline
        speed = timeline.faster() if int(direction) > 0 else timeline.slower()
        self._timeline_moved(f"speed ×{speed:g}")

    def action_replay_edge(self, edge: str) -> None:
        timeline = self.timeline
        timeline.seek(timeline.start if edge == "start" else timeline.end)
        self._timeline_moved()

    def action_replay_mark(self, direction: int, kinds: tuple[str, ...] | None = None) -> None:
        timeline = self.timeline
        mark = timeline.next_mark(int(direction), kinds)
        if mark is None:
            what = "alert" if kinds == ("alert",) else "alert, restart, load step or bookmark"
            self.notify(f"no {'later' if int(direction) > 0 else 'earlier'} {what} in this recording", timeout=3)
            return
        self._timeline_moved(f"{format_moment(mark.t)}  {mark.label}")

    def action_replay_alert(self) -> None:
        self.action_replay_mark(1, ("alert",))

    def action_replay_jump(self) -> None:
        from lpxtop.ui.screens.prompt import PromptScreen

        timeline = self.timeline

        def done(text: str | None) -> None:
            if not text:
                return
            try:
                timeline.seek_text(text)
            except ValueError as exc:
                self.notify(str(exc), severity="warning", timeout=6)
                return
            self._timeline_moved()

        self.push_screen(
            PromptScreen("Jump to", hint=f"Accepted: {TIME_FORMS}.", value=format_moment(timeline.position())),
            done,
        )

    def action_compare(self) -> None:
        from lpxtop.ui.screens.compare import CompareScreen

        if self.comparison is None:
            return
        if not isinstance(self.screen, CompareScreen):
            self.push_screen(CompareScreen(self.comparison))

    def action_bookmark(self) -> None:
        """`b`: bookmark this moment with a note, in a live recording."""
        if self.timeline is not None:
            self.notify("bookmarks are made while recording; in a replay, n jumps to the next one", timeout=4)
            return
        recorder = self.recorder
        if recorder is None:
            self.notify("not recording: start lpxtop with --record (or record = true in the config) to "
                        "bookmark moments", severity="warning", timeout=5)
            return
        if not recorder.recording:
            self.notify(f"cannot bookmark: {recorder.status_line()}", severity="warning", timeout=5)
            return
        from lpxtop.ui.screens.prompt import PromptScreen

        at = time.time()

        def done(note: str | None) -> None:
            if note is None:
                return
            recorder.bookmark(note, wall_time=at)
            self.notify(f"bookmarked {format_moment(at)}{': ' + note if note else ''}", timeout=3)

        self.push_screen(PromptScreen(f"Bookmark {format_moment(at)}", hint="A note for this moment (may be empty). "
                                      "`lpxtop replay FILE`, then n, finds it again.", placeholder="what happened?"),
                         done)
