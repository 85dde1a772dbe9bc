"""`/probe?target=URL&model=M`: one probe when Prometheus scrapes, answered within the scrape timeout.

For people who prefer Prometheus to drive the schedule, as blackbox_exporter's `/probe` does. The
measurement is the engine's own (`lpxtop.engine.probe.run_probe`, one code path for a measured
streaming request) on an event loop of its own, in a thread started on the first `/probe`.

The time budget is Prometheus' `X-Prometheus-Scrape-Timeout-Seconds` minus a margin (0.5 s, as
blackbox_exporter's default `--timeout-offset`), or the configured default when the header is absent.
Every phase (asking /v1/models when no model is given, connecting, the first token, the stream) fits
in it, and a hard deadline cancels whatever is left: a hanging server gets `lpxtop_probe_success 0`
in time, never a scrape timeout.

A target that is one of the exporter's own endpoints (same URL, or its name) is probed with that
endpoint's settings, API key and headers included; any other target gets no credentials, so a
scrape cannot send a key to a host of its choosing. Nor does a request register anything: a
credential-looking value in a stranger's target URL is masked in what lpxtop logs of that request
only (`request_secrets`), so whoever reaches `/probe` neither grows lpxtop's secret registry nor
chooses strings lpxtop masks everywhere.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from urllib.parse import parse_qsl, quote, quote_plus, urlsplit

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from lpxtop.checks import ConfigError
from lpxtop.config import normalize_url
from lpxtop.engine.probe import failed_sample, fetch_models, rejects_stream_options, run_probe
from lpxtop.export.settings import MAX_PROBE_TIMEOUT_S, PROBE_TIMEOUT_MARGIN_S
from lpxtop.http import HttpClient
from lpxtop.loopthread import LoopThread
from lpxtop.model.endpoint import SECRET_PARAM, EndpointConfig
from lpxtop.model.probe import ERROR_KINDS, Sample

MIN_BUDGET_S = 0.2
MODELS_SHARE = 0.5  # of the budget, at most, for asking /v1/models when no model is given
DEADLINE_SLACK_S = 0.1  # the hard deadline's margin over the probe's own timeouts


class ProbeRefused(Exception):
    """A /probe request that cannot be served: `status` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def budget_from_header(header: str | None, default_s: float) -> float:
    """Seconds a probe may take: the scrape timeout Prometheus announces minus the margin, else `default_s`."""
    budget = default_s
    if header:
        try:
            announced = float(header)
        except ValueError:
            announced = None
        if announced is not None and announced > 0:
            budget = announced - PROBE_TIMEOUT_MARGIN_S
    return min(MAX_PROBE_TIMEOUT_S, max(MIN_BUDGET_S, budget))


def resolve_target(target: str | None, model: str | None, known: Sequence[EndpointConfig]) -> EndpointConfig:
    """The endpoint to probe: one of `known` (same URL or name) with its settings, else a bare one."""
    if not target:
        raise ProbeRefused(400, "missing the target parameter: /probe?target=http://HOST:PORT/v1[&model=M]")
    for config in known:
        if config.name == target:
            chosen = config
            break
    else:
        try:
            url = normalize_url(target, register=False)  # a stranger's URL: nothing of it is registered
        except ConfigError as exc:
            raise ProbeRefused(400, f"bad target: {exc}") from None
        chosen = next((c for c in known if c.url.rstrip("/") == url.rstrip("/")), None)
        if chosen is None:
            chosen = EndpointConfig(name=urlsplit(url).netloc, url=url)
    if model:
        chosen = replace(chosen, model=model)
    return chosen


def request_secrets(path: str) -> list[str]:
    """The credential-looking values in a request's query and in its `target` URL's query, raw and
    %-encoded: masked in what lpxtop logs of this request only (`textsafe.redact(text, also=...)`)."""
    found: list[str] = []

    def collect(query: str, depth: int) -> None:
        for name, value in parse_qsl(query, keep_blank_values=True):
            if SECRET_PARAM.search(name) and len(found) < 64:
                found.extend((value, quote(value, safe=""), quote_plus(value)))
            if name == "target" and depth < 2:
                collect(urlsplit(value if "://" in value else f"http://{value}").query, depth + 1)

    collect(urlsplit(path).query, 0)
    return found


