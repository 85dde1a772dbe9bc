"""The alerts bar: one line per alert, worst first, coloured by severity; hidden when there are none."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from lpxtop.model.alerts import Alert
from lpxtop.ui.formatting import join_lines
from lpxtop.ui.palette import Palette

SYMBOLS = {"critical": "✖", "warning": "▲", "info": "●"}
RANK = {"info": 0, "warning": 1, "critical": 2}


def render_alerts(alerts: Sequence[Alert], max_lines: int, palette: Palette) -> Text:
    """At most `max_lines` lines; when alerts are left out, the last line says how many."""
    ordered = sorted(alerts, key=lambda a: -RANK.get(a.severity, 0))
    shown = ordered if len(ordered) <= max_lines else ordered[: max(0, max_lines - 1)]
    lines = []
    for alert in shown:
        line = Text(no_wrap=True, overflow="ellipsis")
        style = palette.severity(alert.severity)
        line.append(f"{SYMBOLS.get(alert.severity, '●')} {alert.severity:<8} ", style=style)
        line.append(alert.message)
        lines.append(line)
    if len(shown) < len(ordered):
        lines.append(Text(f"… {len(ordered) - len(shown)} more alerts (lpxtop once --json lists them all)",
                          style=palette.muted))
    return join_lines(lines)


class AlertsBar(Static):
    """Alerts from the snapshot; `display` follows whether there are any."""

    def __init__(self, max_lines: int = 3, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.max_lines = max_lines
        self._key: tuple | None = None

    def show(self, alerts: Sequence[Alert], palette: Palette, *, force: bool = False) -> None:
        key = (tuple(alerts), self.max_lines, id(palette))
        if key == self._key and not force:
            return
        self._key = key
        self.display = bool(alerts)
        if alerts:
            self.update(render_alerts(alerts, self.max_lines, palette))  # the line count may change: relayout
