"""Replay: a SnapshotSource over a recording, with a timeline the UI can drive.

The engine's state is rebuilt by feeding the recorded inputs, in the order the engine's loop produced
them, through the live statistics code (`EndpointWindow`): the same `add`, `add_server_point`, `reset`
and `view(now=…)` calls the engine made. A snapshot replayed at the moment a live one was published
therefore holds the same windows and the same percentiles, by construction.

Seeking never replays hours: a keyframe (the published snapshot without its windows, one a minute)
older than the moment minus the statistics window gives every counter and the last readings, and the
events after it refill the windows exactly (a sample in the window at T arrived after T − window).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from lpxtop.engine import Capabilities, EndpointWindow, Tally, server_kind
from lpxtop.engine.agent import AgentWindow, agent_view, wants_agent, with_agent
from lpxtop.engine.gpu import REPLAY_LOOKBACK_S, EnergyMeter
from lpxtop.engine.traces import TraceJoin, with_chain
from lpxtop.model.agent import AgentStepEvent
from lpxtop.model.alerts import Alert
from lpxtop.model.chain import ChainEvent
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.events import AlertsEvent, ControlEvent, GpuEvent, SampleEvent, ScrapeEvent, SystemEvent
from lpxtop.model.gpu import GpuSnapshot
from lpxtop.model.host import HostSnapshot
from lpxtop.model.ports import LeftoverProcess, PortStatus
from lpxtop.model.server import ServerMetrics
from lpxtop.model.snapshot import Snapshot
from lpxtop.record.reading import Event, Recording
from lpxtop.record.records import MARK_KINDS, EndpointInfo, Mark
from lpxtop.record.store import RecordingError
from lpxtop.record.timeparse import format_moment, parse_moment

SPEEDS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
STEP_S = 10.0
READ_AHEAD_EVENTS = 2000
# A move forward longer than this is a seek (from a keyframe) rather than feeding every event between.
FEED_LIMIT_EXTRA_S = 120.0
# While a file is still being written, look for its new end this often when playback reaches it.
REFRESH_END_S = 2.0


class _Endpoint:
    __slots__ = ("config", "model", "window", "agent", "server", "known", "_window_s", "_max_samples",
                 "_include_limited")

    def __init__(self, name: str, window_s: float, max_samples: int, include_client_limited: bool) -> None:
        self.config = EndpointConfig(name=name, url="")
        self.model: str | None = None
        self.window = EndpointWindow(window_s, max_samples, include_client_limited=include_client_limited)
        # the agent-step probe's window, as the engine keeps one (engine/endpoints.py: EndpointState.agent)
        self.agent: AgentWindow | None = None
        self.server: ServerMetrics | None = None
        self.known = False  # its settings were recorded (a view is shown only then, as live)
        self._window_s, self._max_samples, self._include_limited = window_s, max_samples, include_client_limited

    def set_config(self, config: EndpointConfig) -> None:
        self.config = config
        if wants_agent(config):
            self.agent_window()

    def agent_window(self) -> AgentWindow:
        if self.agent is None:
            self.agent = AgentWindow(self._window_s, self._max_samples, include_client_limited=self._include_limited)
        return self.agent

    def view(self, now: float):
        """The engine's `EndpointState.view` (engine/endpoints.py), with nothing in flight (a recording does not know)."""
        view = self.window.view(self.config, now=now, model=self.model, server=self.server,
                                server_kind=self.server_kind)
        if self.agent is not None:
            view = with_agent(view, self.config, agent_view(self.agent, self.config, now))
        return view

    @property
    def server_kind(self) -> str:
        return server_kind(self.config, self.server)


