"""The load screen: in the Pilot on a live load test against the simulator, and as SVG snapshots of a fixed
one. What the screen shows is what the JSON and CSV hold."""

from __future__ import annotations

import csv
import io
from dataclasses import replace

import pytest
from rich.console import Console

from lpxtop.cli.load import build_load_engine
from lpxtop.engine.source import Capabilities, LoadTest
from lpxtop.humanize import fmt_duration, fmt_ms, fmt_rate
from lpxtop.load.controller import LoadController
from lpxtop.load.report import report_json, steps_csv
from lpxtop.load.server_window import ServerWatch
from lpxtop.load.source import LoadSource
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from lpxtop.ui.app import create_app
from lpxtop.ui.palette import palette_from_variables
from lpxtop.ui.screens.load import LoadScreen
from lpxtop.ui.widgets.load_steps import LoadStepPanel, load_title, render_steps
from tests.support.load_runs import plan_for
from tests.support.load_snapshot_data import load_snapshot
from tests.support.ui import SwitchableSource, screen_lines, text_of

pytestmark = pytest.mark.timeout(60)


class FixedLoadSource(SwitchableSource):
    """A fixed load run: it declares the load test, whose `stop` the screen calls; `report_files` as the CLI
    gives them."""

    def __init__(self, snapshot, report_files: tuple[str, ...] = ()) -> None:
        super().__init__(snapshot, capabilities=Capabilities(load=LoadTest(self.stop, report_files)))
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


def fixed_app(finished: bool = False, report_files: tuple[str, ...] = ()):
    source = FixedLoadSource(load_snapshot(finished=finished), report_files)
    return source, create_app(source, poll=False, ssh=False)


def table_lines(table, width: int = 200) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(table)
    return console.export_text().splitlines()


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
        assert "16 concurrent · measuring, 42s left · 16 in flight" in status
        title = str(app.screen.query_one("#load-panel").border_title)
        assert "step 5/5 · elapsed 5m00s · ETA 42s" in title  # the last step: what is left of its window
        assert "server now: 12 running · 3 waiting" in status
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


async def test_at_80x24_one_gives_the_steps_room_to_the_sweep_charts():
    _, app = fixed_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        sweep = app.screen.query_one("#sweep-panel")
        before = sweep.size.height
        await pilot.press("1")
        await pilot.pause()
        await pilot.pause()
        assert not app.screen.query_one("#load-panel").display
        assert sweep.size.height > before and sweep.size.height >= 14, (before, sweep.size.height)
        shown = "\n".join(screen_lines(app))
        assert "Sweep" in shown and "TTFT" in shown, shown
        await pilot.press("1")
        await pilot.pause()
        assert app.screen.query_one("#load-panel").display


# Progress, warm-up, stable columns, marks, verdicts that are never cut, the done state


def _with_state(**changes):
    snap = load_snapshot()
    state = replace(snap.load, seq=snap.load.seq + 1, **changes)
    return replace(snap, load=state, seq=snap.seq + 1)


def test_progress_says_step_k_of_n_elapsed_and_eta():
    snap = load_snapshot()
    now = snap.wall_time
    progress = snap.load.progress(now)
    assert (progress.step, progress.steps, progress.elapsed_s, progress.eta_s) == (5, 5, 300.0, 42.0)
    second = replace(snap.load, step_index=1, level=2.0, steps=snap.load.steps[:1], live=None,
                     phase="warmup", phase_started=now - 2.0, phase_ends=now + 3.0)
    early = second.progress(now)
    # this step: the 66 s a step took so far, less the 2 s it ran (more than its 3 s of warm-up and 60 s
    # window); then 3 more at that mean
    assert early.step == 2 and early.eta_s == pytest.approx(64 + 3 * 66)
    assert load_title(second, now).endswith(f"step 2/5 · elapsed 5m00s · ETA {fmt_duration(early.eta_s)}")


async def test_the_title_shows_progress_at_80x24():
    _, app = fixed_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        title = str(app.screen.query_one("#load-panel").border_title)
        assert "step 5/5 · elapsed 5m00s · ETA 42s" in title
        assert any("step 5/5 · elapsed 5m00s · ETA 42s" in line for line in screen_lines(app))


async def test_warm_up_says_so_instead_of_zero_in_flight():
    source = FixedLoadSource(_with_state(phase="warmup", in_flight=0, sent=0, live=None, steps=(),
                                         step_index=0, level=1.0))
    app = create_app(source, poll=False, ssh=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        status = text_of(app.screen.query_one("#load-status"))
        assert "warming up (not counted)" in status and "sending the first requests" in status
        assert "0 in flight" not in status and "0 sent" not in status


def test_columns_keep_their_places_from_one_digit_loads_to_two():
    palette = palette_from_variables({})
    snap = load_snapshot()
    state = snap.load
    header = [table_lines(render_steps(replace(state, steps=state.steps[:k], live=None), 120, palette))[0]
              for k in (1, 4)]
    assert header[0].rstrip() == header[1].rstrip()  # the planned 16 sized the load column from the start
    rows = table_lines(render_steps(replace(state, live=None), 120, palette))
    ok_end = rows[0].index("ok") + 2  # right-aligned figures end under their header
    steps = [row for row in rows[1:] if row.strip()[:1].isdigit()]  # not a verdict's wrapped second line
    assert len(steps) == 4 and all(row[ok_end - 1].isdigit() and row[ok_end] == " " for row in steps), rows


async def test_marks_are_explained_and_the_verdict_is_never_cut_at_80x24():
    steps = list(load_snapshot(finished=True).load.steps)
    steps[3] = replace(steps[3], slo_met=False)
    _, app = fixed_app(finished=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        panel = app.screen.query_one("#load-panel")
        assert panel.border_subtitle == "✓ capacity · ◆ knee"
        table = " ".join(" ".join(table_text(app, 76).split()).split())
        assert "missed ttft p95, error rate" in table  # wrapped in its cell, whole
        status = text_of(app.screen.query_one("#load-status"))
        # the capacity sentence, whole across its lines
        assert "8 failed ttft p95, error rate" in " ".join(status.split())
        await pilot.press("question_mark")
        await pilot.pause()
        assert "◆ the knee" in app.screen.page.legend and "✓ the capacity" in app.screen.page.legend


async def test_the_done_state_names_the_report_files():
    source, app = fixed_app(finished=True, report_files=("/tmp/run.json", "/tmp/steps.csv"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        status = " ".join(text_of(app.screen.query_one("#load-status")).split())
        assert status.startswith("done")
        assert "q quits and writes the report to /tmp/run.json and /tmp/steps.csv" in status
        assert "done in 4m21s" in str(app.screen.query_one("#load-panel").border_title)


def test_a_finished_tests_title_names_the_capacity_only_where_it_fits():
    """The verdict line in the panel says the capacity whole; the border title adds it only where it fits
    (at 80 columns it was cut: `4 concurrent requests within th…`)."""
    load = load_snapshot(finished=True).load
    wide = load_title(load, 0.0, width=200)
    assert wide.endswith("· 4 concurrent requests within the SLO")
    narrow = load_title(load, 0.0, width=74)
    assert narrow == wide.split(" · 4 concurrent")[0] and len(narrow) <= 74
