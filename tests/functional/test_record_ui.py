"""The dashboard on a recording (the committed format-1 fixture): time bar, replay keys, keys that make no
sense in a replay, `b` while recording, the compare screen; SVG snapshots of the replay and the comparison."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from textual.widgets import Input, Static

from lpxtop.record.compare import EndpointSummary, RecordingSummary, compare
from lpxtop.record.replay import ReplaySource
from lpxtop.ui.app import create_app
from lpxtop.ui.screens.compare import CompareScreen
from lpxtop.ui.screens.help import HelpScreen
from lpxtop.ui.screens.prompt import PromptScreen
from lpxtop.ui.widgets.timebar import TimeBar
from tests.support.paths import FIXTURES
from tests.support.snapshot_data import fixed_snapshot
from tests.support.ui import SwitchableSource, text_of

V1 = FIXTURES / "recordings" / "v1-sim.lpxrec"
SIZE = (120, 42)


@pytest.fixture
def utc(monkeypatch):
    """The time bar shows local time: make it the same on every machine."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def replay_app(**kw):
    source = ReplaySource(V1, playing=False, **kw)
    source.timeline.seek(source.end)
    return source, create_app(source, poll=False, ssh=False)


def notices(app) -> str:
    return " | ".join(str(n.message) for n in app._notifications)


async def test_replay_keys_move_through_the_recording(utc):
    source, app = replay_app()
    timeline = source.timeline
    marks = timeline.marks
    async with app.run_test(size=SIZE) as pilot:
        bar = app.screen.query_one(TimeBar)
        assert "■ end" in str(bar.content.plain)
        await pilot.press("less_than_sign")
        assert timeline.position() == source.start
        await pilot.press("right")
        assert timeline.position() == pytest.approx(min(source.start + 10, source.end))
        await pilot.press("less_than_sign", "n")
        assert timeline.position() == marks[0].t and marks[0].kind == "load_step"
        assert app.snapshot.wall_time == marks[0].t  # the screen moved with it
        await pilot.press("a")
        first_alert = next(m for m in marks if m.kind == "alert")
        assert timeline.position() == first_alert.t
        await pilot.press("N")
        assert timeline.position() == marks[0].t
        await pilot.press("j")
        await pilot.pause()
        assert isinstance(app.screen, PromptScreen)
        app.screen.query_one(Input).value = "+2s"
        await pilot.press("enter")
        await pilot.pause()
        assert timeline.position() == pytest.approx(source.start + 2)
        await pilot.press("right_square_bracket")
        assert timeline.speed == 2.0
        await pilot.press("space")
        assert timeline.playing
        await pilot.press("p")  # as in live: pauses
        assert not timeline.playing
        await pilot.press("r", "T")
        await pilot.pause()
        assert "r (reset) does nothing here" in notices(app)
        assert "A replay cannot signal processes" in notices(app)
        await pilot.press("b")
        await pilot.pause()
        assert "bookmarks are made while recording" in notices(app)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert "replay: jump to a time" in text_of(app.screen.query_one("#help-keys", Static))
        await pilot.press("escape", "enter")  # the detail screen follows the replay too
        await pilot.pause()
        view = app.snapshot.endpoints[0]
        summary = text_of(app.screen.query_one("#detail-summary", Static))
        assert f"probes {view.probes_sent} sent" in summary and view.name in summary
        await pilot.press("greater_than_sign")
        await pilot.pause()
        view = next(v for v in app.snapshot.endpoints if v.name == view.name)
        assert f"probes {view.probes_sent} sent" in text_of(app.screen.query_one("#detail-summary", Static))
    source.close()


class FakeRecorder:
    recording = True

    def __init__(self) -> None:
        self.bookmarks: list[tuple[str, float]] = []

    def bookmark(self, note: str, wall_time: float | None = None) -> None:
        self.bookmarks.append((note, wall_time))

    def status_line(self) -> str:
        return "REC x.lpxrec"


async def test_b_bookmarks_the_moment_while_recording_and_says_how_otherwise():
    source = SwitchableSource(fixed_snapshot())
    recorder = FakeRecorder()
    app = create_app(source, poll=False, ssh=False, recorder=recorder)
    async with app.run_test(size=SIZE) as pilot:
        assert "● REC" in text_of(app.screen.query_one("#header", Static))
        before = time.time()
        await pilot.press("b")
        await pilot.pause()
        assert isinstance(app.screen, PromptScreen)
        app.screen.query_one(Input).value = "deployed the new driver"
        await pilot.press("enter")
        await pilot.pause()
    ((note, at),) = recorder.bookmarks
    assert note == "deployed the new driver" and before <= at <= time.time()
    plain = create_app(SwitchableSource(fixed_snapshot()), poll=False, ssh=False)
    async with plain.run_test(size=SIZE) as pilot:
        await pilot.press("b")
        await pilot.pause()
        assert "not recording: start lpxtop with --record" in notices(plain)
        assert not isinstance(plain.screen, PromptScreen)


def synthetic_comparison():
    from lpxtop.model.probe import Percentiles

    def endpoint(name: str, ttft: float, tok_s: float, probes: int, failed: int) -> EndpointSummary:
        s = EndpointSummary(name, probes=probes, ok=probes - failed)
        s.percentiles = {"ttft_ms": Percentiles(ttft, ttft * 1.5, ttft * 2, ttft * 1.1, ttft * 2.5, probes),
                         "output_tokens_per_s": Percentiles(tok_s, tok_s, tok_s, tok_s, tok_s, probes)}
        s.server_means = {"requests_waiting": 0.5 * ttft / 100}
        return s

    a = RecordingSummary(Path("before.lpxrec"), 1_700_000_000.0, 1_700_000_600.0,
                         {"vllm": endpoint("vllm", 120.0, 80.0, 300, 0)})
    b = RecordingSummary(Path("after.lpxrec"), 1_700_086_400.0, 1_700_087_000.0,
                         {"vllm": endpoint("vllm", 90.0, 95.0, 300, 3)})
    return compare(a, b)


async def test_the_compare_screen_opens_on_top_and_esc_returns_to_the_replay(utc):
    source, app = replay_app()
    app.comparison = synthetic_comparison()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, CompareScreen)
        lines = [strip.text for strip in app.screen._compositor.render_strips()]
        body = "\n".join(lines)
        assert "better" in body and "worse" in body  # faster, but errors appeared
        ttft = next(line for line in lines if "TTFT p50" in line).split()
        assert ttft[2:7] == ["ms", "120", "90.0", "−30.0", "(-25%)"] and ttft[-1] == "better"
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen.query_one(TimeBar)
        await pilot.press("c")
        await pilot.pause()
        assert isinstance(app.screen, CompareScreen)
    source.close()


def test_replay_screen_snapshot(snap_compare, utc):
    source, app = replay_app()
    assert snap_compare(app, terminal_size=SIZE)
    source.close()


def test_compare_screen_snapshot(snap_compare, utc):
    source, app = replay_app()
    app.comparison = synthetic_comparison()
    assert snap_compare(app, terminal_size=(100, 30))
    source.close()
