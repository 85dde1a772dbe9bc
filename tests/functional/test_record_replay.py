"""Replay rebuilds what the live engine published: every snapshot, equal field by field.

The engine runs for real against two simulated servers on loopback (probes, /metrics, the port check,
host readings, alert rules, a simulated GPU, agent steps with tool calls on one endpoint beside its chat
probes and alone on another), with a reset, a pause and an interval change while it records. Each snapshot the live engine published is then compared with the replay at the same moment,
once playing forward and once seeking backwards (which restarts from the keyframe before the statistics window
and energy per token's lookback, record/replay.py: in a run this short, the beginning).
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from dataclasses import replace

import pytest

from lpxtop.cli.assemble import build_engine
from lpxtop.config import normalize_url
from lpxtop.engine.gpu.simulated import SimulatedGpuCollector
from lpxtop.model.agent import AgentStepEvent
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.events import SnapshotEvent
from lpxtop.model.snapshot import Snapshot
from lpxtop.record import recorder as recorder_module
from lpxtop.record.export import export
from lpxtop.record.reading import Recording
from lpxtop.record.recorder import Recorder
from lpxtop.record.replay import ReplaySource
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread

WINDOW_S = 1.5  # short, so that samples leave the window within the run


def normalized(snap: Snapshot) -> Snapshot:
    """What a recording cannot know: whether a probe or an agent step was in flight, and the publish counter."""
    return replace(snap, seq=0, endpoints=tuple(
        replace(v, in_flight=False, agent=replace(v.agent, in_flight=False) if v.agent is not None else None)
        for v in snap.endpoints))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Run the engine ~2.2 s with commands in between; return the file and every published snapshot."""
    path = tmp_path_factory.mktemp("rec") / "run.lpxrec"
    published: list[Snapshot] = []
    steps: list[AgentStepEvent] = []
    patch = pytest.MonkeyPatch()
    patch.setattr(recorder_module, "KEYFRAME_EVERY_S", 0.5)
    try:
        with contextlib.ExitStack() as stack:
            sims = [stack.enter_context(start_sim_in_thread(SimConfig(model=f"m{i}", ttft_ms=8 + 10 * i, itl_ms=2,
                                                                      seed=i, fail_rate=0.3 * i,
                                                                      tool_fault_rate=0.3 * i)))
                    for i in range(2)]
            endpoints = [EndpointConfig(name=f"sim-{i}", url=normalize_url(sim.url), interval_s=0.25, max_tokens=6,
                                        metrics_interval_s=0.5, probes=("chat", "agent") if i else ("chat",))
                         for i, sim in enumerate(sims)]
            # agent steps alone: the endpoint's status comes from them
            endpoints.append(EndpointConfig(name="agent-0", url=normalize_url(sims[0].url), interval_s=0.25,
                                            max_tokens=6, metrics_interval_s=0.5, probes=("agent",)))
            gpu = SimulatedGpuCollector(kv_usage=lambda: max(s.server.kv_cache_usage for s in sims))
            engine = build_engine(endpoints, window_s=WINDOW_S, gpu=gpu)
            recorder = Recorder.start_for(engine, path, endpoints=endpoints, strict=True)
            engine.add_listener(lambda e: published.append(e.snapshot) if isinstance(e, SnapshotEvent) else None)
            engine.add_listener(lambda e: steps.append(e) if isinstance(e, AgentStepEvent) else None)
            with engine:
                time.sleep(0.7)
                engine.reset()
                time.sleep(0.4)
                engine.set_paused(True)
                time.sleep(0.3)
                engine.set_paused(False)
                engine.set_interval(0.4)
                time.sleep(0.8)
            recorder.close()
    finally:
        patch.undo()
    assert recorder.failure is None
    RUN_STEPS[str(path)] = steps
    return path, published


RUN_STEPS: dict[str, list[AgentStepEvent]] = {}  # the agent steps the recorded engine finished, by file


def test_replay_equals_every_snapshot_the_engine_published(recorded):
    path, published = recorded
    assert len(published) >= 4
    source = ReplaySource(path, playing=False)
    probes = 0
    for live in published:
        replayed = source.snapshot_at(live.wall_time)
        assert normalized(replayed) == normalized(live), live.wall_time
        probes = max(probes, *(v.probes_sent for v in live.endpoints))
    assert probes >= 2
    last = published[-1]
    assert any(v.ttft_ms is not None for v in last.endpoints) and last.interval_s == pytest.approx(0.4)
    assert any(v.errors for live in published for v in live.endpoints)  # the flaky server's failures are counted
    # the agent windows were replayed too: steps, their times, and the faulty server's classified steps
    agents = [v.agent for live in published for v in live.endpoints if v.agent is not None]
    assert max(a.steps_sent for a in agents) >= 2 and any(a.step_ms is not None for a in agents)
    assert {v.name for v in last.endpoints if v.agent is not None} == {"sim-1", "agent-0"}
    source.close()


