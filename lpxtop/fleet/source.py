"""`FleetSource`: a SnapshotSource that reads a whole fleet of lpxtop exporters back from Prometheus.

The UI renders its snapshots as it renders the live engine's and cannot tell them apart, except that
it declares no controls: the keys that steer probing (pause, reset, interval, process signals) say why
(its capabilities' `refusals`). A background thread with its own event loop asks Prometheus every
`refresh_s`; the UI only ever reads the newest snapshot. Prometheus down, slow or refusing queries
becomes an alert line (and the last good rows stay on screen), never an exception; so does an answer
the view cannot use: the poller never stops.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType

from lpxtop import __version__, textsafe
from lpxtop.engine import Capabilities
from lpxtop.fleet.build import Reading, alerts, endpoint_views, gpus, ports
from lpxtop.fleet.client import Answer, PromClient, PromError
from lpxtop.fleet.promql import FleetQueries, duration_seconds
from lpxtop.http import HttpClient
from lpxtop.loopthread import LoopThread
from lpxtop.model.alerts import Alert
from lpxtop.model.snapshot import Snapshot

log = logging.getLogger("lpxtop.fleet")

CONCURRENT_QUERIES = 8
CHART_POINTS = 60


@dataclass(frozen=True)
class FleetSettings:
    prometheus_url: str
    queries: FleetQueries = field(default_factory=FleetQueries)
    refresh_s: float = 5.0
    chart_refresh_s: float = 15.0
    timeout_s: float = 5.0
    max_series: int = 2000
    headers: tuple[tuple[str, str], ...] = ()


class FleetReader:
    """One refresh: every query, at most CONCURRENT_QUERIES at a time, all within about 2 × timeout_s."""

    def __init__(self, settings: FleetSettings) -> None:
        self.settings = settings
        self.prom = PromClient(settings.prometheus_url, timeout_s=settings.timeout_s,
                               max_series=settings.max_series, headers=dict(settings.headers))

    async def read(self, http: HttpClient, *, charts: bool) -> Reading:
        now = time.time()
        reading = Reading(taken_at=now)
        queries = self.settings.queries.instant()
        # The first query tells whether Prometheus answers at all: if not, the others are not sent
        # (a hanging Prometheus would otherwise cost every query's timeout).
        first = "rows"
        try:
            reading.answers[first] = await self.prom.query(http, queries[first], at=now)
        except PromError as exc:
            reading.errors[first] = str(exc)
            return reading
        slots = asyncio.Semaphore(CONCURRENT_QUERIES)

        async def one(key: str, promql: str, ranged: bool) -> None:
            async with slots:
                try:
                    if ranged:
                        window = duration_seconds(self.settings.queries.window)
                        step = max(1.0, window / CHART_POINTS)
                        answer = await self.prom.query_range(http, promql, now - window, now, step)
                        reading.charts[key] = answer
                    else:
                        reading.answers[key] = await self.prom.query(http, promql, at=now)
                except PromError as exc:
                    reading.errors[key] = str(exc)

        jobs = [one(k, q, False) for k, q in queries.items() if k != first]
        if charts:
            jobs += [one(k, q, True) for k, q in self.settings.queries.charts().items()]
        tasks = [asyncio.ensure_future(job) for job in jobs]
        done, pending = await asyncio.wait(tasks, timeout=self.settings.timeout_s * 2 + 1)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
            reading.errors.setdefault("deadline", f"{len(pending)} queries did not finish within "
                                      f"{self.settings.timeout_s * 2 + 1:g} s (Prometheus is slow)")
        return reading


def status_lines(settings: FleetSettings, reading: Reading, last_good: float | None) -> list[Alert]:
    """What the alerts bar says about Prometheus itself."""
    base = settings.prometheus_url
    lines: list[Alert] = []
    if "rows" in reading.errors:
        since = (f"; showing the view from {datetime.fromtimestamp(last_good).strftime('%H:%M:%S')}"
                 if last_good else "")
        lines.append(Alert("critical", "prometheus", f"{reading.errors['rows']}{since}; retrying every "
                           f"{settings.refresh_s:g} s", base))
        return lines
    failed = {k: v for k, v in reading.errors.items() if k != "rows"}
    if failed:
        first = next(iter(failed.values()))
        lines.append(Alert("warning", "prometheus", f"{len(failed)} of the fleet's queries failed ({first}): "
                           "the figures they give show --", base))
    cut = [(k, a.truncated) for k, a in (*reading.answers.items(), *reading.charts.items()) if a.truncated]
    if cut:
        lines.append(Alert("warning", "prometheus_series_cap", f"{len(cut)} queries matched more than "
                           f"{settings.max_series} series and were cut (e.g. {cut[0][0]}: {cut[0][1]} left out): "
                           "narrow --match / --servers-match", base))
    if not reading.series("rows"):
        lines.append(Alert("info", "prometheus", f"Prometheus at {base} knows no lpxtop exporter matching "
                           f"{settings.queries.match or 'any job'} in the last {settings.queries.window} "
                           "(start `lpxtop exporter` on each host and add it to scrape_configs)", base))
    return lines


def build_snapshot(settings: FleetSettings, reading: Reading, *, started_at: float, seq: int,
                   last_good: float | None, previous: Snapshot | None = None) -> Snapshot:
    """The fleet as one Snapshot. Without an answer from Prometheus, the previous snapshot's rows stay."""
    name = f"fleet · {settings.prometheus_url}"
    status = status_lines(settings, reading, last_good)
    if "rows" in reading.errors and previous is not None:
        return Snapshot(wall_time=reading.taken_at, host_name=name, version=__version__, started_at=started_at,
                        paused=False, interval_s=settings.refresh_s, endpoints=previous.endpoints,
                        gpu=previous.gpu, ports=previous.ports, alerts=tuple(status), seq=seq)
    views = endpoint_views(reading, settings.queries.window)
    return Snapshot(
        wall_time=reading.taken_at,
        host_name=name,
        version=__version__,
        started_at=started_at,
        paused=False,
        interval_s=settings.refresh_s,
        endpoints=tuple(views),
        gpu=gpus(reading),
        ports=ports(reading),
        alerts=alerts(reading, status),
        seq=seq,
    )