class ReplayState:
    """The engine's state after the events applied so far."""

    def __init__(self, window_s: float, max_samples: int, defaults: Snapshot,
                 include_client_limited: bool = False) -> None:
        self.window_s = window_s
        self.max_samples = max_samples
        self.include_client_limited = include_client_limited
        self.defaults = defaults
        self.clear()

    def clear(self) -> None:
        self.endpoints: dict[str, _Endpoint] = {}
        self.gpu = GpuSnapshot(status="unavailable: not collected yet")
        self.host: HostSnapshot | None = None
        self.ports: tuple[PortStatus, ...] = ()
        self.leftovers: tuple[LeftoverProcess, ...] = ()
        self.alerts: tuple[Alert, ...] = ()
        self.paused = False
        self.interval_s: float | None = None
        self.template = self.defaults
        self.seq = 0  # the last event applied
        self.t: float | None = None  # the moment the state stands at
        self.energy = EnergyMeter()  # as the engine's, fed the same readings
        self.chain: TraceJoin | None = None  # the requests joined to their server spans, once a ChainEvent came

    def restore(self, after_seq: int, t: float, keyframe: Snapshot) -> None:
        """Start from a keyframe: counters and last readings as published then, windows empty."""
        self.clear()
        self.template = keyframe
        for view in keyframe.endpoints:
            ep = self._endpoint(view.name)
            ep.set_config(view.config)
            ep.model, ep.server, ep.known = view.model, view.server, True
            ep.window.tally = Tally(view.probes_sent, view.probes_ok, view.probes_failed, view.probes_client_limited,
                                    view.errors, view.last_error, view.last_error_time)
            if view.agent is not None:
                counts = view.agent
                ep.agent_window().tally = Tally(counts.steps_sent, counts.steps_ok, counts.steps_failed,
                                                counts.steps_client_limited, counts.errors, counts.last_error,
                                                counts.last_error_time)
        self.gpu, self.host, self.ports, self.leftovers = keyframe.gpu, keyframe.host, keyframe.ports, keyframe.leftovers
        self.alerts = keyframe.alerts
        self.paused, self.interval_s = keyframe.paused, keyframe.interval_s
        self.seq, self.t = after_seq, t

    def _endpoint(self, name: str) -> _Endpoint:
        ep = self.endpoints.get(name)
        if ep is None:
            ep = self.endpoints[name] = _Endpoint(name, self.window_s, self.max_samples, self.include_client_limited)
        return ep

    def apply(self, event: Event) -> None:
        """One input, as the engine handled it (engine/endpoints.py: _probe, _scrape; collectors.py: _collect_*; runner.py: _publish, commands)."""
        record = event.record
        kind = type(record)
        if kind is SampleEvent:
            self._endpoint(record.endpoint).window.add(record.sample)
        elif kind is AgentStepEvent:
            self._endpoint(record.endpoint).agent_window().add(record.step)
        elif kind is ScrapeEvent:
            ep = self._endpoint(record.endpoint)
            ep.server = record.metrics
            self.energy.add_scrape(record.endpoint, record.metrics)
            if record.metrics.status == "ok":
                ep.window.add_server_point(record.metrics, record.wall_time)
        elif kind is GpuEvent:
            self.gpu = record.gpu
            self.energy.add_gpu(record.gpu)
        elif kind is SystemEvent:
            self.host, self.ports, self.leftovers = record.host, tuple(record.ports), tuple(record.leftovers)
        elif kind is AlertsEvent:
            self.alerts = tuple(record.alerts)
        elif kind is EndpointInfo:
            ep = self._endpoint(record.config.name)
            ep.set_config(record.config)
            ep.model, ep.known = record.model, True
        elif kind is ChainEvent:
            if self.chain is None:
                self.chain = TraceJoin(window_s=self.window_s, max_samples=self.max_samples)
            settled = record.joined or record.unjoined
            if settled is not None:
                self.chain.add_outcome(settled)
        elif kind is ControlEvent:
            if record.command == "reset":  # as the engine's _reset: every window, the agent's too
                for ep in self.endpoints.values():
                    ep.window.reset()
                    if ep.agent is not None:
                        ep.agent.reset()
                if self.chain is not None:
                    self.chain.reset()
            elif record.command == "paused":
                self.paused = bool(record.value)
            elif record.command == "interval" and isinstance(record.value, (int, float)):
                self.interval_s = float(record.value)
        self.seq = event.seq
        self.t = event.t if self.t is None else max(self.t, event.t)

    def snapshot(self, now: float, seq: int) -> Snapshot:
        """The snapshot the engine would have published at `now` (in_flight is not recorded: False)."""
        views = tuple(ep.view(now) for ep in self.endpoints.values() if ep.known)
        if self.chain is not None:  # the recording had a receiver: the chain as the engine's feed showed it
            views = tuple(with_chain(v, self.chain, now) for v in views)
        interval = self.interval_s
        if interval is None:
            interval = min((ep.config.interval_s for ep in self.endpoints.values() if ep.known), default=2.0)
        return self.energy.apply(replace(
            self.template,
            wall_time=now,
            paused=self.paused,
            interval_s=interval,
            endpoints=views,
            gpu=self.gpu,
            host=self.host,
            ports=self.ports,
            leftovers=self.leftovers,
            alerts=self.alerts,
            seq=seq,
        ))


