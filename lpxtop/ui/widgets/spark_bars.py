"""A sparkline drawn straight into strips: the strip's TTFT and queue trends.

It draws what Textual's `Sparkline` draws (the same bars, one or more rows tall, each bar coloured
between the min and max colours by its height, `max` of each bucket when there are more points than
cells) without going through a Rich renderable and a console: that cost ~1 ms per redraw, and the
strip redraws its two sparklines each time a probe lands. Lines are kept until the data, the size or
the colours change.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

BARS = "▁▂▃▄▅▆▇█"


def bucket_peaks(data: Sequence[float], width: int) -> list[float]:
    """`width` values: the largest of each of `width` near-equal slices of `data` (data itself when it fits)."""
    n = len(data)
    if n <= width:
        return list(data)
    return [max(data[(i * n) // width : ((i + 1) * n) // width]) for i in range(width)]


def finite_points(data: Sequence[float]) -> list[float]:
    """The points a sparkline can draw: NaN, ±Inf and numbers too large for a float are left out (a
    server may legally report a gauge as +Inf: dividing by that range crashed the dashboard)."""
    points = []
    for value in data:
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            continue
        if math.isfinite(number):
            points.append(number)
    return points


def spark_rows(data: Sequence[float], width: int, height: int) -> list[list[tuple[str, float | None]]]:
    """The cells of each row, top row first: (character, height ratio for its colour, or None for a blank)."""
    if width <= 0 or height <= 0:
        return []
    data = finite_points(data)
    if not data:
        return [[(" ", None)] * width for _ in range(height - 1)] + [[("▁", 0.0)] * width]
    if len(data) == 1:
        return [[("█", 1.0)] * width for _ in range(height)]
    # halved: two finite values at opposite ends of the float range are still a finite distance apart
    data = [v / 2 for v in data]
    peaks = bucket_peaks(data, width)
    low, high = min(data), max(data)
    extent = (high - low) or 1
    levels = len(BARS) * height - 1
    # Fewer points than cells: each point is repeated across the cells, as Textual's sparkline does.
    step = len(peaks) / width
    ratios = [(peaks[int(i * step)] - low) / extent for i in range(width)]
    rows = []
    for row in reversed(range(height)):
        floor, ceiling = row * len(BARS), (row + 1) * len(BARS)
        cells: list[tuple[str, float | None]] = []
        for ratio in ratios:
            level = int(ratio * levels)
            if level < floor:
                cells.append((" ", None))
            elif level >= ceiling:
                cells.append(("█", ratio))
            else:
                cells.append((BARS[level % len(BARS)], ratio))
        rows.append(cells)
    return rows


class SparkBars(Widget):
    """A sparkline of `data`; colours from the `sparkline--min-color` / `sparkline--max-color` components."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"sparkline--min-color", "sparkline--max-color"}
    DEFAULT_CSS = """
    SparkBars {
        height: 1;
    }
    SparkBars > .sparkline--max-color {
        color: $primary;
    }
    SparkBars > .sparkline--min-color {
        color: $primary 30%;
    }
    """

    def __init__(self, data: Sequence[float] = (), *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._data: tuple[float, ...] = tuple(data)
        self._lines: list[Strip] | None = None
        self._drawn_for: tuple | None = None

    @property
    def data(self) -> tuple[float, ...]:
        return self._data

    @data.setter
    def data(self, values: Sequence[float]) -> None:
        values = tuple(values)
        if values != self._data:
            self._data = values
            self.refresh()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._drawn_for = None  # a theme or class change: the colours may have changed

    def render_line(self, y: int) -> Strip:
        width, height = self.size
        base = self.rich_style
        key = (self._data, width, height, base)
        if self._lines is None or key != self._drawn_for:
            self._lines = self._draw(width, height, base)
            self._drawn_for = key
        return self._lines[y] if 0 <= y < len(self._lines) else Strip.blank(width, base)

    def _draw(self, width: int, height: int, base: Style) -> list[Strip]:
        _, background = self.background_colors
        low = background + self.get_component_styles("sparkline--min-color").color
        high = background + self.get_component_styles("sparkline--max-color").color
        styles: dict[float, Style] = {}

        def colour(ratio: float) -> Style:
            style = styles.get(ratio)
            if style is None:
                style = styles[ratio] = base + Style(color=low.blend(high, ratio).rich_color)
            return style

        lines = []
        for cells in spark_rows(self._data, width, height):
            segments: list[Segment] = []
            run, run_style = "", None
            for char, ratio in cells:  # neighbouring cells of one style make one segment
                style = base if ratio is None else colour(ratio)
                if style is run_style:
                    run += char
                    continue
                if run:
                    segments.append(Segment(run, run_style))
                run, run_style = char, style
            if run:
                segments.append(Segment(run, run_style))
            lines.append(Strip(segments, width))
        return lines