def test_seeking_back_from_keyframes_gives_the_same_snapshots(recorded):
    path, published = recorded
    source = ReplaySource(path, playing=False)
    assert source.recording.keyframe_before(published[-1].wall_time - WINDOW_S) is not None
    for live in reversed(published):  # every step is a seek backwards
        assert normalized(source.snapshot_at(live.wall_time)) == normalized(live), live.wall_time
    source.close()


def test_agent_steps_export_as_agent_step_lines(recorded):
    path, _ = recorded
    steps = RUN_STEPS[str(path)]
    out = io.StringIO()
    with Recording(path) as recording:
        counts = export(recording, out, what=["agent"])
        metrics = io.StringIO()
        export(recording, metrics, fmt="openmetrics", what=["agent"])
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert counts == {"agent_step": len(steps)} and len(steps) >= 4
    assert [(r["endpoint"], r["time"], r["ok"], r["error"], r["step_ms"], r["time_to_tool_call_ms"]) for r in rows] \
        == [(e.endpoint, e.step.wall_time, e.step.ok, e.step.error_kind, e.step.step_ms, e.step.time_to_tool_call_ms)
            for e in steps]
    assert list(rows[0])[:5] == ["type", "endpoint", "time", "ok", "error"] and "recorded_at" in rows[0]
    assert "# TYPE lpxtop_agent_step_seconds gauge" in metrics.getvalue()


def test_the_timeline_plays_steps_and_jumps_to_marks(recorded, tmp_path):
    path, published = recorded
    clock = [100.0]
    source = ReplaySource(path, playing=True, speed=2.0, clock=lambda: clock[0])
    timeline = source.timeline
    assert timeline.position() == source.start
    clock[0] += 1.0
    assert timeline.position() == pytest.approx(source.start + 2.0)
    timeline.play(False)
    clock[0] += 5.0
    assert timeline.position() == pytest.approx(source.start + 2.0)
    assert timeline.step(-10) == source.start  # clamped to the recording
    timeline.seek_text("+1.5s")
    assert timeline.position() == pytest.approx(source.start + 1.5)
    assert timeline.faster() == 5.0 and timeline.slower() == 2.0
    timeline.seek(source.end + 60)
    assert timeline.state().at_end
    timeline.play(True)  # from the end, play starts again at the beginning
    assert timeline.position() == source.start
    with pytest.raises(ValueError, match="time of day"):
        timeline.seek_text("yesterday")
    assert timeline.next_mark(1) is None  # this run made no alert, restart or bookmark
    source.close()


def screen_lines(app) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


async def settled_lines(app, pilot, timeout_s: float = 5.0) -> list[str]:
    """The screen once it has stopped changing: the same lines over three pauses in a row, within `timeout_s`
    (the strip under the table follows the cursor's row a message later, which a busy box may not have
    handled after one pause)."""
    deadline = time.monotonic() + timeout_s
    lines, same = screen_lines(app), 0
    while same < 3 and time.monotonic() < deadline:
        await pilot.pause(0.05)
        now = screen_lines(app)
        same = same + 1 if now == lines else 0
        lines = now
    return lines


async def test_the_replayed_dashboard_shows_what_the_live_one_showed_at_the_last_moment(recorded):
    """Pilot: the live dashboard on the engine's last snapshot, and the replay at that moment, side by side."""
    from lpxtop.engine.source import FixedSource
    from lpxtop.ui.app import create_app

    path, published = recorded
    last = published[-1]
    live = create_app(FixedSource(last), poll=False, ssh=False)
    source = ReplaySource(path, playing=False)
    source.timeline.seek(last.wall_time)
    replay = create_app(source, poll=False, ssh=False)
    async with live.run_test(size=(120, 40)) as pilot:
        live_lines = await settled_lines(live, pilot)
    async with replay.run_test(size=(120, 42)) as pilot:  # two more rows: the time bar
        replay_lines = await settled_lines(replay, pilot)
    source.close()
    # Everything between the header and the footer: endpoints, strip, GPU, host, ports panels.
    assert replay_lines[1:39] == live_lines[1:39]
    assert "REPLAY" in replay_lines[0] and "REPLAY" not in live_lines[0]
    assert any(name in "\n".join(live_lines) for name in ("sim-0", "sim-1"))
    assert ("⏸" in replay_lines[39] or "■ end" in replay_lines[39]) and "REPLAY run.lpxrec" in replay_lines[39]
