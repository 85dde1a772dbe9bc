"""`lpxtop replay A --compare B`: each endpoint's percentiles in A and in B, and the change.

The figures come from lpxtop/record/compare.py (headless; `--text`/`--json` print the same table).
Lower is better for latencies and the error rate, higher for tok/s: the change is coloured from B's
point of view.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from lpxtop.record.compare import Comparison, fmt_change, fmt_value
from lpxtop.ui.palette import Palette


def render_comparison_text(comparison: Comparison, palette: Palette) -> Text:
    text = Text()
    text.append("A  ", style="bold")
    text.append(comparison.a.label + "\n")
    text.append("B  ", style="bold")
    text.append(comparison.b.label + "\n")
    for summary, tag in ((comparison.a, "A"), (comparison.b, "B")):
        if summary.damage:
            text.append(f"{tag} is damaged: {summary.damage}\n", style=palette.warning)
    if not comparison.endpoints:
        text.append("\nNeither recording holds a probe.", style=palette.muted)
    for endpoint in comparison.endpoints:
        text.append("\n")
        text.append(endpoint.label, style="bold")
        text.append(f"   probes A {endpoint.a_probes}, B {endpoint.b_probes}\n", style=palette.muted)
        text.append(f"  {'':<28}{'A':>10}{'B':>10}   change\n", style=palette.muted)
        for change in endpoint.changes:
            if change.a is None and change.b is None:
                continue
            unit = f" {change.unit}" if change.unit and change.unit != "%" else ("%" if change.unit == "%" else "")
            text.append(f"  {change.measure + unit:<28}{fmt_value(change.a, change.unit):>10}"
                        f"{fmt_value(change.b, change.unit):>10}   ")
            verdict = change.verdict
            style = palette.ok if verdict == "better" else palette.critical if verdict == "worse" else palette.muted
            text.append(f"{fmt_change(change):<20}", style=style)
            if verdict in ("better", "worse"):
                text.append(verdict, style=style)
            text.append("\n")
    return text


class CompareScreen(Screen):
    """Two recordings side by side; Esc returns to the replay of A."""

    BINDINGS = [Binding("escape", "back", "back to the replay of A")]

    def __init__(self, comparison: Comparison) -> None:
        super().__init__()
        self.comparison = comparison

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="compare-scroll") as scroll:
            scroll.border_title = "Compare A → B"
            yield Static("", id="compare-body")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.rerender()

    def rerender(self, force: bool = False) -> None:
        palette = self.app.palette  # type: ignore[attr-defined]
        self.query_one("#compare-body", Static).update(render_comparison_text(self.comparison, palette))

    def action_back(self) -> None:
        self.app.pop_screen()