@dataclass(frozen=True)
class TimelineState:
    """What the time bar shows; read by the UI each repaint."""

    name: str
    start: float
    end: float
    position: float
    playing: bool
    speed: float
    marks: tuple[Mark, ...]
    damage: str | None = None
    at_end: bool = False


class ReplaySource:
    """A recording as a SnapshotSource: `snapshot()` is the state at the timeline's position.

    It declares a `timeline` (play, pause, step, speed, jump) and no controls: the keys that steer a live
    measurement move the timeline instead, or say why they do nothing.
    """

    def __init__(self, path: str | Path, *, at: float | None = None, playing: bool | None = None,
                 speed: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.recording = Recording(path)
        span = self.recording.time_range()
        if span is None:
            summary = self.recording.damage_summary()
            raise RecordingError(f"{path}: the recording holds no readable events"
                                 + (f" ({summary})" if summary else " (it was stopped before its first second?)"))
        self.start, self.end = span
        self.end = self._through_marks(self.end)
        first = self.recording.first_keyframe() if self.recording.pruned_after_seq else None
        if first is not None:  # retention dropped the beginning: replay starts at the oldest keyframe
            self.start = max(self.start, first[1])
        meta = self.recording.meta
        defaults = Snapshot(wall_time=self.start, host_name=str(meta.get("host") or "?"),
                            version=str(meta.get("lpxtop_version") or "?"),
                            started_at=float(meta.get("created_at") or self.start), paused=False, interval_s=2.0)
        self.state = ReplayState(self.recording.window_s, self.recording.max_samples, defaults,
                                 include_client_limited=bool(meta.get("include_client_limited")))
        self._buffer: deque[Event] = deque()
        self._buffered_seq = 0  # the last seq read into the buffer
        self._exhausted = False
        self._snapshot: Snapshot | None = None
        self._built_at: float | None = None
        self._seq = 0
        self._first: tuple[int, float, Snapshot] | None | bool = None
        self.timeline = Timeline(self, at=at, playing=playing, speed=speed, clock=clock)
        self.capabilities = Capabilities(timeline=self.timeline, readonly=True)

    # ---- SnapshotSource ----

    def snapshot(self) -> Snapshot:
        position = self.timeline.position()
        if self._snapshot is None or position != self._built_at:
            self._move_to(position)
            self._seq += 1
            self._snapshot = self.state.snapshot(position, self._seq)
            self._built_at = position
        return self._snapshot

    def snapshot_at(self, t: float) -> Snapshot:
        """The snapshot at `t` without moving the timeline's own position (tests, compare, export)."""
        self._move_to(t)
        self._seq += 1
        self._built_at = None
        return self.state.snapshot(t, self._seq)

    def close(self) -> None:
        self.recording.close()

    # ---- moving through the stream ----

    def _move_to(self, t: float) -> None:
        state = self.state
        if state.t is not None and t >= state.t and t - state.t <= state.window_s + FEED_LIMIT_EXTRA_S:
            self._feed_until(t)
            return
        self._seek(t)

    def _seek(self, t: float) -> None:
        state = self.state
        # one statistics window back, and far enough for energy per token's interval and the readings before it
        keyframe = self.recording.keyframe_before(t - max(state.window_s, REPLAY_LOOKBACK_S))
        if keyframe is None and self.recording.pruned_after_seq:
            keyframe = self.recording.first_keyframe()
        if keyframe is not None:
            state.restore(*keyframe)
        else:
            state.clear()  # from the very beginning: an empty engine, as when the recording began
            first = self._first_keyframe()
            if first is not None:
                state.template = first[2]  # host, version, start time as the engine published them
        self._buffer.clear()
        self._buffered_seq = state.seq
        self._exhausted = False
        self._feed_until(t)
        state.t = t if state.t is None else max(state.t, t)

    def _first_keyframe(self) -> tuple[int, float, Snapshot] | None:
        if self._first is None:
            self._first = self.recording.first_keyframe() or False
        return self._first or None

    def _feed_until(self, t: float) -> None:
        state = self.state
        while True:
            if not self._buffer and not self._fill():
                break
            event = self._buffer[0]
            if event.t > t:
                break
            self._buffer.popleft()
            state.apply(event)
        state.t = t if state.t is None else max(state.t, t)

    def _fill(self) -> bool:
        """Read the next events into the buffer (a bounded read-ahead); False at the end of what is written."""
        if self._exhausted:
            return False
        events = self.recording.events(after_seq=self._buffered_seq)
        for n, event in enumerate(events, start=1):
            self._buffer.append(event)
            self._buffered_seq = event.seq
            if n >= READ_AHEAD_EVENTS:
                break
        if not self._buffer:
            self._exhausted = True
            return False
        return True

    def refresh_end(self) -> None:
        """A file still being written grows: find its new end."""
        self.recording.refresh()
        span = self.recording.time_range()
        end = self._through_marks(span[1]) if span is not None else self.end
        if end > self.end:
            self.end = end
            self._exhausted = False

    def _through_marks(self, end: float) -> float:
        """The end of the timeline: the last event, or a later mark (a load step's mark sits at its first
        request, which can come after the engine's last reading), so every mark is a place to jump to."""
        latest = max((m.t for m in self.marks()), default=end)
        return max(end, latest)

    def marks(self) -> tuple[Mark, ...]:
        return tuple(self.recording.marks())


class Timeline:
    """Play, pause, step, speed, jump: the replay's controls. Times are Unix seconds."""

    def __init__(self, source: ReplaySource, *, at: float | None, playing: bool | None, speed: float,
                 clock: Callable[[], float]) -> None:
        self._source = source
        self._clock = clock
        self.name = source.recording.path.name
        self.speed = speed if speed > 0 else 1.0
        start_at = source.start if at is None else at
        self._anchor_pos = min(max(start_at, source.start), source.end)
        self._anchor_clock = clock()
        self.playing = (at is None) if playing is None else playing
        self._marks: tuple[Mark, ...] = source.marks()
        self._last_refresh = float("-inf")

    @property
    def start(self) -> float:
        return self._source.start

    @property
    def end(self) -> float:
        return self._source.end

    def position(self) -> float:
        """The moment shown now (advancing while playing; playback stops at the end)."""
        if not self.playing:
            return self._anchor_pos
        pos = self._anchor_pos + (self._clock() - self._anchor_clock) * self.speed
        if pos >= self.end:
            now = self._clock()
            if now - self._last_refresh >= REFRESH_END_S:
                self._last_refresh = now
                self._source.refresh_end()
                self._marks = self._source.marks()
            if pos >= self.end:
                self._anchor_pos, self._anchor_clock, self.playing = self.end, self._clock(), False
                return self.end
        return pos

    def _set(self, t: float) -> None:
        self._anchor_pos = min(max(t, self.start), self.end)
        self._anchor_clock = self._clock()

    def play(self, on: bool | None = None) -> bool:
        """Play or pause (toggle when `on` is None); playing from the end starts again from the start."""
        pos = self.position()
        on = (not self.playing) if on is None else on
        if on and pos >= self.end:
            pos = self.start
        self._set(pos)
        self.playing = on
        return on

    def step(self, seconds: float) -> float:
        self._set(self.position() + seconds)
        return self._anchor_pos

    def seek(self, t: float) -> float:
        self._set(t)
        return self._anchor_pos

    def seek_text(self, text: str) -> float:
        """Jump to a moment written as `parse_moment` accepts; ValueError says what is accepted."""
        return self.seek(parse_moment(text, self.start, self.end))

    def faster(self) -> float:
        return self._set_speed(next((s for s in SPEEDS if s > self.speed), SPEEDS[-1]))

    def slower(self) -> float:
        return self._set_speed(next((s for s in reversed(SPEEDS) if s < self.speed), SPEEDS[0]))

    def _set_speed(self, speed: float) -> float:
        self._set(self.position())
        self.speed = speed
        return speed

    @property
    def marks(self) -> tuple[Mark, ...]:
        return self._marks

    def next_mark(self, direction: int = 1, kinds: Iterable[str] | None = None) -> Mark | None:
        """Jump to the next (or previous) mark of `kinds` (any of MARK_KINDS by default)."""
        wanted = set(kinds) if kinds is not None else set(MARK_KINDS) | {m.kind for m in self._marks}
        pos = self.position()
        candidates = [m for m in self._marks if m.kind in wanted and self.start <= m.t <= self.end]
        if direction > 0:
            found = next((m for m in candidates if m.t > pos + 1e-6), None)
        else:
            found = next((m for m in reversed(candidates) if m.t < pos - 1e-6), None)
        if found is not None:
            self._set(found.t)
        return found

    def state(self) -> TimelineState:
        pos = self.position()
        return TimelineState(
            name=self.name, start=self.start, end=self.end, position=pos, playing=self.playing, speed=self.speed,
            marks=self._marks, damage=self._source.recording.damage_summary(), at_end=pos >= self.end,
        )

    def describe(self, t: float | None = None) -> str:
        t = self.position() if t is None else t
        return format_moment(t)

