"""`lpxtop once`: N probes per endpoint and one snapshot, on the caller's thread, within one deadline.

The same probe loops as the live engine, with a count (endpoints in parallel, at random gaps); each server
scraped meanwhile on a random schedule of its own; then the port check and the GPU, and the snapshot.
`OnceCollection` is a part of `Engine` (runner.py): `Engine.collect_once`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from lpxtop.engine.agent import wants_chat
from lpxtop.engine.collectors import prepare
from lpxtop.engine.endpoints import EndpointState
from lpxtop.engine.probe import failed_sample
from lpxtop.engine.probe.clientlimit import LatenessWatch
from lpxtop.engine.probe.schedule import next_gap
from lpxtop.http import HttpClient
from lpxtop.loopthread import run_loop
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.gpu import GpuSnapshot
from lpxtop.model.snapshot import Snapshot

if TYPE_CHECKING:
    from lpxtop.engine.collectors import GpuSource, HostSource, PortSource
    from lpxtop.engine.runner import EngineSettings

log = logging.getLogger("lpxtop.engine")

ONCE_INTERVAL_S = 0.2  # the mean gap between probes when --interval is not given
ONCE_SCRAPE_MEAN_S = 0.25  # the mean gap between scrapes while probing
ONCE_REPORT_RESERVE_S = 0.5  # of --deadline, kept for the port check and the report after probing


class OnceCollection:
    """`collect_once` and its parts: a part of `Engine` (runner.py)."""

    settings: EngineSettings
    _gpu: GpuSource | None
    _host: HostSource | None
    _ports: PortSource | None
    _discover: Callable[[HttpClient], Any] | None
    _configs: list[EndpointConfig]
    _states: dict[str, EndpointState]
    _gpu_snapshot: GpuSnapshot
    _snapshot: Snapshot
    _rng: random.Random
    _lateness: LatenessWatch

    def collect_once(self, samples: int = 3, timeout_s: float = 120.0, interval_s: float | None = None) -> Snapshot:
        """Run `samples` probes per endpoint (endpoints in parallel, at random gaps averaging `interval_s`,
        default ONCE_INTERVAL_S), scrape each server meanwhile on its own schedule, collect, and return a
        snapshot. Everything, discovery included, ends within `timeout_s`."""
        return run_loop(self._collect_once(samples, timeout_s, interval_s or ONCE_INTERVAL_S))

    async def _collect_once(self, samples: int, timeout_s: float, interval_s: float) -> Snapshot:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s

        def left(reserve: float = 0.0) -> float:
            return max(0.0, deadline - loop.time() - min(reserve, timeout_s / 4))

        self._lateness.open()
        try:
            # collectors made on first use are built now, before any probe is in flight (assemble.Later)
            for source in (self._gpu, self._ports, self._host):
                await _within(prepare(source), left(ONCE_REPORT_RESERVE_S), "collector set-up")
            async with self._client() as client:
                if self._discover is not None and not self._configs:
                    await _within(self._run_discovery(client), left(ONCE_REPORT_RESERVE_S), "discovery")
                for config in self._configs:
                    self._add_state(config)
                gpu = asyncio.ensure_future(self._collect_gpu())
                runs = [asyncio.ensure_future(self._once_endpoint(s, client, samples, interval_s))
                        for s in self._states.values()]
                done, pending = await asyncio.wait([*runs, gpu], timeout=left(ONCE_REPORT_RESERVE_S))
                if pending:
                    log.warning("once: gave up after %.1f s (--deadline)", timeout_s)
                    for task in pending:
                        task.cancel()
                    await asyncio.gather(*pending, return_exceptions=True)
                    for state in self._states.values():
                        # the probe that was cut, or an endpoint that never got to probe, is a failure the
                        # report names (kind "deadline")
                        if state.in_flight:
                            why = "the probe was still running"
                        elif state.window.tally.sent == 0:
                            why = ("no probe could start (GET /v1/models had not answered)" if not state.models_known
                                   else "no probe had finished")
                        else:
                            continue
                        state.in_flight = False
                        self._record(state, failed_sample(
                            state.config, f"deadline: {why} when --deadline ({timeout_s:g} s) passed"))
                models = [s.models_task for s in self._states.values() if s.models_task is not None]
                if models:
                    await _within(asyncio.gather(*models, return_exceptions=True), left(), "GET /models")
                # after the probes, so the port check knows what each endpoint's /v1/models serves
                await _within(self._collect_host_and_ports(), left(), "port check")
                if self._gpu_snapshot.devices:
                    # the GPU was read before the port check said which PID serves which endpoint: read it
                    # again (about 1 ms) so its processes are joined to their endpoints and, after the last
                    # scrape, its energy counter closes the interval energy per token is taken over
                    await _within(self._collect_gpu(), left(), "GPU")
        finally:
            self._lateness.close()
        self._publish(self._build_snapshot())
        return self._snapshot

    async def _once_endpoint(self, state: EndpointState, client: HttpClient, samples: int, interval_s: float) -> None:
        """`once` for one endpoint: the probes, and scrapes on a schedule of their own while they run."""
        scraping = None
        if state.scraper is not None:
            scraping = asyncio.create_task(self._scrape_while_probing(state, client))
        try:
            loops = []
            if wants_chat(state.config):
                loops.append(self._probe_loop(state, client, count=samples, interval_s=interval_s))
            if state.agent is not None:
                loops.append(self._agent_loop(state, client, count=samples, interval_s=interval_s))
            await asyncio.gather(*loops)
        finally:
            if scraping is not None:
                scraping.cancel()
                await asyncio.gather(scraping, return_exceptions=True)
        if state.scraper is not None:
            # The last scrape reads the latency histograms whatever their 10 s schedule, so the server's
            # window (its exact means, the gap) covers every probe of the run, not only its first seconds.
            await self._scrape(state, client, histograms=True)
            if state.server is None or _passing_failure(state.server.status):
                # one answer decides the report: a passing failure gets one more try
                await asyncio.sleep(0.5)
                await self._scrape(state, client, histograms=True)

    async def _scrape_while_probing(self, state: EndpointState, client: HttpClient) -> None:
        """Scrape at random gaps (the probes' schedule, its own clock): what the server showed across the run,
        not only right after lpxtop's own probe ended (its slot not yet refilled)."""
        while True:
            await self._scrape(state, client)
            await asyncio.sleep(next_gap(min(ONCE_SCRAPE_MEAN_S, state.config.metrics_interval_s), self._rng,
                                         schedule=self.settings.probe_schedule))


def _passing_failure(status: str) -> bool:
    """A scrape failure that may well not happen again (unlike a server without /metrics)."""
    return status.startswith("error:") or "timed out" in status


async def _within(work: Awaitable[Any], seconds: float, what: str) -> None:
    """Await `work` for at most `seconds` (then cancel it); `once` must end within its deadline."""
    try:
        await asyncio.wait_for(work, max(0.001, seconds))
    except asyncio.TimeoutError:
        log.warning("once: %s cut at the deadline", what)
