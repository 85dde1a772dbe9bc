"""The strip's sparkline draws the same bars, in the same colours, as Textual's own Sparkline renderable."""

from __future__ import annotations

import random

import pytest
from rich.color import Color as RichColor
from rich.console import Console
from rich.segment import Segment
from textual.color import Color
from textual.renderables.sparkline import Sparkline as TextualSparkline

from lpxtop.ui.widgets.spark_bars import bucket_peaks, spark_rows

LOW, HIGH = Color(30, 60, 200), Color(250, 180, 20)


def textual_rows(data: list[float], width: int, height: int) -> list[list[tuple[str, tuple[int, int, int] | None]]]:
    renderable = TextualSparkline(data, width=width, height=height, min_color=LOW.rich_color,
                                  max_color=HIGH.rich_color, summary_function=max)
    console = Console(width=width, color_system="truecolor", legacy_windows=False)
    lines = Segment.split_lines(console.render(renderable, console.options.update_width(width)))
    rows = []
    for line in lines:
        cells = []
        for seg in line:
            colour = seg.style.color.get_truecolor() if seg.style and seg.style.color else None
            cells += [(char, tuple(colour) if colour else None) for char in seg.text]
        rows.append(cells)
    return rows


def our_rows(data: list[float], width: int, height: int) -> list[list[tuple[str, tuple[int, int, int] | None]]]:
    def colour(ratio: float | None) -> tuple[int, int, int] | None:
        if ratio is None:
            return None
        c = LOW.blend(HIGH, ratio).rich_color
        assert isinstance(c, RichColor)
        return tuple(c.get_truecolor())

    return [[(char, colour(ratio)) for char, ratio in row] for row in spark_rows(data, width, height)]


@pytest.mark.parametrize("seed", range(40))
def test_same_bars_and_colours_as_textuals_sparkline(seed):
    rng = random.Random(seed)
    width, height = rng.choice([1, 3, 10, 24]), rng.choice([1, 2, 3])
    data = [rng.choice([rng.uniform(0, 3000), 5.0, 0.0]) for _ in range(rng.choice([2, 5, 10, 24, 60, 61]))]
    if rng.random() < 0.2:
        data = [7.0] * len(data)  # flat: every bar at the bottom
    assert our_rows(data, width, height) == textual_rows(data, width, height)


def test_one_point_is_a_full_block_and_no_point_a_floor():
    assert our_rows([4.0], 3, 2) == textual_rows([4.0], 3, 2)
    assert [c for c, _ in spark_rows([], 3, 2)[-1]] == ["▁"] * 3


def test_bucket_peaks():
    assert bucket_peaks([1, 5, 2, 8, 3, 1], 3) == [5, 8, 3]
    assert bucket_peaks([1, 2], 5) == [1, 2]
