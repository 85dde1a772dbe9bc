"""`OtlpPipeline`: what the engine measured, sent as OTLP/HTTP protobuf, from a thread of its own.

On the engine's loop (and the load generator's) the listener costs one `deque.append` per probe, step or
request, and a reference kept to the newest snapshot: exporting cannot delay a probe's timestamps
(benchmarks/otel_cost.py measures it). The worker thread wakes once a second: it turns what was queued
into metric points (lpxtop/otel/measures.py) and spans (lpxtop/otel/spans.py), and every `interval` (10 s)
exports both with the SDK's OTLP/HTTP exporters, which retry within `timeout`.

Everything is bounded, and what is lost is counted (`status()`, `once --json`'s "otlp", the dashboard's
alerts): at most MAX_QUEUED records wait for the worker (more are dropped: `dropped_events`); at most
MAX_PENDING_SPANS spans wait for an export, sent MAX_BATCH at a time; a batch the backend refused or did
not take in time is dropped (`dropped_spans`, `failed_exports`, `last_error`). Metrics are cumulative,
so a failed export loses nothing: the next one carries the totals. The exporters' own log lines are kept
as `last_error` (outside text, scrubbed: lpxtop/textsafe.py) instead of printed over the dashboard.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from lpxtop import __version__, textsafe
from lpxtop.http import is_loopback
from lpxtop.model.agent import AgentStepEvent
from lpxtop.model.alerts import Alert
from lpxtop.model.events import SampleEvent, SnapshotEvent
from lpxtop.model.probe import Sample
from lpxtop.model.snapshot import Snapshot
from lpxtop.otel import semconv as sc
from lpxtop.otel.aggregate import Aggregator, CounterState, HistogramState
from lpxtop.otel.measures import EndpointInfo, Measures, infos_from
from lpxtop.otel.settings import OPT_IN_LATEST, OtlpSettings
from lpxtop.otel.spans import SpanBuilder, new_span_id, new_trace_id, parse_ids

log = logging.getLogger("lpxtop.otel")

TICK_S = 1.0
MAX_QUEUED = 10_000  # records waiting for the worker (about 100 s of a 100 req/s load test)
MAX_PENDING_SPANS = 2048  # spans waiting for an export (the SDK's BatchSpanProcessor queue)
MAX_BATCH = 512  # spans per export request (the SDK's max_export_batch_size)
KIND_GRACE_S = 3.0  # how long a record waits for its endpoint's server kind (the provider name)
HOLD_S = 30.0  # how long a record waits for a snapshot that names its endpoint's model and server
FLUSH_TIMEOUT_S = 5.0  # what closing may wait for the last export, at most
MAX_ERROR_CHARS = 300
EXPORTER_LOGGER = "opentelemetry.exporter.otlp"  # the OTLP exporters and their HTTP client log here
_ID_MASK = (1 << 64) - 1


def ratio_bound(share: float) -> int:
    """The bound the SDK's TraceIdRatioBased sampler compares a trace id's low 64 bits with."""
    return TraceIdRatioBased.get_bound_for_rate(share)


class _LastError(logging.Handler):
    """Keeps the exporters' own warnings and errors (a batch too large, one that cannot be encoded) for the
    status; why a request failed comes from the session (`_WatchedSession`), which knows it exactly."""

    _KNOWN = ("transient error", "failed to export", "already shutdown", "shutdown in progress")

    def __init__(self, pipeline: OtlpPipeline) -> None:
        super().__init__(logging.WARNING)
        self.pipeline = pipeline

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            msg = str(record.msg).lower()
            if not any(known in msg for known in self._KNOWN):
                self.pipeline.note_error(record.getMessage())


def short_reason(text: str) -> str:
    """A connection error's gist ("connection refused"), not requests' whole chain of causes."""
    lowered = text.lower()
    for needle, gist in (("connection refused", "connection refused"), ("timed out", "timed out"),
                         ("name or service not known", "host not found"), ("failed to resolve", "host not found"),
                         ("nodename nor servname", "host not found"), ("certificate verify failed", "TLS certificate"),
                         ("connection reset", "connection reset"), ("remotedisconnected", "connection closed"),
                         ("connection aborted", "connection closed")):
        if needle in lowered:
            return gist
    return text


def _session_for(url: str, on_error: Callable[[str], None]):
    """A requests session for an exporter that says why a request failed, the reason first (an alert on an
    80-column screen shows its first words); loopback backends bypass the environment's proxy settings."""
    import requests

    class _WatchedSession(requests.Session):
        def request(self, *args: Any, **kwargs: Any):  # the transport's (and older exporters' post()) way in
            try:
                response = super().request(*args, **kwargs)
            except Exception as exc:
                on_error(short_reason(str(exc)))
                raise
            if response.status_code >= 400:
                on_error(f"HTTP {response.status_code} {response.reason or ''}".strip())
            return response

    session = _WatchedSession()
    if is_loopback(urlsplit(url).hostname or ""):
        session.trust_env = False
    return session


