"""The replay's time bar: where in the recording the screen stands, play state and speed, and the marks.

Two lines:

    ▶ ×2  14:05:12  +1:52 of 10:00   3 alerts · 1 bookmark · 2 load steps      recording.lpxrec
    ├━━━━━━━━━!━━━━━━━━━━━●─────────◆──────|───────────────────────────────────────────────────┤

`!` an alert began, `↻` a restart, `|` a load step, `‖` a load test's start or end, `◆` a bookmark. Drawn from a `TimelineState`
(lpxtop/record/replay.py), which the UI reads from the source's optional `timeline`.
"""

from __future__ import annotations

from collections import Counter

from rich.text import Text
from textual.widgets import Static

from lpxtop.ui.palette import Palette

MARK_SYMBOLS = {"alert": "!", "restart": "↻", "load_step": "|", "load": "‖", "bookmark": "◆"}
PLURAL = {"alert": "alerts", "restart": "restarts", "load_step": "load steps", "load": "load start/end",
          "bookmark": "bookmarks"}


def fmt_offset(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def fmt_speed(speed: float) -> str:
    return f"×{speed:g}"


def render_timebar(state, width: int, palette: Palette, clock) -> Text:
    """Both lines for a `TimelineState`; `clock(t)` formats a Unix time (local time of day)."""
    width = max(20, width)
    span = max(0.0, state.end - state.start)
    offset = state.position - state.start
    line = Text(no_wrap=True, overflow="ellipsis")
    if state.at_end and not state.playing:
        line.append("■ end ", style=palette.muted)
    elif state.playing:
        line.append("▶ ", style=palette.ok)
    else:
        line.append("⏸ ", style=palette.warning)
    line.append(f"{fmt_speed(state.speed)}  ", style=palette.muted)
    line.append(clock(state.position), style="bold")
    line.append(f"  +{fmt_offset(offset)} of {fmt_offset(span)}", style=palette.muted)
    counts = Counter(m.kind for m in state.marks)
    if counts:
        parts = [f"{n} {PLURAL.get(kind, kind) if n != 1 else kind.replace('_', ' ')}" for kind, n in sorted(counts.items())]
        line.append("   " + " · ".join(parts), style=palette.muted)
    if state.damage:
        line.append(f"   ⚠ {state.damage}", style=palette.warning)
    name = f"  REPLAY {state.name}"
    room = width - line.cell_len
    if room > len(name):
        line.append(" " * (room - len(name)))
        line.append(name, style=palette.accent)
    bar_width = width - 2
    cells = ["─"] * bar_width
    styles: list = [palette.muted] * bar_width
    here = _cell(state.position, state, bar_width)
    for i in range(here):
        cells[i] = "━"
        styles[i] = palette.accent
    order = {"load": 0, "load_step": 0, "restart": 1, "bookmark": 2, "alert": 3}  # the most urgent drawn last
    for mark in sorted(state.marks, key=lambda m: order.get(m.kind, 0)):
        i = _cell(mark.t, state, bar_width)
        cells[i] = MARK_SYMBOLS.get(mark.kind, "•")
        severity = mark.payload.get("severity") if mark.kind == "alert" else None
        styles[i] = (palette.severity(severity) if severity else
                     palette.warning if mark.kind in ("bookmark", "restart") else palette.accent)
    cells[min(here, bar_width - 1)] = "●"
    styles[min(here, bar_width - 1)] = "bold"
    bar = Text(no_wrap=True)
    bar.append("├", style=palette.muted)
    for ch, style in zip(cells, styles):
        bar.append(ch, style=style)
    bar.append("┤", style=palette.muted)
    return Text("\n").join([line, bar])


def _cell(t: float, state, width: int) -> int:
    span = state.end - state.start
    if span <= 0:
        return width - 1
    return min(width - 1, max(0, int((t - state.start) / span * (width - 1) + 0.5)))


class TimeBar(Static):
    """Redraws only when what it would show changes."""

    DEFAULT_CSS = """
    TimeBar {
        dock: bottom;
        height: 2;
        padding: 0 1;
        margin: 0 0 1 0;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self._last: tuple | None = None

    def show(self, state, palette: Palette, clock, force: bool = False) -> None:
        width = max(20, self.size.width - 2)
        key = (state, width, id(palette))
        if key == self._last and not force:
            return
        self._last = key
        self.update(render_timebar(state, width, palette, clock), layout=False)
