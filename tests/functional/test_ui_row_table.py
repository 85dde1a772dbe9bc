"""RowTable, the light table under the endpoints and ports panels, driven through Textual's pilot."""

from __future__ import annotations

from rich.style import Style
from textual.app import App, ComposeResult

from lpxtop.ui.widgets.row_table import RowTable, TableCell, TableColumn, fit

COLUMNS = (TableColumn("name", "Name", 8), TableColumn("value", "Value", 5))


def rows(n: int, value: str = "1") -> list[tuple[str, list[TableCell]]]:
    return [(f"row{i}", [TableCell(f"row{i}"), TableCell(value, right=True)]) for i in range(n)]


class TableApp(App):
    def __init__(self, n: int = 5, height: int = 100) -> None:
        super().__init__()
        self.n = n
        self.height = height
        self.events: list[tuple[str, str | None]] = []

    def compose(self) -> ComposeResult:
        table = RowTable(id="t")
        table.styles.max_height = self.height
        yield table

    def on_mount(self) -> None:
        table = self.query_one(RowTable)
        table.set_table(COLUMNS, rows(self.n))
        table.focus()

    def on_row_table_row_highlighted(self, event: RowTable.RowHighlighted) -> None:
        self.events.append(("highlighted", event.row_key))

    def on_row_table_row_selected(self, event: RowTable.RowSelected) -> None:
        self.events.append(("selected", event.row_key))


def line_text(table: RowTable, y: int) -> str:
    return table.render_line(y).text


def test_fit_cuts_with_an_ellipsis_and_pads_by_cells():
    assert fit("abcdef", 4, right=False) == "abc…"
    assert fit("ab", 4, right=True) == "  ab"
    assert fit("ab", 4, right=False) == "ab  "
    assert fit("日本語", 4, right=False) == "日 …"  # double-width: 日 is two cells, half of 本 cannot show
    assert fit("a\nb", 3, right=False) == "a b"
    assert fit("abc", 0, right=False) == ""


async def test_header_rows_and_alignment():
    app = TableApp(n=2)
    async with app.run_test(size=(40, 10)):
        table = app.query_one(RowTable)
        assert line_text(table, 0).startswith(" Name      Value ")
        assert line_text(table, 1).startswith(" row0          1 ")
        assert table.row_count == 2 and table.get_cell("row1", "value") == "1"
        assert table.get_row_at(1) == ["row1", "1"]


async def test_keys_move_the_cursor_and_enter_selects():
    app = TableApp(n=5)
    async with app.run_test(size=(40, 10)) as pilot:
        table = app.query_one(RowTable)
        await pilot.press("down", "down")
        assert table.cursor_row == 2 and table.cursor_key == "row2"
        await pilot.press("up")
        assert table.cursor_row == 1
        await pilot.press("end")
        assert table.cursor_row == 4
        await pilot.press("down")  # clamped at the last row
        assert table.cursor_row == 4
        await pilot.press("home")
        assert table.cursor_row == 0
        await pilot.press("enter")
        await pilot.pause()
        assert ("selected", "row0") in app.events
        assert ("highlighted", "row2") in app.events


async def test_a_click_moves_the_cursor_and_a_second_click_selects():
    app = TableApp(n=3)
    async with app.run_test(size=(40, 10)) as pilot:
        table = app.query_one(RowTable)
        assert await pilot.click(RowTable, offset=(2, 3))  # line 0 is the header: row 2
        assert table.cursor_key == "row2"
        assert await pilot.click(RowTable, offset=(2, 3))
        await pilot.pause()
        assert app.events[-1] == ("selected", "row2")
        assert await pilot.click(RowTable, offset=(2, 0))  # the header does nothing
        assert table.cursor_key == "row2"


async def test_the_cursor_scrolls_into_view_in_a_long_list():
    app = TableApp(n=30, height=6)
    async with app.run_test(size=(40, 20)) as pilot:
        table = app.query_one(RowTable)
        assert table.size.height == 6
        await pilot.press("pagedown", "pagedown", "down")
        await pilot.pause()
        row = table.cursor_row
        top = round(table.scroll_offset.y)
        assert top <= row < top + 5  # 5 rows show under the header
        assert line_text(table, 0).startswith(" Name")  # the header stays
        assert f"row{row}" in "".join(line_text(table, y) for y in range(1, 6))
        await pilot.press("end")
        await pilot.pause()
        assert line_text(table, 5).startswith(" row29")


async def test_the_cursor_follows_its_row_when_rows_reorder_or_go():
    app = TableApp(n=4)
    async with app.run_test(size=(40, 10)) as pilot:
        table = app.query_one(RowTable)
        await pilot.press("down", "down")
        assert table.cursor_key == "row2"
        table.set_table(COLUMNS, list(reversed(rows(4))))
        assert table.cursor_key == "row2" and table.cursor_row == 1
        table.set_table(COLUMNS, rows(1))
        assert table.cursor_key == "row0"
        table.set_table(COLUMNS, [])
        assert table.cursor_row == -1 and table.cursor_key is None
        await pilot.press("down", "enter")  # nothing to move to or select: no error
        table.set_table(COLUMNS, rows(2))
        assert table.cursor_key == "row0"


async def test_only_rows_whose_cells_changed_are_drawn_again():
    app = TableApp(n=3)
    async with app.run_test(size=(40, 10)) as pilot:
        table = app.query_one(RowTable)
        await pilot.press("down")  # the cursor on row1, drawn apart from the cache
        await pilot.pause()
        before = {key: strip for key, (_, strip) in table._strips.items()}
        new = rows(3)
        new[2] = ("row2", [TableCell("row2"), TableCell("9", Style(bold=True), right=True)])
        table.set_table(COLUMNS, new)
        await pilot.pause()
        after = {key: strip for key, (_, strip) in table._strips.items()}
        assert after["row0"] is before["row0"]
        assert after["row2"] is not before["row2"]
        assert line_text(table, 3).startswith(" row2          9 ")
