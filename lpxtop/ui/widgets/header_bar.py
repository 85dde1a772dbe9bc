"""The one-line header: version, host, uptime, probe interval and paused state.

Everything is computed from the snapshot (uptime = wall_time - started_at), never from the clock,
so a screen rendered from a fixed snapshot is always the same.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from lpxtop.humanize import fmt_duration
from lpxtop.model.snapshot import Snapshot
from lpxtop.ui.palette import Palette


def fmt_interval(seconds: float) -> str:
    return f"{seconds:.2f}s" if seconds < 1 else f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"


def render_header(snap: Snapshot, *, paused: bool, interval_s: float, demo: bool, readonly: bool,
                  palette: Palette, replay: bool = False, recording: str | None = None,
                  interval_label: str = "probe") -> Text:
    """The header line; the most important facts first so a narrow terminal cuts the least useful.

    `replay`: the snapshot comes from a recording. `recording`: "on" or "stopped" while lpxtop records.
    `interval_label` names what `interval_s` times: the probes, or the fleet view's queries ("refresh").
    """
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f" lpxtop {snap.version} ", style="bold")
    if replay:
        text.append("REPLAY ", style=palette.accent)
    if recording == "on":
        text.append("● REC ", style=palette.critical)
    elif recording is not None:
        text.append("REC stopped ", style=palette.warning)
    if paused:
        text.append("⏸ PAUSED ", style=palette.warning)
    if demo:
        text.append("DEMO ", style=palette.warning)
    text.append("│ ", style=palette.muted)
    text.append(snap.host_name)
    text.append(" │ up ", style=palette.muted)
    text.append(fmt_duration(snap.wall_time - snap.started_at))
    text.append(f" │ {interval_label} ", style=palette.muted)
    text.append(fmt_interval(interval_s))
    text.append(" │ endpoints", style=palette.muted)
    for status, symbol in (("up", "●"), ("degraded", "◐"), ("down", "✖"), ("pending", "…")):
        count = sum(1 for view in snap.endpoints if view.status == status)
        if count:
            text.append(f" {symbol}{count}", style=palette.status(status))
    if not snap.endpoints:
        text.append(" none", style=palette.muted)
    if readonly:
        text.append(" │ read-only", style=palette.muted)
    return text


class HeaderBar(Static):
    """Redraws only when the text it would show changes."""

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self._last: Text | None = None

    def show(self, text: Text) -> None:
        if self._last is not None and text.plain == self._last.plain and text.spans == self._last.spans:
            return
        self._last = text
        self.update(text, layout=False)  # always one line
