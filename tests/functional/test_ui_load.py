"""The load screen: in the Pilot on a live load test against the simulator, and as SVG snapshots of a fixed
one. What the screen shows is what the JSON and CSV hold."""

from __future__ import annotations

import csv
import io

import pytest
from rich.console import Console

from lpxtop.load.cli import build_load_engine
from lpxtop.load.controller import LoadController
from lpxtop.load.report import report_json, steps_csv
from lpxtop.load.server_window import ServerWatch
from lpxtop.load.source import LoadSource
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from lpxtop.ui.app import create_app
from lpxtop.ui.formatting import fmt_ms, fmt_rate
from lpxtop.ui.screens.load import LoadScreen
from lpxtop.ui.widgets.load_steps import LoadStepPanel
from tests.functional.loadhelpers import plan_for
from tests.functional.test_ui_support import SwitchableSource, text_of
from tests.load_snapshot_data import load_snapshot

pytestmark = pytest.mark.timeout(60)


class FixedLoadSource(SwitchableSource):
    load_run = True

    def __init__(self, snapshot) -> None:
        super().__init__(snapshot)
        self.stopped = False

    def stop_load(self) -> None:
        self.stopped = True


def fixed_app(finished: bool = False):
    source = FixedLoadSource(load_snapshot(finished=finished))
    return source, create_app(source, poll=False, ssh=False)


def table_text(app, width: int = 200) -> str:
    static = app.screen.query_one("#load-steps")
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(static.content)
    return console.export_text()


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_load_screen_running(snap_compare, size):
    _, app = fixed_app()
    assert snap_compare(app, terminal_size=size)


def test_load_screen_finished(snap_compare):
    _, app = fixed_app(finished=True)
    assert snap_compare(app, terminal_size=(120, 40))


async def test_fixed_load_screen_shows_the_steps_and_q_stops_the_test():
    source, app = fixed_app()
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, LoadScreen)
        status = text_of(app.screen.query_one("#load-status"))
        assert "step 5 of 5 · 16 concurrent · measuring 42s left · 16 in flight, 61 sent" in status
        assert "elapsed 5m00s · ETA 42s" in status  # the last step: what is left of its window
        assert "server now: running 12 · waiting 3" in status
        text = table_text(app)
        assert "4 conc ◆" in text and "missed ttft p95" in text
        footer_keys = {key for key, b in app.screen.active_bindings.items() if b.binding.show and b.enabled}
        assert "q" in footer_keys and not footer_keys & {"p", "r"}
        await pilot.press("q")
        await pilot.pause()
    assert source.stopped and app.return_code == 0
    source, app = fixed_app()
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert source.stopped and app.return_code == 130


async def test_live_load_test_in_the_pilot_shows_what_the_report_holds():
    cfg = SimConfig(max_num_seqs=4, itl_ms=5.0, ttft_ms=10.0, jitter=0.0, seed=8)
    with start_sim_in_thread(cfg) as sim:
        plan = plan_for(sim.url, levels=(1.0, 2.0), duration_s=2.0, warmup_s=0.2)
        engine = build_load_engine(plan, ui=False, scrape=True)
        watch = ServerWatch(plan.endpoint.name, plan.endpoint.effective_metrics_url)
        engine.add_listener(watch.on_engine_event)
        controller = LoadController(plan, server_watch=watch)
        source = LoadSource(engine, controller)

        def start() -> None:
            engine.start()
            controller.start()

        app = create_app(source, refresh_s=0.2, ssh=False, on_ready=start)
        try:
            async with app.run_test(size=(160, 40)) as pilot:
                for _ in range(300):  # until the first step is in and the second measures (bounded: 30 s)
                    await pilot.pause(0.1)
                    state = controller.state()
                    if len(state.steps) == 1 and state.phase == "measuring":
                        break
                assert len(controller.state().steps) == 1, controller.state().phase
                await pilot.pause(0.5)
                app.poll()
                await pilot.pause()
                shown = table_text(app)
                panel = app.screen.query_one(LoadStepPanel)
                assert "measuring" in text_of(panel.query_one("#load-status"))
                await pilot.press("q")  # stops the test at once
                assert controller.wait(10)
        finally:
            controller.stop()
            controller.wait(10)
            engine.stop()
    state = controller.state()
    assert controller.outcome == "stopped"
    first, second = state.steps
    assert first.status == "done" and second.status == "partial"
    report = report_json(state, plan_summary=plan.summary(), outcome=controller.outcome)
    row = next(line for line in shown.splitlines() if line.strip().startswith("1 "))
    step_json = report["steps"][0]
    csv_row = next(csv.DictReader(io.StringIO(steps_csv(state.steps))))
    for value in (fmt_ms(step_json["median_ttft_ms"]), fmt_ms(step_json["p95_ttft_ms"]),
                  fmt_ms(step_json["p95_e2el_ms"]), fmt_rate(step_json["output_throughput"]),
                  fmt_ms(float(csv_row["median_tpot_ms"])), str(step_json["completed"])):
        assert f" {value} " in f" {row} ", (value, row)


async def test_help_on_the_load_screen_lists_its_keys():
    from lpxtop.ui.screens.help import HelpScreen
    from lpxtop.ui.screens.load import LOAD_KEY_HELP

    _, app = fixed_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen) and app.screen.page.title == "lpxtop load keys"
        shown = text_of(app.screen.query_one("#help-keys"))
        for keys, _ in LOAD_KEY_HELP:
            assert keys in shown
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, LoadScreen)
    bound = {b.key for b in LoadScreen.BINDINGS}
    listed = " ".join(k for k, _ in LOAD_KEY_HELP).replace("Ctrl+C", "ctrl+c").replace("?", "question_mark")
    for key in bound - {"2", "3"}:
        assert key in listed, key
