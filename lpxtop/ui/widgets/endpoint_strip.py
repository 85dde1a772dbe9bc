"""Under the endpoints table, about the selected endpoint: a line of TTFT and queue sparklines and the
client/server TTFT gap, and under it the last error, wrapped whole across the panel's width (the
message says what to do: it is never cut, at 80 columns as at 200)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widget import Widget
from textual.widgets import Label, Static

from lpxtop.humanize import UNKNOWN, fmt_ago, fmt_signed_ms
from lpxtop.model.snapshot import EndpointView
from lpxtop.ui.palette import Palette
from lpxtop.ui.widgets.endpoints_table import gap_text
from lpxtop.ui.widgets.spark_bars import SparkBars

SPARK_POINTS = 60  # at most this many points: a sparkline narrower than that averages them


class EndpointStrip(Vertical):
    """Sparklines and facts for the endpoint under the cursor, and its last error on lines of its own."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._ttft: list[float] | None = None
        self._queue: list[float] | None = None
        self._info_key: tuple | None = None
        self._error_key: tuple | None = None
        self.add_class("-flat", update=False)  # empty until the first data: no restyle to show that

    def compose(self) -> ComposeResult:
        with Horizontal(id="strip-row"):
            yield Label("TTFT", classes="strip-label")
            yield SparkBars(id="spark-ttft", classes="-empty")
            yield Label("queue", classes="strip-label")
            yield SparkBars(id="spark-queue", classes="-empty")
            yield Static("", id="strip-info")
        yield Static("", id="strip-error")

    def show(self, view: EndpointView | None, now: float, palette: Palette, *, force: bool = False) -> None:
        """Show `view`; each part is updated only when its data changed."""
        ttft = [s.ttft_ms for s in view.samples if s.ok and s.ttft_ms is not None][-SPARK_POINTS:] if view else []
        queue = (
            [p.requests_waiting for p in view.server_history if p.requests_waiting is not None][-SPARK_POINTS:]
            if view
            else []
        )
        restyle = False  # one restyle of the strip for every class that changed, not one per class
        if ttft != self._ttft or force:
            self._ttft = ttft
            spark = self.query_one("#spark-ttft", SparkBars)
            spark.data = ttft
            restyle |= _switch_class(spark, "-empty", not ttft)
        if queue != self._queue or force:
            self._queue = queue
            spark = self.query_one("#spark-queue", SparkBars)
            spark.data = queue
            restyle |= _switch_class(spark, "-empty", not queue)
        restyle |= _switch_class(self, "-flat", not ttft and not queue)
        if restyle:
            self.update_node_styles()
        info = self.query_one("#strip-info", Static)
        width = info.content_size.width
        info_key = (view.name, view.ttft_gap, bool(view.last_error), id(palette), width) if view else None
        if info_key != self._info_key or force:
            self._info_key = info_key
            info.update(self._info(view, palette, width), layout=False)
        # The time enters only through "(12s ago)" after a last error: without one the line stays put.
        error = self.query_one("#strip-error", Static)
        error_key = (
            (view.last_error, fmt_ago(view.last_error_time, now), id(palette)) if view and view.last_error else None
        )
        if error_key != self._error_key or force:
            self._error_key = error_key
            error.display = error_key is not None
            if view is not None and view.last_error:
                # wrapped by the widget to its width; its height may change: lay out again
                error.update(error_line(view.last_error, fmt_ago(view.last_error_time, now), palette))

    @staticmethod
    def _info(view: EndpointView | None, palette: Palette, width: int = 0) -> Text:
        """The endpoint's name, the time outside the engine and `last error: none`; where that is wider than
        `width` (80 columns), the gap's range or probe count, then `last error: none`, are left out
        rather than the line cut."""
        if view is None:
            return Text("")
        gap = view.ttft_gap
        detail = None
        if gap.value_ms is not None:
            detail = (f" ({fmt_signed_ms(gap.low_ms)}…{fmt_signed_ms(gap.high_ms)})" if gap.estimate
                      else f" (exact, {gap.probes} probe{'s' if gap.probes != 1 else ''})")
        for with_detail, with_none in ((True, True), (False, True), (False, False)):
            text = Text(no_wrap=True, overflow="ellipsis")
            text.append(view.name, style="bold")
            if gap.value_ms is not None:
                text.append("  outside engine ")
                text.append(gap_text(view) + " ms", style=palette.accent)
                if with_detail and detail:
                    text.append(detail, style=palette.muted)
            if with_none and not view.last_error:  # otherwise the error has lines of its own (#strip-error)
                text.append("  last error: ")
                text.append("none", style=palette.muted)
            if width <= 0 or text.cell_len <= width:
                break
        return text


def error_line(error: str, ago: str, palette: Palette) -> Text:
    """`last error: KIND: MESSAGE (AGO)` (the age when known), the message in the critical style, to be wrapped whole (words
    longer than the line are folded, never cut)."""
    text = Text(overflow="fold")
    text.append("last error: ")
    text.append(" ".join(error.split()), style=palette.critical)
    if ago != UNKNOWN:  # a source that keeps no time (the fleet view) says nothing of it
        text.append(f" ({ago})", style=palette.muted)
    return text


def _switch_class(node: Widget, name: str, on: bool) -> bool:
    """Set or clear class `name` on `node` without restyling it; True when that changed anything."""
    if node.has_class(name) == on:
        return False
    node.set_class(on, name, update=False)
    return True
