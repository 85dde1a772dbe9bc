"""`lpxtop replay A --compare B`: each endpoint's percentiles in A and in B, and the change.

The figures come from lpxtop/record/compare.py (headless; `--text`/`--json` print the same table).
Lower is better for latencies and the error rate, higher for tok/s: the change is coloured from B's
point of view.
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from lpxtop.record.compare import Comparison, fmt_change, fmt_value
from lpxtop.ui.palette import Palette
from lpxtop.ui.screens.base import LpxtopScreen
from lpxtop.ui.screens.help import QUIT_ROWS, HelpPage
from lpxtop.ui.widgets.key_bar import KeyBar


def render_comparison(comparison: Comparison, palette: Palette) -> Group:
    """The two recordings' names, then one table per endpoint: measure, A, B, change, verdict."""
    parts: list = []
    title = Text()
    title.append("A  ", style="bold")
    title.append(comparison.a.label + "\n")
    title.append("B  ", style="bold")
    title.append(comparison.b.label)
    for summary, tag in ((comparison.a, "A"), (comparison.b, "B")):
        if summary.damage:
            title.append(f"\n{tag} is damaged: {summary.damage}", style=palette.warning)
    parts.append(title)
    if not comparison.endpoints:
        parts.append(Text("\nNeither recording holds a probe.", style=palette.muted))
    for endpoint in comparison.endpoints:
        table = Table(box=None, padding=(0, 2, 0, 0), show_edge=False, header_style=palette.muted,
                      title=f"{endpoint.label}  (probes: A {endpoint.a_probes}, B {endpoint.b_probes})",
                      title_justify="left", title_style="bold")
        table.add_column("measure", no_wrap=True)  # a header here: Textual trims a line's leading spaces
        table.add_column("unit", style=palette.muted, no_wrap=True)
        table.add_column("A", justify="right", no_wrap=True)
        table.add_column("B", justify="right", no_wrap=True)
        table.add_column("change", justify="right", no_wrap=True)
        table.add_column("", no_wrap=True)
        for change in endpoint.changes:
            if change.a is None and change.b is None:
                continue
            verdict = change.verdict
            style = palette.ok if verdict == "better" else palette.critical if verdict == "worse" else palette.muted
            table.add_row(change.measure, change.unit, fmt_value(change.a, change.unit), fmt_value(change.b, change.unit),
                          Text(fmt_change(change), style=style),
                          Text(verdict if verdict in ("better", "worse") else "", style=style))
        parts.append(Text(""))
        parts.append(table)
    return Group(*parts)


class CompareScreen(LpxtopScreen):
    """Two recordings side by side; Esc returns to the replay of A."""

    BINDINGS = [Binding("escape", "back", "back to the replay of A")]

    def __init__(self, comparison: Comparison) -> None:
        super().__init__()
        self.comparison = comparison

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="compare-scroll") as scroll:
            scroll.border_title = "Compare A → B"
            yield Static("", id="compare-body")
        yield KeyBar()

    def on_mount(self) -> None:
        self.rerender()

    def rerender(self, force: bool = False) -> None:
        palette = self.app.palette  # type: ignore[attr-defined]
        self.query_one("#compare-body", Static).update(render_comparison(self.comparison, palette))

    def action_back(self) -> None:
        self.app.pop_screen()

    def help_page(self) -> HelpPage:
        rows = (*((k, d) for k, d, _ in QUIT_ROWS), ("Esc", "back to the replay of A"),
                ("↑ ↓ PgUp PgDn", "scroll the comparison"), ("t", "cycle the colour theme"))
        return HelpPage("compare keys", rows, "Each endpoint's percentiles in A and in B, and the change: lower is "
                        "better for latencies and the error rate, higher for tok/s; coloured from B's point of view.")