REFUSALS = {
    "pause": "p does nothing in the fleet view: each host's lpxtop exporter probes on its own schedule",
    "reset": "r does nothing in the fleet view: the figures are Prometheus' over the last {window} (--window)",
    "interval": "+/- do nothing in the fleet view: the probe interval is each exporter's (--interval); "
                "this view asks Prometheus every {refresh:g} s (--refresh)",
    "signal": "T/K are not available in the fleet view: the processes run on other hosts (use lpxtop there)",
}


EMPTY_MESSAGE = (
    "No lpxtop exporter in Prometheus yet (the line above says why).\n"
    "On each host:  lpxtop exporter URL... --listen 0.0.0.0:9464 --no-probe-endpoint\n"
    "In Prometheus: a scrape job for those exporters (docs/prometheus/prometheus.yml)\n"
    "Then narrow with --match '{job=\"lpxtop\"}'"
)


def fleet_capabilities(window: str, refresh_s: float) -> Capabilities:
    """What the fleet view can do: no controls (each key says why), no process actions, worst rows first, and
    the header's interval is how often it asks Prometheus (its "probe N s" would be wrong)."""
    refusals = {action: text.format(window=window, refresh=refresh_s) for action, text in REFUSALS.items()}
    return Capabilities(readonly=True, refusals=MappingProxyType(refusals), default_sort="worst",
                        interval_label="refresh", empty_message=EMPTY_MESSAGE)


