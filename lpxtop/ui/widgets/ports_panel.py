"""Ports and processes: who holds each endpoint's port, and leftover server processes.

Rows are selectable; the selected row's PID is what `T` (SIGTERM) and `K` (SIGKILL) act on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from lpxtop.model.ports import LeftoverProcess, PortStatus
from lpxtop.ui.formatting import UNKNOWN
from lpxtop.ui.palette import Palette
from lpxtop.ui.widgets.row_table import COLUMN_PADDING, RowTable, TableCell, TableColumn

STATE_LEVEL = {"ok": "ok", "down": "critical", "conflict": "critical", "leftover": "warning"}


@dataclass(frozen=True)
class ProcessRow:
    """One row: a port's listener or a leftover process."""

    key: str
    port: str
    state: str
    pid: int | None
    user: str | None
    command: str
    detail: str


def rows_from(ports: Sequence[PortStatus], leftovers: Sequence[LeftoverProcess]) -> list[ProcessRow]:
    """Ports first (in the engine's order), then leftovers."""
    rows = [
        ProcessRow(
            key=f"port:{p.port}",
            port=str(p.port),
            state=p.status,
            pid=p.pid,
            user=getattr(p, "user", None),
            command=p.cmdline or p.process or (p.endpoint or ""),
            detail=p.detail,
        )
        for p in ports
    ]
    rows.extend(
        ProcessRow(
            key=f"pid:{lp.pid}",
            port="-",
            state="zombie" if getattr(lp, "zombie", False) else "leftover",
            pid=lp.pid,
            user=lp.user,
            command=lp.cmdline or lp.name,
            detail=lp.reason,
        )
        for lp in leftovers
    )
    return rows


COLUMNS = (("port", "Port", 5), ("state", "State", 8), ("pid", "PID", 7), ("command", "Command", 0))
SHORT_STATES = {"model_mismatch": "model≠", "unknown_owner": "unknown", "restarted": "restart"}


class PortsPanel(Vertical):
    """A table of ports and leftovers, and the selected row's full explanation under it."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._rows: list[ProcessRow] = []
        self._key: tuple | None = None
        self._detail: Text | None = None

    def compose(self) -> ComposeResult:
        yield RowTable(id="ports-table")
        yield Static("", id="ports-detail")

    @property
    def table(self) -> RowTable:
        return self.query_one("#ports-table", RowTable)

    @property
    def selected(self) -> ProcessRow | None:
        """The row under the cursor, if any."""
        row = self.table.cursor_row
        return self._rows[row] if self._rows and 0 <= row < len(self._rows) else None

    def show(self, ports: Sequence[PortStatus], leftovers: Sequence[LeftoverProcess], palette: Palette,
             *, force: bool = False) -> None:
        """Rebuild the rows when ports, leftovers, width or theme changed (a handful of rows: cheap)."""
        width = self.content_size.width or 38
        rows = rows_from(ports, leftovers)
        # What the table shows: a listener's CPU, memory or age changes every scan, and only the detail
        # line under the table shows them, so only the detail line is redrawn for those.
        key = (tuple((r.key, r.port, r.state, r.pid, r.command) for r in rows), width, id(palette))
        if key == self._key and not force:
            self._rows = rows
            self._show_detail(palette)
            return
        self._key = key
        # Leave room for the command's padding and a vertical scrollbar, so no horizontal one appears.
        command_width = max(8, width - sum(w + COLUMN_PADDING for _, _, w in COLUMNS[:-1]) - COLUMN_PADDING - 2)
        self.table.set_table(
            [TableColumn(key_, label, w or command_width) for key_, label, w in COLUMNS],
            [
                (
                    r.key,
                    (
                        TableCell(r.port, right=True),
                        TableCell(SHORT_STATES.get(r.state, r.state), palette.for_level(STATE_LEVEL.get(r.state, "warning"))),
                        TableCell(str(r.pid) if r.pid is not None else UNKNOWN, right=True),
                        TableCell(r.command or UNKNOWN),
                    ),
                )
                for r in rows
            ],
        )
        self._rows = rows
        self._show_detail(palette)

    def _show_detail(self, palette: Palette) -> None:
        row = self.selected
        if row is None:
            text = Text("no ports or leftover processes to show", style=palette.muted)
        else:
            text = Text()
            if row.user:
                text.append(f"{row.user} ", style=palette.muted)
            text.append(row.detail)
        if text != self._detail:
            # A new layout (which redraws every panel beside this one) only when the line count changed:
            # an age or CPU figure changing in the same lines is a repaint of this line alone.
            detail = self.query_one("#ports-detail", Static)
            width = detail.content_size.width
            relayout = self._detail is None or width <= 0 or _rows_needed(text, width) != _rows_needed(self._detail, width)
            self._detail = text
            detail.update(text, layout=relayout)

    def on_row_table_row_highlighted(self, event: RowTable.RowHighlighted) -> None:
        event.stop()
        palette = getattr(self.app, "palette", None)
        if palette is not None:
            self._show_detail(palette)


def _rows_needed(text: Text, width: int) -> int:
    """The lines `text` takes when wrapped at `width` cells."""
    return sum(max(1, -(-cell_len(line) // width)) for line in text.plain.split("\n"))
