"""One endpoint in the engine: what it keeps (`EndpointState`) and the loops it runs (`EndpointLoops`).

Each endpoint has a chat-probe loop (one probe in flight, random gaps: probe/schedule.py), an agent-step loop
with --probe agent (one step in flight, the same schedule), and a /metrics scrape loop (single-flight, every
`metrics_interval_s`). Everything here runs on the engine's loop; the supervisor (runner.py) starts the loops,
and `once` (once.py) runs them with a count.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from lpxtop.engine.agent import wants_agent
from lpxtop.engine.collectors import every
from lpxtop.engine.gpu.accel.energy import EnergyMeter
from lpxtop.engine.model_resolution import name_served_models, resolve_model
from lpxtop.engine.probe import failed_sample, rejects_stream_options, run_probe
from lpxtop.engine.probe.clientlimit import LatenessWatch
from lpxtop.engine.probe.schedule import next_gap
from lpxtop.engine.window import EndpointWindow, server_kind
from lpxtop.http import HttpClient
from lpxtop.loopthread import LoopThread
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.events import SampleEvent, ScrapeEvent
from lpxtop.model.probe import Sample
from lpxtop.model.server import ServerMetrics
from lpxtop.model.snapshot import EndpointView
from lpxtop.textsafe import scrub

if TYPE_CHECKING:
    from lpxtop.engine.agent.prober import AgentProber
    from lpxtop.engine.runner import EngineSettings
    from lpxtop.model.events import EngineEvent

log = logging.getLogger("lpxtop.engine")

# the bounds of the mean gap between probes (--interval, `+`/`-`); the longest Retry-After kept is the upper one
MIN_INTERVAL_S = 0.25
MAX_INTERVAL_S = 60.0
VIEW_MAX_AGE_S = 10.0


class Scraper(Protocol):
    async def scrape(self, client: HttpClient) -> ServerMetrics: ...


class Waker:
    """What a probe loop sleeps on between probes: `set()` (reset, interval change, resume) ends the nap.

    One timer and one future per nap. `asyncio.wait_for(event.wait(), delay)` costs a task and three or
    four more passes of the loop for each of the ~2 naps a second that 4 endpoints take.
    """

    __slots__ = ("_waiter",)

    def __init__(self) -> None:
        self._waiter: asyncio.Future[bool] | None = None

    async def nap(self, seconds: float | None) -> bool:
        """Wait `seconds` (None: without end) or until `set()`; True when `set()` ended it. A `set()`
        before the nap began is not kept."""
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = None if seconds is None else loop.call_later(seconds, _resolve, waiter, False)
        try:
            return bool(await waiter)
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def set(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)


def _resolve(waiter: asyncio.Future, value: object = None) -> None:
    if not waiter.done():
        waiter.set_result(value)


class EndpointState:
    """Everything the engine keeps for one endpoint; touched only on the engine's loop."""

    def __init__(self, config: EndpointConfig, settings: EngineSettings, scraper: Scraper | None) -> None:
        self.config = config
        self.window = EndpointWindow(settings.window_s, settings.max_samples,
                                     include_client_limited=settings.include_client_limited)
        self.scraper = scraper
        self.model: str | None = config.model
        self.served_models: tuple[str, ...] = ()
        self.models_checked_at = 0.0
        self.models_known = False  # a GET /models has finished (with or without models)
        self.models_task: asyncio.Task | None = None  # the check beside the probes when the model is known
        self.include_usage = True  # ask for a usage chunk until the server refuses stream_options
        self.version = 0  # bumped by every change a view shows; the cached view is reused until then
        self._view: tuple[int, float, EndpointView] | None = None
        self.server: ServerMetrics | None = None
        self.in_flight = False
        self.wake = Waker()
        self.tasks: list[asyncio.Task] = []
        # The agent-step probe: a second probe loop with its own window and its own nap (engine/agent).
        self.agent: AgentProber | None = None
        if wants_agent(config):  # the agent probe's modules load only for an endpoint that runs it
            from lpxtop.engine.agent.prober import AgentProber

            self.agent = AgentProber(config, settings.window_s, settings.max_samples,
                                     include_client_limited=settings.include_client_limited)
        self.agent_wake = Waker()

    def wake_all(self) -> None:
        self.wake.set()
        self.agent_wake.set()

    def changed(self) -> None:
        self.version += 1

    def view(self, now: float) -> EndpointView:
        """The summary of this endpoint, recomputed only after a change (or every 10 s, for pruning)."""
        cached = self._view
        if cached is not None and cached[0] == self.version and now - cached[1] < VIEW_MAX_AGE_S:
            return cached[2]
        view = self.window.view(self.config, now=now, model=self.model, server=self.server,
                                server_kind=self.server_kind, in_flight=self.in_flight)
        if self.agent is not None:
            from lpxtop.engine.agent.prober import with_agent

            view = with_agent(view, self.config, self.agent.view(now))
        self._view = (self.version, now, view)
        return view

    @property
    def server_kind(self) -> str:
        return server_kind(self.config, self.server)