class ProbeRunner:
    """Runs `/probe` requests on one event loop (its own thread, started on first use), at most
    `max_concurrent` at a time."""

    def __init__(self, max_concurrent: int) -> None:
        self._slots = threading.BoundedSemaphore(max_concurrent)
        self._lock = threading.Lock()
        self._loop_thread: LoopThread | None = None
        self._client: HttpClient | None = None

    def probe(self, config: EndpointConfig, budget_s: float) -> tuple[Sample | None, float]:
        """Probe `config` within `budget_s`; returns the sample (None: cut by the deadline) and the seconds taken."""
        if not self._slots.acquire(blocking=False):
            raise ProbeRefused(503, "too many /probe requests in flight; try again (or scrape less often)")
        began = time.perf_counter()
        try:
            loop_thread = self._ensure_loop()
            try:
                sample = loop_thread.run(self._probe(config, budget_s), budget_s + DEADLINE_SLACK_S * 2)
            except (TimeoutError, asyncio.TimeoutError):  # run() cancelled it
                sample = None
            return sample, time.perf_counter() - began
        finally:
            self._slots.release()

    async def _probe(self, config: EndpointConfig, budget_s: float) -> Sample | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget_s
        client = self._client
        assert client is not None
        try:
            return await asyncio.wait_for(self._measure(client, config, deadline), budget_s)
        except asyncio.TimeoutError:
            return None

    async def _measure(self, client: HttpClient, config: EndpointConfig, deadline: float) -> Sample:
        loop = asyncio.get_running_loop()
        model = config.model
        if model is None:
            ids, error = await fetch_models(client, config, timeout_s=max(0.05, (deadline - loop.time()) * MODELS_SHARE))
            if not ids:
                return failed_sample(config, error or "http_404: GET /models listed no model; add &model=NAME")
            model = ids[0]
        sample = await run_probe(client, _within(config, deadline - loop.time()), model)
        if rejects_stream_options(sample) and deadline - loop.time() > MIN_BUDGET_S:
            sample = await run_probe(client, _within(config, deadline - loop.time()), model, include_usage=False)
        return sample

    def _ensure_loop(self) -> LoopThread:
        with self._lock:
            if self._loop_thread is None:
                loop_thread = LoopThread("lpxtop-exporter-probe")
                loop_thread.start(self._keep_client())
                self._loop_thread = loop_thread
            return self._loop_thread

    async def _keep_client(self) -> None:
        """The probes' client, for the loop's life (closed when `close()` ends it)."""
        async with HttpClient(timeout=MAX_PROBE_TIMEOUT_S, max_connections=32, max_idle=8,
                              idle_expiry_s=30.0) as client:
            self._client = client
            await asyncio.get_running_loop().create_future()  # until close()

    def close(self) -> None:
        """Stop the probe loop (bounded): probes in flight are cancelled."""
        with self._lock:
            loop_thread, self._loop_thread = self._loop_thread, None
        if loop_thread is not None:
            loop_thread.stop(5)


def _within(config: EndpointConfig, seconds: float) -> EndpointConfig:
    """`config` with every timeout cut to `seconds`, so the probe itself says which phase ran out."""
    seconds = max(0.05, seconds)
    return replace(config, timeout_s=min(config.timeout_s, seconds),
                   first_token_timeout_s=min(config.first_token_timeout_s, seconds),
                   connect_timeout_s=min(config.connect_timeout_s, seconds))



class _Families:
    def __init__(self, families: Sequence[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def _gauge(name: str, help_text: str, value: float, labels: Sequence[str] = (),
           values: Sequence[str] = ()) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text, labels=list(labels))
    family.add_metric(list(values), value)
    return family


def probe_families(sample: Sample | None, duration_s: float, budget_s: float) -> list[Metric]:
    """What one /probe answers (no labels of its own: Prometheus adds `instance` from the target)."""
    ok = sample is not None and sample.ok
    kind: str | None = None
    if sample is None:
        kind = "read_timeout"  # the hard deadline cut it (the probe's own timeouts usually come first)
    elif not sample.ok:
        kind = sample.error_kind if sample.error_kind in ERROR_KINDS else "other"
    families: list[Metric] = [
        _gauge("lpxtop_probe_success", "1 when the probe streamed tokens to the end, else 0.", 1.0 if ok else 0.0),
        _gauge("lpxtop_probe_duration_seconds", "How long this /probe took, start to answer.", duration_s),
        _gauge("lpxtop_probe_timeout_seconds", "The time the probe was given: the scrape timeout minus 0.5 s.",
               budget_s),
    ]
    failed = GaugeMetricFamily("lpxtop_probe_failed", "1 for the error class of a failed probe, 0 for the others.",
                               labels=["kind"])
    for name in ERROR_KINDS:
        failed.add_metric([name], 1.0 if name == kind else 0.0)
    families.append(failed)
    if sample is not None and sample.http_status is not None:
        families.append(_gauge("lpxtop_probe_http_status_code", "HTTP status of the probe's response.",
                               sample.http_status))
    if sample is not None and sample.ok:
        for name, help_text, value_ms in (
            ("lpxtop_probe_first_token_seconds", "Time to first token of this probe.", sample.ttft_ms),
            ("lpxtop_probe_last_token_seconds", "End-to-end latency of this probe (the last token).", sample.e2e_ms),
            ("lpxtop_probe_time_per_output_token_seconds", "(E2E - TTFT) / (output tokens - 1) of this probe.",
             sample.tpot_ms),
            ("lpxtop_probe_inter_token_max_seconds", "The longest gap between two tokens of this probe.",
             max(sample.itl_ms) if sample.itl_ms else None),
        ):
            if value_ms is not None:
                families.append(_gauge(name, help_text, value_ms / 1000.0))
        if sample.output_tokens is not None:
            families.append(_gauge("lpxtop_probe_response_output_tokens", "Output tokens of this probe.",
                                   sample.output_tokens))
    return families


def render(families: Sequence[Metric], encoder: Callable[..., bytes] = generate_latest) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))  # type: ignore[arg-type]
    return encoder(registry)