class OtlpPipeline:
    """Sends what an engine (and a load generator) measured. Attach it before the engine starts, then
    `start()`; `close()` exports what is left, bounded, and stops the thread."""

    def __init__(
        self,
        settings: OtlpSettings,
        *,
        endpoints: Mapping[str, EndpointInfo] | None = None,
        request_model: Callable[[str], str | None] | None = None,
        span_exporter: SpanExporter | None = None,
        metric_exporter: MetricExporter | None = None,
    ) -> None:
        self.settings = settings
        self.resource = _resource(settings)
        self.scope = InstrumentationScope("lpxtop", __version__, schema_url=None if settings.latest_names
                                          else sc.SCHEMA_URL)
        self.spans = SpanBuilder(self.resource, self.scope)
        self.aggregator = Aggregator()
        self.measures = Measures(self.aggregator, latest=settings.latest_names)
        self.span_exporter = span_exporter or OTLPSpanExporter(
            endpoint=settings.traces_url, headers=settings.header_dict, timeout=settings.timeout_s,
            session=_session_for(settings.traces_url, self._request_failed))
        self.metric_exporter = metric_exporter or OTLPMetricExporter(
            endpoint=settings.metrics_url, headers=settings.header_dict, timeout=settings.timeout_s,
            session=_session_for(settings.metrics_url, self._request_failed))
        self._probe_bound = ratio_bound(settings.probe_sample)
        self._load_bound = ratio_bound(settings.load_sample)
        self._queue: collections.deque = collections.deque()
        self._pending: list[ReadableSpan] = []
        self._snapshot_fn: Callable[[], Snapshot] | None = None
        self._snapshot: Snapshot | None = None
        self._fixed = dict(endpoints or {})  # endpoints known beforehand (the load test's target)
        self._request_model = request_model  # the model a request asked for, when no snapshot says (load)
        self._infos: dict[str, EndpointInfo] = {}
        self._held: list = []  # records of endpoints no snapshot has shown yet (HOLD_S at most)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._exporters_shut = False
        self._handler = _LastError(self)
        # what the status says
        self.exported_spans = 0
        self.dropped_spans = 0
        self.dropped_events = 0
        self.sampled_out = 0
        self.exported_points = 0
        self.failed_exports = 0
        self.last_error: str | None = None
        self.last_error_time: float | None = None
        self.failing = False  # the newest export failed
        self.exports = 0
        self.worker_cpu_s = 0.0

    # ---- wiring ----

    def attach(self, engine: Any) -> None:
        """Listen to `engine` (its probes, agent steps and snapshots) and add the status to its alerts."""
        self._snapshot_fn = getattr(engine, "snapshot", None)
        engine.add_listener(self.on_event)
        add_alerts = getattr(engine, "add_alert_source", None)
        if add_alerts is not None:
            add_alerts(self.alerts)

    def start(self) -> None:
        if self._thread is not None or self._closed:
            return
        self._capture_logs()
        self._thread = threading.Thread(target=self._run, name="lpxtop-otlp", daemon=True)
        self._thread.start()

    # ---- the listeners: on the engine's (or the load generator's) loop, so they only enqueue ----

    def on_event(self, event: object) -> None:
        cls = type(event)
        if cls is SnapshotEvent:
            self._snapshot = event.snapshot  # type: ignore[attr-defined]
        elif cls is SampleEvent or cls is AgentStepEvent:
            if len(self._queue) >= MAX_QUEUED:
                self.dropped_events += 1
                return
            self._queue.append(event)

    def on_load_sample(self, step: int, phase: str, sample: Sample) -> None:
        """`LoadController.add_sample_listener`: one finished load-test request."""
        if len(self._queue) >= MAX_QUEUED:
            self.dropped_events += 1
            return
        self._queue.append((step, phase, sample))

    # ---- the worker ----

    def _run(self) -> None:
        interval = self.settings.interval_s
        tick = min(TICK_S, interval)
        next_export = time.monotonic() + interval
        cpu0 = time.thread_time()
        while True:
            stopping = self._stop.wait(tick)
            try:
                self._drain(final=stopping)
                now = time.monotonic()
                due = stopping or now >= next_export
                if self.settings.traces and (due or len(self._pending) >= MAX_BATCH):
                    self._export_spans(all_batches=stopping)
                if due:
                    next_export = now + interval
                    if self.settings.metrics:
                        self._export_metrics()
            except Exception as exc:  # noqa: BLE001 - the pipeline must never take lpxtop down
                log.exception("OTLP pipeline step failed")
                self.note_error(f"lpxtop's OTLP pipeline: {type(exc).__name__}: {exc}")
            self.worker_cpu_s = time.thread_time() - cpu0
            if stopping:
                return

    def _endpoint(self, name: str) -> EndpointInfo:
        info = self._infos.get(name) or self._fixed.get(name) or EndpointInfo(name=name)
        if info.request_model is None and self._request_model is not None:
            info = replace(info, request_model=self._request_model(name))
        return info

    def _drain(self, final: bool = False) -> None:
        snapshot = self._snapshot_fn() if self._snapshot_fn is not None else self._snapshot
        if snapshot is not None:
            self._snapshot = snapshot
            self._infos = infos_from(snapshot)  # the model and server kind each endpoint has now
        queue = self._queue
        items, self._held = self._held, []
        items.extend(queue.popleft() for _ in range(len(queue)))
        now_ns = time.time_ns()
        now = time.time()
        as_of = self._snapshot.wall_time if self._snapshot is not None else 0.0
        for item in items:
            record = item.sample if isinstance(item, SampleEvent) else item.step if isinstance(
                item, AgentStepEvent) else item[2]
            info = self._infos.get(record.endpoint)
            # shown by a snapshot since the request began, with the server's kind once its first scrape
            # said it (a first probe leaves before the first scrape; a server with no kind: KIND_GRACE_S)
            known = record.endpoint in self._fixed or (
                info is not None and as_of >= record.wall_time
                and (info.provider not in (None, "unknown") or as_of >= record.wall_time + KIND_GRACE_S))
            if not final and not known and now - record.wall_time < HOLD_S:
                # no snapshot since the request began has shown its endpoint (a discovered one, the model
                # /v1/models named, or `once`, which publishes at the end): wait for the next one
                self._held.append(item)
                continue
            traces = self.settings.traces
            if isinstance(item, SampleEvent):
                info = self._endpoint(item.endpoint)
                self.measures.request(item.sample, info, now_ns)
                ids = parse_ids(item.sample.trace_id, item.sample.span_id) or (new_trace_id(), new_span_id())
                if traces and self._sampled(ids[0], self._probe_bound):
                    self._add_spans([self.spans.request(item.sample, info, "probe", ids)])
            elif isinstance(item, AgentStepEvent):
                info = self._endpoint(item.endpoint)
                self.measures.agent_step(item.step, info, now_ns)
                if traces:
                    built = self.spans.agent_step(item.step, info)
                    if self._sampled(built[0].context.trace_id, self._probe_bound, len(built)):
                        self._add_spans(built)
            else:
                step, phase, sample = item
                info = self._endpoint(sample.endpoint)
                self.measures.request(sample, info, now_ns, kind="load")
                ids = parse_ids(sample.trace_id, sample.span_id) or (new_trace_id(), new_span_id())
                if traces and self._sampled(ids[0], self._load_bound):
                    self._add_spans([self.spans.request(sample, info, "load", ids,
                                                        {sc.LOAD_STEP: step, sc.LOAD_PHASE: phase})])

    def _sampled(self, trace_id: int, bound: int, spans: int = 1) -> bool:
        """The SDK's TraceIdRatioBased rule: the same trace id gets the same answer everywhere."""
        if trace_id & _ID_MASK < bound:
            return True
        self.sampled_out += spans
        return False

    def _add_spans(self, spans: list[ReadableSpan]) -> None:
        room = MAX_PENDING_SPANS - len(self._pending)
        if len(spans) > room:
            self._dropped(len(spans) - max(room, 0))
            spans = spans[:max(room, 0)]
        self._pending.extend(spans)

    def _dropped(self, count: int) -> None:
        self.dropped_spans += count
        self.measures.spans_dropped(count, time.time_ns())

    def _export_spans(self, *, all_batches: bool) -> None:
        while self._pending:
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            try:
                result = self.span_exporter.export(batch)
            except Exception as exc:  # noqa: BLE001 - an exporter must not stop the pipeline
                self.note_error(f"{type(exc).__name__}: {exc}")
                result = SpanExportResult.FAILURE
            self.exports += 1
            if result == SpanExportResult.SUCCESS:
                self.exported_spans += len(batch)
                self.failing = False
            else:
                self.failed_exports += 1
                self.failing = True
                self._dropped(len(batch))
                if self.last_error is None:
                    self.note_error("the backend did not take the spans")
                if all_batches:
                    self._dropped(len(self._pending))  # closing: no time to try the rest
                    self._pending = []
                return
            if not all_batches and len(self._pending) < MAX_BATCH:
                return  # the rest waits for the next interval, with the spans that join it

    def _export_metrics(self) -> None:
        data, points = self.metrics_data()
        if not points:
            return
        try:
            result = self.metric_exporter.export(data, timeout_millis=self.settings.timeout_s * 1000)
        except Exception as exc:  # noqa: BLE001
            self.note_error(f"{type(exc).__name__}: {exc}")
            result = MetricExportResult.FAILURE
        self.exports += 1
        if result == MetricExportResult.SUCCESS:
            self.exported_points += points
            self.failing = False
        else:
            self.failed_exports += 1
            self.failing = True
            if self.last_error is None:
                self.note_error("the backend did not take the metrics")

    def metrics_data(self) -> tuple[MetricsData, int]:
        """Every series now, as the SDK's data model (cumulative), and the number of points."""
        now = time.time_ns()
        cumulative = AggregationTemporality.CUMULATIVE
        metrics: list[Metric] = []
        points = 0
        for metric, rows in self.aggregator.collect():
            if metric.kind == "histogram":
                hist_points = [HistogramDataPoint(
                    attributes=dict(attrs), start_time_unix_nano=s.start_ns, time_unix_nano=now, count=s.count,
                    sum=s.total, bucket_counts=list(s.counts), explicit_bounds=list(s.bounds),
                    min=s.min if s.count else 0.0, max=s.max if s.count else 0.0)
                    for attrs, s in rows if isinstance(s, HistogramState)]
                data: Any = Histogram(data_points=hist_points, aggregation_temporality=cumulative)
                points += len(hist_points)
            else:
                num_points = [NumberDataPoint(attributes=dict(attrs), start_time_unix_nano=s.start_ns,
                                              time_unix_nano=now, value=s.value)
                              for attrs, s in rows if isinstance(s, CounterState)]
                data = Sum(data_points=num_points, aggregation_temporality=cumulative, is_monotonic=True)
                points += len(num_points)
            metrics.append(Metric(metric.name, metric.description, metric.unit, data))
        for metric, values in self.measures.gauges(self._snapshot):
            gauge_points = [NumberDataPoint(attributes=dict(attrs), start_time_unix_nano=now, time_unix_nano=now,
                                            value=value) for attrs, value in values]
            metrics.append(Metric(metric.name, metric.description, metric.unit, Gauge(data_points=gauge_points)))
            points += len(gauge_points)
        schema = "" if self.settings.latest_names else sc.SCHEMA_URL
        data_all = MetricsData(resource_metrics=[ResourceMetrics(
            resource=self.resource, scope_metrics=[ScopeMetrics(scope=self.scope, metrics=metrics, schema_url=schema)],
            schema_url=schema)])
        return data_all, points

    # ---- status ----

    def _request_failed(self, reason: str) -> None:
        if not self._exporters_shut:  # once lpxtop cuts the exporters off at exit, their errors are its own doing
            self.note_error(reason)

    def note_error(self, text: str) -> None:
        self.last_error = (textsafe.scrub(text) or "")[:MAX_ERROR_CHARS]
        self.last_error_time = time.time()

    def status(self) -> dict:
        """What was sent and what was lost (`once --json`'s "otlp")."""
        return {
            "endpoint": self.settings.display_endpoint,
            "exported_spans": self.exported_spans,
            "dropped_spans": self.dropped_spans,
            "exported_points": self.exported_points,
            "failed_exports": self.failed_exports,
            "last_error": self.last_error,
            "dropped_events": self.dropped_events,
            "sampled_out_spans": self.sampled_out,
            "queued": len(self._queue) + len(self._held) + len(self._pending),
            "semconv": OPT_IN_LATEST if self.settings.latest_names else sc.STABLE_VERSION,
            "interval_s": self.settings.interval_s,
        }

    def summary(self) -> str:
        """One line for the end of a run."""
        lost = self.dropped_spans + self.dropped_events
        line = (f"OpenTelemetry: {self.exported_spans} spans and {self.exported_points} metric points sent to "
                f"{self.settings.display_endpoint}")
        if lost or self.failed_exports:
            line += f"; {self.failed_exports} exports failed, {lost} spans or records dropped"
            if self.last_error:
                line += f" (last error: {self.last_error})"
        return line

    def alerts(self) -> tuple[Alert, ...]:
        """For the engine's snapshots (the dashboard's alerts bar, JSON): an export failing, or losses."""
        lost = self.dropped_spans + self.dropped_events
        if self.failing:
            return (Alert("warning", "otlp", f"OpenTelemetry export to {self.settings.display_endpoint} failing: "
                          f"{self.last_error or 'no answer'}; {lost} spans dropped so far. Probing goes on.", "otlp"),)
        if lost:
            return (Alert("info", "otlp", f"OpenTelemetry export dropped {lost} spans (the backend was down, slow "
                          "or refusing)", "otlp"),)
        return ()

    # ---- end ----

    def close(self, timeout: float = FLUSH_TIMEOUT_S) -> None:
        """Export what is left (within `timeout`) and stop; a backend that does not answer in time is cut
        off (its retries aborted) and what it did not take is counted as dropped."""
        if self._closed:
            return
        self._closed = True
        thread = self._thread
        self._stop.set()
        if thread is None:  # never started: the last export here, as the worker would have made it
            self._capture_logs()
            with contextlib.suppress(Exception):
                self._drain(final=True)
                if self.settings.traces:
                    self._export_spans(all_batches=True)
                if self.settings.metrics:
                    self._export_metrics()
        else:
            thread.join(min(timeout, self.settings.timeout_s + 1.0))
            if thread.is_alive():
                self._shutdown_exporters()  # aborts the exporters' retry waits
                thread.join(2.0)
            if thread.is_alive():
                self.note_error(f"the last export did not finish within {timeout:g} s")
        self._shutdown_exporters()
        logger = logging.getLogger(EXPORTER_LOGGER)
        logger.removeHandler(self._handler)
        if not any(isinstance(h, _LastError) for h in logger.handlers):
            logger.propagate = True

    def _capture_logs(self) -> None:
        """The exporters' log lines become `last_error`: failures show as the status and an alert, not as lines
        printed over the dashboard."""
        logger = logging.getLogger(EXPORTER_LOGGER)
        if self._handler not in logger.handlers:
            logger.addHandler(self._handler)
        logger.propagate = False

    def _shutdown_exporters(self) -> None:
        if self._exporters_shut:
            return
        self._exporters_shut = True
        for exporter in (self.span_exporter, self.metric_exporter):
            with contextlib.suppress(Exception):
                exporter.shutdown()


def _resource(settings: OtlpSettings) -> Resource:
    """service.name from [otlp] service_name, else OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES, else lpxtop;
    the resource attributes of OTEL_RESOURCE_ATTRIBUTES (Resource.create reads both variables)."""
    base = {"service.version": __version__, "host.name": socket.gethostname()}
    resource = Resource.create(base)
    name = settings.service_name
    if name is None and str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        name = "lpxtop"
    if name is not None:
        resource = resource.merge(Resource({SERVICE_NAME: name}))
    return resource
