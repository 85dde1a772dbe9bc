"""The alerts bar: the worst alerts first, each wrapped whole under its severity, coloured by severity;
hidden when there are none. An alert is never cut: one that does not fit the bar's lines is counted in
its last line instead."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import Static

from lpxtop.model.alerts import Alert
from lpxtop.ui.palette import Palette

SYMBOLS = {"critical": "✖", "warning": "▲", "info": "●"}
RANK = {"info": 0, "warning": 1, "critical": 2}
LABEL = 11  # "✖ critical "


def _wrapped(message: str, width: int) -> list[str]:
    """`message` in lines of at most `width` cells (a word longer than that is broken)."""
    lines = textwrap.wrap(" ".join(message.split()), max(10, width), break_on_hyphens=False) or [""]
    # textwrap counts characters; a wide character (CJK) takes two cells: fold those lines again
    out: list[str] = []
    for line in lines:
        while cell_len(line) > width > 0:
            cut = width
            while cut > 1 and cell_len(line[:cut]) > width:
                cut -= 1
            out.append(line[:cut])
            line = line[cut:]
        out.append(line)
    return out


def render_alerts(alerts: Sequence[Alert], max_lines: int, palette: Palette, width: int = 200) -> Text:
    """The alerts that fit in `max_lines` lines `width` cells wide, each whole (the worst one always,
    however many lines it takes); when alerts are left out, the last line says how many."""
    ordered = sorted(alerts, key=lambda a: -RANK.get(a.severity, 0))
    blocks: list[Text] = []
    used = 0
    for i, alert in enumerate(ordered):
        lines = _wrapped(alert.message, width - LABEL)
        rest = len(ordered) - i - 1
        budget = max_lines - used - (1 if rest else 0)  # keep a line for "… N more"
        if blocks and len(lines) > budget:
            break
        style = palette.severity(alert.severity)
        block = Text()
        block.append(f"{SYMBOLS.get(alert.severity, '●')} {alert.severity:<8} ", style=style)
        block.append(("\n" + " " * LABEL).join(lines))
        blocks.append(block)
        used += len(lines)
    if len(blocks) < len(ordered):
        more = len(ordered) - len(blocks)
        last_line = blocks[-1].plain.rsplit("\n", 1)[-1]
        short = f"  (+{more} more)"
        if cell_len(last_line) + len(short) <= width and used >= max_lines - 1:  # no line to spare: say it there
            blocks[-1].append(short, style=palette.muted)
        else:
            blocks.append(Text(f"… {more} more alert{'s' if more != 1 else ''} (lpxtop once --json lists them all)",
                               style=palette.muted))
    text = Text("\n").join(blocks)
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text


class AlertsBar(Static):
    """Alerts from the snapshot; `display` follows whether there are any."""

    def __init__(self, max_lines: int = 3, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.max_lines = max_lines
        self._key: tuple | None = None

    def show(self, alerts: Sequence[Alert], palette: Palette, *, force: bool = False) -> None:
        width = (self.content_size.width or self.app.size.width - 2) if alerts else 0
        key = (tuple(alerts), self.max_lines, id(palette), width)
        if key == self._key and not force:
            return
        self._key = key
        self.display = bool(alerts)
        if alerts:
            self.update(render_alerts(alerts, self.max_lines, palette, width))  # the line count may change: relayout
