"""One line under the endpoints table about the selected endpoint: TTFT and queue sparklines, the
client/server TTFT gap and the last error."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Label, Static

from lpxtop.humanize import fmt_ago, fmt_signed_ms
from lpxtop.model.snapshot import EndpointView
from lpxtop.ui.palette import Palette
from lpxtop.ui.widgets.endpoints_table import gap_text
from lpxtop.ui.widgets.spark_bars import SparkBars

SPARK_POINTS = 60  # at most this many points: a sparkline narrower than that averages them


class EndpointStrip(Horizontal):
    """Sparklines and facts for the endpoint under the cursor."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._ttft: list[float] | None = None
        self._queue: list[float] | None = None
        self._info_key: tuple | None = None

    def compose(self) -> ComposeResult:
        yield Label("TTFT", classes="strip-label")
        yield SparkBars(id="spark-ttft")
        yield Label("queue", classes="strip-label")
        yield SparkBars(id="spark-queue")
        yield Static("", id="strip-info")

    def show(self, view: EndpointView | None, now: float, palette: Palette, *, force: bool = False) -> None:
        """Show `view`; each part is updated only when its data changed."""
        ttft = [s.ttft_ms for s in view.samples if s.ok and s.ttft_ms is not None][-SPARK_POINTS:] if view else []
        queue = (
            [p.requests_waiting for p in view.server_history if p.requests_waiting is not None][-SPARK_POINTS:]
            if view
            else []
        )
        if ttft != self._ttft or force:
            self._ttft = ttft
            spark = self.query_one("#spark-ttft", SparkBars)
            spark.data = ttft
            spark.set_class(not ttft, "-empty")
        if queue != self._queue or force:
            self._queue = queue
            spark = self.query_one("#spark-queue", SparkBars)
            spark.data = queue
            spark.set_class(not queue, "-empty")
        # The time enters only through "(12s ago)" after a last error: without one the line stays put.
        info_key = (
            (view.name, view.ttft_gap, view.last_error, view.last_error_time,
             fmt_ago(view.last_error_time, now) if view.last_error else None, id(palette))
            if view
            else None
        )
        if info_key != self._info_key or force:
            self._info_key = info_key
            self.query_one("#strip-info", Static).update(self._info(view, now, palette), layout=False)

    @staticmethod
    def _info(view: EndpointView | None, now: float, palette: Palette) -> Text:
        if view is None:
            return Text("")
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(view.name, style="bold")
        gap = view.ttft_gap
        if gap.value_ms is not None:
            text.append("  outside engine ")
            text.append(gap_text(view) + " ms", style=palette.accent)
            if gap.estimate:
                text.append(f" ({fmt_signed_ms(gap.low_ms)}…{fmt_signed_ms(gap.high_ms)})", style=palette.muted)
            else:
                text.append(f" (exact, {gap.probes} probe{'s' if gap.probes != 1 else ''})", style=palette.muted)
        text.append("  last error: ")
        if view.last_error:
            text.append(view.last_error, style=palette.critical)
            text.append(f" ({fmt_ago(view.last_error_time, now)})", style=palette.muted)
        else:
            text.append("none", style=palette.muted)
        return text