class FleetSource:
    """The fleet as a SnapshotSource. `start()` begins polling; `snapshot()` returns at once."""

    def __init__(self, settings: FleetSettings) -> None:
        self.settings = settings
        self.capabilities = fleet_capabilities(settings.queries.window, settings.refresh_s)
        self.reader = FleetReader(settings)
        self._started_at = time.time()
        self._seq = 0
        self._last_good: float | None = None
        self._charts: dict[str, Answer] = {}
        self._charts_at = float("-inf")
        self._snapshot = Snapshot(
            wall_time=self._started_at, host_name=f"fleet · {settings.prometheus_url}", version=__version__,
            started_at=self._started_at, paused=False, interval_s=settings.refresh_s,
            alerts=(Alert("info", "prometheus", f"asking Prometheus at {settings.prometheus_url} ...",
                          settings.prometheus_url),),
        )
        self._loop_thread: LoopThread | None = None

    # ---- SnapshotSource ----

    def snapshot(self) -> Snapshot:
        return self._snapshot

    # ---- polling ----

    async def refresh(self, http: HttpClient) -> Snapshot:
        """Ask Prometheus once and publish the new snapshot."""
        now = time.monotonic()
        charts = now - self._charts_at >= self.settings.chart_refresh_s
        try:
            reading = await self.reader.read(http, charts=charts)
        except Exception as exc:  # noqa: BLE001 - never take the UI down
            log.exception("fleet refresh failed")
            reading = Reading(taken_at=time.time(), errors={"rows": f"fleet refresh failed: {type(exc).__name__}: {exc}"})
        if charts and "rows" not in reading.errors:
            self._charts, self._charts_at = reading.charts, now
        else:
            reading.charts = self._charts
        self._seq += 1
        try:
            snapshot = build_snapshot(self.settings, reading, started_at=self._started_at, seq=self._seq,
                                      last_good=self._last_good, previous=self._snapshot)
        except Exception as exc:  # noqa: BLE001 - an answer lpxtop cannot read is a status line, never a dead poller
            log.exception("fleet view: building the snapshot failed")
            failed = Reading(taken_at=reading.taken_at, errors={
                "rows": f"the fleet view could not use Prometheus' answer ({type(exc).__name__}: "
                        f"{textsafe.scrub(str(exc))})"})
            snapshot = build_snapshot(self.settings, failed, started_at=self._started_at, seq=self._seq,
                                      last_good=self._last_good, previous=self._snapshot)
        else:
            if "rows" not in reading.errors:
                self._last_good = reading.taken_at
        self._snapshot = snapshot
        return snapshot

    def collect_once(self) -> Snapshot:
        """One refresh without charts (for --json)."""
        self._charts_at = time.monotonic()  # no range queries

        async def once() -> Snapshot:
            async with _http() as http:
                return await self.refresh(http)

        return asyncio.run(once())

    def start(self) -> None:
        """Refresh on a thread of its own (lpxtop/loopthread.py) every `refresh_s`, until `stop()`."""
        if self._loop_thread is not None:
            return
        self._loop_thread = LoopThread("lpxtop-fleet")
        self._loop_thread.start(self._main())

    def stop(self, timeout: float = 5.0) -> None:
        """Stop refreshing (a refresh under way is cancelled) and join the thread (bounded)."""
        if self._loop_thread is not None:
            self._loop_thread.stop(timeout)
            self._loop_thread = None

    async def _main(self) -> None:
        async with _http() as http:
            while True:
                began = time.monotonic()
                try:
                    await self.refresh(http)
                except Exception:  # noqa: BLE001 - refresh turns failures into status lines; this is the last net
                    log.exception("fleet refresh failed")
                await asyncio.sleep(max(0.2, self.settings.refresh_s - (time.monotonic() - began)))


def _http() -> HttpClient:
    return HttpClient(timeout=30.0, max_connections=CONCURRENT_QUERIES + 2, max_idle=CONCURRENT_QUERIES,
                      idle_expiry_s=30.0)
