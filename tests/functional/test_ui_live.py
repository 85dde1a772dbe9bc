"""The real app on the real engine probing the simulated server over loopback."""

from __future__ import annotations

import time

from lpxtop.engine.runner import Engine, EngineSettings
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from lpxtop.ui.app import create_app
from lpxtop.ui.widgets.endpoints_table import EndpointsTable
from tests.support.sim import endpoint


async def test_dashboard_shows_a_measured_ttft_from_the_simulated_server():
    with start_sim_in_thread(SimConfig(model="live-model", ttft_ms=20, itl_ms=2)) as sim:
        engine = Engine([endpoint(sim.url, name="live", model=None, interval_s=0.25, max_tokens=8)],
                        EngineSettings())
        app = create_app(engine, refresh_s=0.2, ssh=False, on_ready=engine.start)
        try:
            async with app.run_test(size=(120, 40)) as pilot:
                table = app.screen.query_one(EndpointsTable)
                deadline = time.monotonic() + 15
                ttft_text = ""
                while time.monotonic() < deadline:
                    await pilot.pause(0.2)
                    if table.row_count:
                        row = [str(c) for c in table.get_row_at(0)]
                        if "live" in " ".join(row):
                            view = engine.snapshot().endpoints[0]
                            if view.ttft_ms is not None:
                                ttft_text = f"{view.ttft_ms.p50:.0f}"
                                if ttft_text in row:
                                    break
                assert ttft_text and ttft_text in row, row
                assert int(ttft_text) >= 20  # the server takes 20 ms to the first token
                assert engine.snapshot().endpoints[0].model == "live-model"
        finally:
            engine.stop()


def test_start_up_objects_are_set_aside_from_the_collector():
    """The dashboard (not a headless test app) freezes what start-up made, so full collections stop
    walking ~50,000 long-lived objects; this runs the helper it schedules, then undoes it."""
    import gc

    from lpxtop.ui.app import _freeze_startup_objects

    before = gc.get_freeze_count()
    try:
        _freeze_startup_objects()
        assert gc.get_freeze_count() > before + 1000
        assert gc.isenabled()
    finally:
        gc.unfreeze()
