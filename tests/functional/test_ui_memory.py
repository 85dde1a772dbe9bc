"""The dashboard's memory while a user moves between screens: a closed screen's widgets are freed, so the
heap, and the length of each full garbage collection (which holds the interpreter lock, and with it the
probes' reads), stays flat however often the detail screen is opened."""

from __future__ import annotations

import gc

from textual._styles_cache import StylesCache

from lpxtop.ui.screens.detail import DetailScreen
from lpxtop.ui.screens.main import MainScreen
from tests.support.ui import make_app

SIZE = (120, 40)


def _live_styles_caches() -> int:
    """Textual's per-widget render caches still alive (each holds the lines its widget last drew)."""
    gc.collect()
    return sum(1 for obj in gc.get_objects() if isinstance(obj, StylesCache))


async def test_opening_and_closing_the_detail_screen_leaves_no_widget_behind():
    _, app = make_app()
    async with app.run_test(size=SIZE) as pilot:

        async def open_and_close(times: int) -> None:
            for _ in range(times):
                await pilot.press("enter")
                await pilot.pause()
                assert isinstance(app.screen, DetailScreen)
                await pilot.press("right")  # the next tab draws its own widgets
                await pilot.pause()
                await pilot.press("escape")
                await pilot.pause()
                assert isinstance(app.screen, MainScreen)

        await open_and_close(2)  # caches that live as long as the app are made by now
        before = _live_styles_caches()
        await open_and_close(5)
        after = _live_styles_caches()
    # Textual's own cache kept every closed screen's widgets: ~27 more per cycle, 135 here
    assert after - before < 15, (before, after)
