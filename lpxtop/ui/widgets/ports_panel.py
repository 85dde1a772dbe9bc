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

from lpxtop.engine.system import display_command, short_command
from lpxtop.humanize import UNKNOWN
from lpxtop.model.ports import LeftoverProcess, PortStatus
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


def _group_ok(ports: Sequence[PortStatus]) -> list[list[PortStatus]]:
    """Ports in the engine's order, those that one process holds without trouble ("ok") as one group."""
    groups: list[list[PortStatus]] = []
    by_pid: dict[int, list[PortStatus]] = {}
    for p in ports:
        if p.status == "ok" and p.pid is not None:
            if p.pid in by_pid:
                by_pid[p.pid].append(p)
                continue
            by_pid[p.pid] = [p]
            groups.append(by_pid[p.pid])
        else:
            groups.append([p])
    return groups


def _group_detail(group: Sequence[PortStatus]) -> str:
    """The port's explanation; for a process serving several endpoints, all of them with their ports."""
    first = group[0]
    if len(group) == 1:
        return first.detail
    served = ", ".join(f"{p.endpoint or '?'} :{p.port}" for p in group)
    what = short_command(first.cmdline or first.process or "?", 60)
    return f"PID {first.pid} ({what}) serves {len(group)} endpoints: {served}"


def rows_from(ports: Sequence[PortStatus], leftovers: Sequence[LeftoverProcess]) -> list[ProcessRow]:
    """Ports first (in the engine's order; a process serving several endpoints once, `8000+2`), then
    leftovers. The command is what runs (`display_command`), not the interpreter's path."""
    rows = [
        ProcessRow(
            key=f"port:{group[0].port}",
            port=str(group[0].port) + (f"+{len(group) - 1}" if len(group) > 1 else ""),
            state=group[0].status,
            pid=group[0].pid,
            user=getattr(group[0], "user", None),
            command=display_command(group[0].cmdline or "") or group[0].process or (group[0].endpoint or ""),
            detail=_group_detail(group),
        )
        for group in _group_ok(ports)
    ]
    rows.extend(
        ProcessRow(
            key=f"pid:{lp.pid}",
            port="-",
            state="zombie" if getattr(lp, "zombie", False) else "leftover",
            pid=lp.pid,
            user=lp.user,
            command=display_command(lp.cmdline) or lp.name,
            detail=lp.reason,
        )
        for lp in leftovers
    )
    return rows


COLUMNS = (("port", "Port", 4), ("state", "State", 5), ("pid", "PID", 3), ("command", "Command", 0))
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
        key = (tuple((r.key, r.port, r.state, r.pid, r.command) for r in rows), width, self.table.size.height,
               id(palette))
        if key == self._key and not force:
            self._rows = rows
            self._show_detail(palette)
            return
        self._key = key
        # Columns as wide as what they hold (a grouped port `8000+2`, a 7-digit PID), the rest for the
        # command; leave room for the command's padding and a vertical scrollbar, so no horizontal one appears.
        widths = {key_: w for key_, _, w in COLUMNS}
        widths["port"] = max([widths["port"], *(len(r.port) for r in rows)])
        widths["state"] = max([widths["state"], *(len(SHORT_STATES.get(r.state, r.state)) for r in rows)])
        widths["pid"] = max([widths["pid"], *(len(str(r.pid)) for r in rows if r.pid is not None)])
        height = self.table.size.height
        scrollbar = 2 if not height or len(rows) + 1 > height else 0
        command_width = max(8, width - sum(widths[k] + COLUMN_PADDING for k, _, _ in COLUMNS[:-1]) - COLUMN_PADDING
                            - scrollbar)
        self.table.set_table(
            [TableColumn(key_, label, widths[key_] or command_width) for key_, label, _ in COLUMNS],
            [
                (
                    r.key,
                    (
                        TableCell(r.port, right=True),
                        TableCell(SHORT_STATES.get(r.state, r.state), palette.for_level(STATE_LEVEL.get(r.state, "warning"))),
                        TableCell(str(r.pid) if r.pid is not None else UNKNOWN, right=True),
                        TableCell(_fit_command(r.command, command_width) or UNKNOWN),
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


def _fit_command(command: str, width: int) -> str:
    """A narrow column (an 80-column terminal) names the module a `python -m` runs, without the prefix:
    `vllm.entrypoints…` says more in 9 cells than `python -…`."""
    if width < 24 and command.startswith("python -m "):
        return command.removeprefix("python -m ")
    return command


def _rows_needed(text: Text, width: int) -> int:
    """The lines `text` takes when wrapped at `width` cells."""
    return sum(max(1, -(-cell_len(line) // width)) for line in text.plain.split("\n"))
