"""Declared sources: each source says what it can do in one record (lpxtop/engine/source.py `Capabilities`),
the command line adds what it attaches (a recorder, the demo's surge) through `create_app`, and the dashboard,
driven with the pilot, asks a source for `snapshot()` and `capabilities` and nothing else."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from lpxtop.cli.assemble import build_engine
from lpxtop.engine.source import Capabilities, LoadTest
from lpxtop.fleet.source import FleetSettings, FleetSource
from lpxtop.load.controller import LoadController
from lpxtop.load.source import LoadSource
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.record.replay import ReplaySource
from lpxtop.ui.app import create_app
from lpxtop.ui.screens.base import SnapshotScreen
from lpxtop.ui.screens.detail import DetailScreen
from lpxtop.ui.screens.help import HelpScreen
from lpxtop.ui.screens.load import LoadScreen
from lpxtop.ui.screens.main import MainScreen
from lpxtop.ui.widgets.timebar import TimeBar
from tests.support.load_runs import plan_for
from tests.support.load_snapshot_data import load_snapshot
from tests.support.paths import FIXTURES
from tests.support.snapshot_data import fixed_snapshot
from tests.support.ui import bump, text_of

pytestmark = pytest.mark.timeout(60)

SIZE = (120, 40)
V1 = FIXTURES / "recordings" / "v1-sim.lpxrec"


class StrictSource:
    """A source with `snapshot()` and `capabilities` and nothing else: every other attribute the UI looks
    for is missing, and noted in `probed`."""

    def __init__(self, snapshot, capabilities: Capabilities) -> None:
        self.probed: list[str] = []
        self.published = snapshot
        self.capabilities = capabilities

    def snapshot(self):
        return self.published

    def __getattr__(self, name: str):
        if not name.startswith("__"):
            self.__dict__["probed"].append(name)
        raise AttributeError(name)


class Controls:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def set_paused(self, paused: bool) -> None:
        self.calls.append(f"paused={paused}")

    def reset(self) -> None:
        self.calls.append("reset")

    def set_interval(self, seconds: float) -> None:
        self.calls.append(f"interval={seconds:g}")


class Recorder:
    recording = True
    path = None

    def __init__(self) -> None:
        self.bookmarks: list[str] = []

    def status_line(self) -> str:
        return "REC test.lpxrec"

    def bookmark(self, note: str, wall_time: float | None = None) -> None:
        self.bookmarks.append(note)


def notices(app) -> str:
    return " | ".join(str(n.message) for n in app._notifications)


def test_each_source_declares_what_it_can_do():
    engine = build_engine([EndpointConfig(name="e", url="http://127.0.0.1:9/v1")], scrape_metrics=False,
                          readonly=True)
    live = engine.capabilities
    assert live.controls is engine and live.warming_up is not None and live.readonly
    assert (live.timeline, live.recorder, live.load, dict(live.refusals)) == (None, None, None, {})

    replay = ReplaySource(V1, playing=False)
    try:
        caps = replay.capabilities
        assert caps.timeline is replay.timeline and caps.controls is None and caps.readonly
    finally:
        replay.close()

    fleet = FleetSource(FleetSettings(prometheus_url="http://127.0.0.1:9")).capabilities
    assert fleet.controls is None and fleet.readonly
    assert set(fleet.refusals) == {"pause", "reset", "interval", "signal"}
    assert (fleet.default_sort, fleet.interval_label) == ("worst", "refresh") and "exporter" in fleet.empty_message

    controller = LoadController(plan_for("http://127.0.0.1:9/v1"))
    load = LoadSource(engine, controller, report_files=("run.json",)).capabilities
    assert load.controls is None and load.load is not None and load.load.report_files == ("run.json",)
    assert load.readonly == live.readonly
    load.load.stop()
    assert controller.outcome == "stopped" or not controller.running


async def test_the_dashboard_asks_a_source_for_its_snapshot_and_capabilities_only():
    controls = Controls()
    source = StrictSource(fixed_snapshot(), Capabilities(controls=controls, readonly=False))
    app = create_app(source, poll=False, ssh=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p", "r", "plus", "g", "b", "t")
        await pilot.pause()
        await pilot.press("enter")  # the detail screen
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        source.published = bump(source.published)
        app.poll()
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape", "escape")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
    assert source.probed == []
    assert controls.calls == ["paused=True", "reset", "interval=3"]
    assert "not recording" in notices(app)  # `b` without a recorder; `g` is off outside the demo


async def test_without_controls_the_steering_keys_say_why_and_do_nothing():
    refusals = {"pause": "nothing to pause here", "reset": "nothing to reset here"}
    source = StrictSource(fixed_snapshot(), Capabilities(refusals=refusals))
    app = create_app(source, poll=False, ssh=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p", "r", "plus")
        await pilot.pause()
        said = notices(app)
        assert "nothing to pause here" in said and "nothing to reset here" in said
        assert "interval does nothing here" in said  # no reason declared: a plain one
        assert app.paused is False and app.interval_s == 2.0
    assert source.probed == []


async def test_what_the_command_line_attaches_joins_the_record():
    recorder = Recorder()
    surges: list[bool] = []
    source = StrictSource(fixed_snapshot(), Capabilities(readonly=False))
    app = create_app(source, poll=False, ssh=False, recorder=recorder, demo=surges.append)
    assert app.capabilities.recorder is recorder and source.capabilities.recorder is None
    async with app.run_test(size=SIZE) as pilot:
        header = text_of(app.screen.query_one("#header", Static))
        assert "DEMO" in header and "● REC" in header
        await pilot.press("g", "g")
        await pilot.pause()
    assert surges == [True, False] and source.probed == []


async def test_a_declared_load_test_opens_its_screen_and_q_stops_it():
    stopped: list[bool] = []
    source = StrictSource(load_snapshot(finished=True),
                          Capabilities(load=LoadTest(lambda: stopped.append(True), ("run.json",))))
    app = create_app(source, poll=False, ssh=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, LoadScreen)
        assert not app.check_action("pause", ()) and not app.check_action("reset", ())
        assert "run.json" in text_of(app.screen.query_one("#load-status"))
        await pilot.press("q")
        await pilot.pause()
    assert stopped == [True] and app.return_code == 0 and source.probed == []


async def test_a_declared_timeline_brings_the_time_bar_and_the_replay_keys():
    replay = ReplaySource(V1, playing=False)
    try:
        source = StrictSource(replay.snapshot(), replay.capabilities)
        app = create_app(source, poll=False, ssh=False)
        async with app.run_test(size=SIZE) as pilot:
            assert app.screen.query_one(TimeBar) is not None
            assert app.check_action("replay_play", ())
            before = replay.timeline.position()
            await pilot.press("right")
            await pilot.pause()
            assert replay.timeline.position() == min(before + 10, replay.timeline.end)
    finally:
        replay.close()
    assert source.probed == []
    plain = create_app(StrictSource(fixed_snapshot(), Capabilities()), poll=False, ssh=False)
    assert not plain.check_action("replay_play", ())


def test_the_snapshot_screens_share_one_base():
    assert all(issubclass(screen, SnapshotScreen) for screen in (MainScreen, DetailScreen, LoadScreen))