def pending_view(config: EndpointConfig, settings: EngineSettings, now: float) -> EndpointView:
    """The view of an endpoint the engine has not started on yet (status `pending`, every figure unknown):
    the dashboard's first frame shows the endpoints it was given, before the engine's loop runs."""
    window = EndpointWindow(settings.window_s, settings.max_samples, include_client_limited=settings.include_client_limited)
    return window.view(config, now=now, model=config.model, server=None, server_kind=server_kind(config, None))



class EndpointLoops:
    """The probe, agent-step and scrape loops of each endpoint: a part of `Engine` (runner.py).

    It reads the supervisor's settings, pause and interval scale, and reports every result through its
    `_dirty` flag, its listeners (`_emit`) and, for an endpoint's first figures, `_publish_now`.
    """

    settings: EngineSettings
    _paused: bool
    _interval_scale: float
    _rng: random.Random
    _dirty: bool
    _listeners: list[Callable[[EngineEvent], None]]
    _loop_thread: LoopThread | None
    _energy: EnergyMeter
    _lateness: LatenessWatch

    async def _probe_loop(
        self, state: EndpointState, client: HttpClient, count: int | None = None, interval_s: float | None = None
    ) -> None:
        """One probe at a time per endpoint, each after a random gap (schedule.py); `count` probes, or forever."""
        await self._repeat(lambda: self._probe(state, client), state, state.wake, count, interval_s)

    async def _agent_loop(
        self, state: EndpointState, client: HttpClient, count: int | None = None, interval_s: float | None = None
    ) -> None:
        """One agent step (two calls to the server) at a time per endpoint, on the probes' schedule."""
        await self._repeat(lambda: self._agent_step(state, client), state, state.agent_wake, count, interval_s)

    async def _repeat(
        self,
        step: Callable[[], Awaitable[Sample | None]],
        state: EndpointState,
        wake: Waker,
        count: int | None,
        interval_s: float | None,
    ) -> None:
        sent = 0
        while count is None or sent < count:
            while self._paused:
                await wake.nap(None)
            sample = await step()
            sent += 1
            if count is not None and sent >= count:
                return
            await self._wait_for_next(state, sample, interval_s, wake)

    async def _wait_for_next(
        self, state: EndpointState, sample: Sample | None, interval_s: float | None, wake: Waker
    ) -> None:
        """The gap before the next probe. A new interval draws a new gap at once (the clock has no memory,
        so that is still an exponential gap); resume ends the wait."""
        retry_after = min(sample.retry_after_s, MAX_INTERVAL_S) if sample is not None and sample.retry_after_s else 0.0
        while True:
            scale = self._interval_scale
            mean = (interval_s or state.config.interval_s) * scale
            gap = max(next_gap(mean, self._rng, schedule=self.settings.probe_schedule), retry_after)
            woken = await wake.nap(gap)
            if not woken or self._paused or scale == self._interval_scale:
                return

    async def _probe(self, state: EndpointState, client: HttpClient) -> Sample | None:
        try:
            model, error = await resolve_model(state, client)
            state.in_flight = True
            state.changed()
            self._dirty = True
            if model is None and error is not None:
                sample = failed_sample(state.config, error)
            else:
                sample, late = await self._lateness.run(state.config.name,
                                                        lambda: self._run_probe(state, client, model))
                if late:
                    sample = replace(sample, client_limited=True)
                if not sample.ok:
                    sample = await name_served_models(state, sample, model)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug in one probe must not stop the others
            log.exception("probe of %s failed unexpectedly", state.config.name)
            sample = failed_sample(state.config, f"other: {type(exc).__name__}: {exc}")
        finally:
            state.in_flight = False
        self._record(state, sample)
        return sample

    async def _run_probe(self, state: EndpointState, client: HttpClient, model: str | None) -> Sample:
        sample = await run_probe(client, state.config, model, include_usage=state.include_usage)
        if state.include_usage and rejects_stream_options(sample):
            state.include_usage = False
            sample = await run_probe(client, state.config, model, include_usage=False)
        return sample

    def _record(self, state: EndpointState, sample: Sample) -> None:
        """Put a finished probe into the window; a sample the statistics cannot take is logged, not fatal.

        The server's words in it (an error message that may echo the request's key, a model id with
        terminal escapes) pass through `textsafe.scrub` here, where they enter the engine's records,
        so every reader (UI, JSON, table, listeners) gets them clean."""
        message, model = sample.error_message, sample.model
        if (message and scrub(message) != message) or (model and scrub(model) != model):
            sample = replace(sample, error_message=scrub(message), model=scrub(model))
        try:
            state.window.add(sample)
        except Exception:  # noqa: BLE001 - no sample may stop an endpoint's probe loop
            log.exception("the statistics of %s could not take a sample; left out", state.config.name)
        state.changed()
        self._dirty = True
        if self._listeners:
            self._emit(SampleEvent(state.config.name, sample))
        if state.window.tally.sent == 1 and self._loop_thread is not None:
            self._publish_now()  # an endpoint's first figures go out at once, not at the next publish tick
            self._check_first_probes()

    async def _agent_step(self, state: EndpointState, client: HttpClient) -> None:
        prober = state.agent
        assert prober is not None
        try:
            model: str | None = None
            error: str | None = None
            if not state.config.is_platform:  # an agent platform has no /v1/models; its model is its business
                model, error = await resolve_model(state, client)
            prober.in_flight = True
            state.changed()
            self._dirty = True
            if not state.config.is_platform and model is None and error is not None:
                step = prober.failed(error)
            else:
                step, late = await self._lateness.run(state.config.name, lambda: prober.step(client, model))
                if late:
                    step = replace(step, client_limited=True)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug in one step must not stop the loop
            log.exception("agent step of %s failed unexpectedly", state.config.name)
            step = prober.failed(f"other: {type(exc).__name__}: {exc}")
        finally:
            prober.in_flight = False
        try:
            prober.window.add(step)
        except Exception:  # noqa: BLE001 - no step may stop an endpoint's agent loop
            log.exception("the agent statistics of %s could not take a step; left out", state.config.name)
        state.changed()
        self._dirty = True
        if self._listeners:
            # the agent records load with the agent probe, not before the first frame
            from lpxtop.model.agent import AgentStepEvent

            self._emit(AgentStepEvent(state.config.name, step))

    async def _scrape_loop(self, state: EndpointState, client: HttpClient) -> None:
        async def scrape_unless_paused() -> None:
            if not self._paused:
                await self._scrape(state, client)

        await self._after_first_probes()
        await every(state.config.metrics_interval_s, scrape_unless_paused)

    async def _scrape(self, state: EndpointState, client: HttpClient, *, histograms: bool = False) -> None:
        assert state.scraper is not None
        try:
            metrics = await state.scraper.scrape(client, histograms=histograms)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            log.exception("scrape of %s failed unexpectedly", state.config.name)
            metrics = ServerMetrics(status=f"error: {type(exc).__name__}: {exc}")
        if metrics.status != "ok" and (state.server is None or state.server.status != metrics.status):
            log.info("metrics of %s: %s", state.config.name, metrics.status)
        state.server = metrics
        self._energy.add_scrape(state.config.name, metrics)
        now = time.time()
        if metrics.status == "ok":
            state.window.add_server_point(metrics, now)
        state.changed()
        self._dirty = True
        if self._listeners:
            self._emit(ScrapeEvent(state.config.name, now, metrics))
