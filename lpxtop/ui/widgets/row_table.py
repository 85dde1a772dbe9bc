"""A light table with a row cursor: one `Strip` per row, rebuilt only when that row's cells change.

Textual's DataTable renders every cell through a Rich console, and any `update_cell` invalidates all
of its caches, so a table whose figures change every second is rendered whole every second. That was
half of the dashboard's CPU. Here a row is drawn straight into segments (a few per cell, no console),
kept until one of its cells changes, and only the lines of changed rows are refreshed.

What the dashboard needs from a table and nothing more: a fixed header line, a row cursor that follows
keys (up/down, page up/down, home/end) and the mouse (a click moves it, a click on the cursor's row
selects it), `RowHighlighted` and `RowSelected` messages, vertical scrolling for long lists and the
DataTable-like helpers that tests and panels use (`cursor_row`, `move_cursor`, `get_cell`...).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

PADDING = 1  # cells of padding each side of a column, as DataTable's default cell_padding
COLUMN_PADDING = 2 * PADDING  # what a column takes beyond its width


@dataclass(frozen=True)
class TableColumn:
    """A column: its key, header label (left-aligned) and width in cells, padding not included."""

    key: str
    label: str
    width: int


@dataclass(frozen=True)
class TableCell:
    """What a cell shows: text (cut to the column's width with an ellipsis) and an optional style."""

    text: str
    style: Style | None = None
    right: bool = False  # aligned on the right (figures) rather than the left


def fit(text: str, width: int, right: bool) -> str:
    """`text` on one line in exactly `width` cells: cut with an ellipsis, padded on the left or right."""
    if "\n" in text:
        text = " ".join(text.split())
    length = cell_len(text)
    if length > width:
        text = set_cell_size(text, max(0, width - 1)) + "…" if width > 0 else ""
        length = cell_len(text)
    if length < width:
        return " " * (width - length) + text if right else text + " " * (width - length)
    return text


class RowTable(ScrollView, can_focus=True):
    """Rows of cells under a header line, with a row cursor; redraws only the rows that changed."""

    COMPONENT_CLASSES = {"row-table--header", "row-table--cursor"}

    DEFAULT_CSS = """
    RowTable {
        background: $surface;
        color: $foreground;
        height: auto;
        max-height: 100%;
        &:focus {
            background-tint: $foreground 5%;
            & > .row-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
        }
        & > .row-table--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        & > .row-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
    }
    """

    BINDINGS = [
        Binding("enter", "select_cursor", "select", show=False),
        Binding("up", "cursor_up", "up", show=False),
        Binding("down", "cursor_down", "down", show=False),
        Binding("pageup", "page_up", "page up", show=False),
        Binding("pagedown", "page_down", "page down", show=False),
        Binding("home", "cursor_home", "first", show=False),
        Binding("end", "cursor_end", "last", show=False),
    ]

    class RowHighlighted(Message):
        """The cursor moved to another row (or the rows under it changed)."""

        def __init__(self, table: RowTable, cursor_row: int, row_key: str | None) -> None:
            super().__init__()
            self.table = table
            self.cursor_row = cursor_row
            self.row_key = row_key

        @property
        def control(self) -> RowTable:
            return self.table

    class RowSelected(RowHighlighted):
        """Enter on a row, or a click on the row under the cursor."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._columns: tuple[TableColumn, ...] = ()
        self._keys: list[str] = []
        self._rows: list[tuple[TableCell, ...]] = []
        self._cursor = 0
        # row key -> (what the strip was drawn from, the strip); the cursor's row is drawn apart.
        self._strips: dict[str, tuple[tuple, Strip]] = {}
        self._header: tuple[tuple, Strip] | None = None

    # What the panels and the tests use (named as DataTable names them)

    @property
    def columns(self) -> tuple[TableColumn, ...]:
        return self._columns

    @property
    def row_keys(self) -> list[str]:
        return list(self._keys)

    @property
    def row_count(self) -> int:
        return len(self._keys)

    @property
    def cursor_row(self) -> int:
        return self._cursor if self._keys else -1

    @property
    def cursor_key(self) -> str | None:
        return self._keys[self._cursor] if self._keys else None

    def get_row_index(self, key: str) -> int:
        return self._keys.index(key)

    def get_row_at(self, index: int) -> list[str]:
        """The texts of a row's cells."""
        return [c.text for c in self._rows[index]]

    def get_cell(self, row_key: str, column_key: str) -> str:
        """The text of one cell."""
        index = [c.key for c in self._columns].index(column_key)
        return self._rows[self._keys.index(row_key)][index].text

    # Content

    def set_table(self, columns: Sequence[TableColumn], rows: Sequence[tuple[str, Sequence[TableCell]]]) -> None:
        """Show `rows` (key, cells) under `columns`. The cursor stays on its row's key when it is still there."""
        columns = tuple(columns)
        new_keys = [key for key, _ in rows]
        new_rows = [tuple(cells) for _, cells in rows]
        old_key = self.cursor_key
        reshaped = columns != self._columns or len(new_keys) != len(self._keys)
        changed = [i for i, (k, r) in enumerate(zip(new_keys, new_rows)) if
                   i >= len(self._keys) or self._keys[i] != k or self._rows[i] != r]
        self._columns, self._keys, self._rows = columns, new_keys, new_rows
        if old_key in new_keys:
            cursor = new_keys.index(old_key)
        else:
            cursor = min(self._cursor, max(0, len(new_keys) - 1))
        live = set(new_keys)
        for key in [k for k in self._strips if k not in live]:
            del self._strips[key]
        if reshaped:
            width = sum(c.width + COLUMN_PADDING for c in columns)
            self._header = None
            self.virtual_size = Size(width, len(new_keys) + 1)
            self.refresh(layout=True)
        else:
            for i in changed:
                self.refresh_line(i + 1)
        if cursor != self._cursor or (old_key != self.cursor_key):
            self._move(cursor, scroll=False)

    # Rendering

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()
        self._header = None

    def _draw(self, cells: Sequence[TableCell], base: Style, over: Style | None) -> Strip:
        segments: list[Segment] = []
        pad = " " * PADDING
        for column, cell in zip(self._columns, cells):
            style = base + cell.style if cell.style is not None else base
            if over is not None:
                style = style + over
            segments.append(Segment(pad + fit(cell.text, column.width, cell.right) + pad, style))
        return Strip(segments)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
        scroll_x, scroll_y = self.scroll_offset
        if y == 0:
            header_style = self.get_component_rich_style("row-table--header")
            cache_key = (self._columns, header_style)
            if self._header is None or self._header[0] != cache_key:
                cells = [TableCell(c.label) for c in self._columns]
                self._header = (cache_key, self._draw(cells, header_style, None))
            strip = self._header[1]
            fill = header_style
        else:
            index = scroll_y + y - 1
            if index >= len(self._keys):
                return Strip.blank(width, base)
            cells = self._rows[index]
            fill = base
            if index == self._cursor:
                strip = self._draw(cells, base, self.get_component_rich_style("row-table--cursor"))
            else:
                key = self._keys[index]
                cache_key = (cells, self._columns, base)
                cached = self._strips.get(key)
                if cached is None or cached[0] != cache_key:
                    cached = (cache_key, self._draw(cells, base, None))
                    self._strips[key] = cached
                strip = cached[1]
        return strip.crop_extend(scroll_x, scroll_x + width, fill)

    # The cursor

    def _move(self, row: int, *, scroll: bool = True) -> None:
        if not self._keys:
            self._cursor = 0
            return
        row = max(0, min(row, len(self._keys) - 1))
        old = self._cursor
        self._cursor = row
        self.refresh_line(old + 1)
        self.refresh_line(row + 1)
        if scroll:
            self._scroll_to_cursor()
        self.post_message(self.RowHighlighted(self, row, self._keys[row]))

    def _scroll_to_cursor(self) -> None:
        visible = max(1, self.scrollable_content_region.height - 1)  # less the header line
        top = round(self.scroll_offset.y)
        if self._cursor < top:
            self.scroll_to(y=self._cursor, animate=False, immediate=True)
        elif self._cursor >= top + visible:
            self.scroll_to(y=self._cursor - visible + 1, animate=False, immediate=True)

    def move_cursor(self, *, row: int, animate: bool = False) -> None:
        """Put the cursor on `row` (clamped), scrolling it into view."""
        self._move(row)

    def on_focus(self) -> None:
        self.refresh_line(self._cursor + 1)

    def on_blur(self) -> None:
        self.refresh_line(self._cursor + 1)

    def action_cursor_up(self) -> None:
        self._move(self._cursor - 1)

    def action_cursor_down(self) -> None:
        self._move(self._cursor + 1)

    def action_page_up(self) -> None:
        self._move(self._cursor - max(1, self.scrollable_content_region.height - 1))

    def action_page_down(self) -> None:
        self._move(self._cursor + max(1, self.scrollable_content_region.height - 1))

    def action_cursor_home(self) -> None:
        self._move(0)

    def action_cursor_end(self) -> None:
        self._move(len(self._keys) - 1)

    def action_select_cursor(self) -> None:
        if self._keys:
            self.post_message(self.RowSelected(self, self._cursor, self._keys[self._cursor]))

    async def _on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or offset.y < 1:
            return  # the header, or the scrollbar
        row = round(self.scroll_offset.y) + offset.y - 1
        if row >= len(self._keys):
            return
        event.stop()
        if row == self._cursor:
            self.action_select_cursor()
        else:
            self._move(row)
