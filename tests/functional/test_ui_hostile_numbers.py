"""The dashboard never crashes on a number: +Inf, -Inf, NaN, 1e308 or a 400-digit integer in every
numeric field of a snapshot, through the real app (main screen, each endpoint's detail with its charts,
errors and settings tabs), driven by its Pilot."""

from __future__ import annotations

import re

import pytest

from lpxtop.report import render_table
from lpxtop.ui.widgets.charts import ChartSpec, Level, Series
from lpxtop.ui.widgets.spark_bars import spark_rows
from tests.support.hostile_values import HOSTILE_FLOATS, HUGE_INT, mixed, poisoned, text_fed
from tests.support.snapshot_data import fixed_snapshot
from tests.support.ui import make_app

SIZE = (140, 48)


async def test_every_screen_survives_hostile_numbers():
    # each float field gets the next of +Inf, -Inf, NaN, 1e308, and every integer read from a server's
    # text (JSON, /metrics) is a 400-digit one
    snapshot = poisoned(fixed_snapshot(), mixed(), ints=text_fed())
    _, app = make_app(snapshot)
    async with app.run_test(size=SIZE) as pilot:
        app.poll()
        await pilot.pause()
        for _ in snapshot.endpoints[:2]:  # the details with server figures and errors, every tab
            await pilot.press("enter")
            await pilot.pause()
            for tab in ("tab-charts", "tab-errors", "tab-settings"):
                app.screen.query_one("#detail-tabs").active = tab
                await pilot.pause()
            await pilot.press("escape", "down")
            await pilot.pause()
        for key in ("s", "s", "1", "2", "3", "4", "1", "2", "3", "4"):
            await pilot.press(key)
        await pilot.pause()
        assert app.is_running
    assert app.return_code in (None, 0)


@pytest.mark.parametrize("hostile", HOSTILE_FLOATS, ids=repr)
def test_the_once_table_survives_hostile_numbers(hostile):
    text = render_table(poisoned(fixed_snapshot(), hostile, ints=True))
    assert "ENDPOINT" in text and not re.search(r"\b(inf|nan)\b", text.lower())


def test_sparklines_and_charts_take_only_finite_points():
    hostile = [1.0, float("inf"), float("nan"), -float("inf"), HUGE_INT, 1e308, -1e308, 3.0]
    rows = spark_rows(hostile, 10, 2)
    assert len(rows) == 2 and all(len(r) == 10 for r in rows)
    series = Series("s", tuple(range(len(hostile))), tuple(hostile))
    assert series.ys == (1.0, 3.0) and series.xs == (0, 7)
    spec = ChartSpec("t", hist_values=tuple(hostile), levels=(Level("p", float("nan")),), y_max=float("inf"))
    assert spec.hist_values == (1.0, 3.0) and spec.levels == () and spec.y_max is None


async def test_the_detail_screen_counts_client_limited_probes():
    from dataclasses import replace

    from lpxtop.ui.screens.detail import render_summary
    from tests.support.ui import make_app

    snapshot = fixed_snapshot()
    view = replace(snapshot.endpoints[0], probes_client_limited=3)
    _, app = make_app(snapshot)
    async with app.run_test(size=SIZE):
        text = render_summary(view, view.name, snapshot.wall_time, app.palette).plain
    assert "3 client-limited" in text
    assert "client-limited" not in render_summary(snapshot.endpoints[0], "x", snapshot.wall_time, app.palette).plain
