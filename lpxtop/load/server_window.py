"""What the server itself reported during a step's measured window.

Two sources, both the server's own /metrics:
- the live engine's scrapes (every second for a load test's target), delivered as `ScrapeEvent`s through
  `Engine.add_listener`: the peaks of the queue, the running batch and the KV cache within the window;
- one reading of the raw counters at each end of the window (`read_counters`): preemptions, the prefix
  cache's hits and queries, and the TTFT and queue-time histograms' sum and count, so the step gets exact
  differences (the server's mean TTFT over the step = Δsum/Δcount) instead of the scraper's 5-minute
  window, which would mix steps.
Metric names come from the one table per server kind (`lpxtop/engine/scrape/metric_names.py`).
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lpxtop.engine.gpu import energy_between
from lpxtop.engine.scrape import (
    BY_KIND,
    KINDS,
    Exposition,
    KindNames,
    NotPrometheusText,
    Ref,
    family_names,
    keep_families,
)
from lpxtop.http import HttpClient
from lpxtop.model.events import GpuEvent, ScrapeEvent
from lpxtop.model.gpu import GpuSnapshot
from lpxtop.model.load import ServerDuringStep
from lpxtop.model.server import ServerMetrics
from lpxtop.numbers import is_finite

if TYPE_CHECKING:
    from lpxtop.model.events import EngineEvent

READ_TIMEOUT_S = 5.0
MAX_METRICS_BYTES = 8 * 1024 * 1024
MAX_SCRAPES_KEPT = 4096
MAX_GPU_READINGS_KEPT = 7200  # two hours of 1-s GPU readings: a step's window is far shorter


@dataclass(frozen=True)
class CounterReading:
    """The raw counters (and gauges) of one /metrics reading; None where the server has no such metric."""

    wall_time: float
    kind: str
    preemptions: float | None = None
    prefix_hits: float | None = None
    prefix_queries: float | None = None
    ttft_sum: float | None = None
    ttft_count: float | None = None
    queue_sum: float | None = None
    queue_count: float | None = None
    generation_tokens: float | None = None
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None


def parse_counters(text: str, wall_time: float, kind_hint: str | None = None, model: str | None = None) -> CounterReading | None:
    """The counters a step needs from one /metrics page; None when it is no server kind lpxtop knows."""
    names = BY_KIND.get(kind_hint or "") or _detect(text)
    if names is None:
        return None
    try:
        page = Exposition.parse(keep_families(text, family_names(names)))
    except NotPrometheusText:
        return None

    def total(refs: tuple[Ref, ...]) -> float | None:
        found = page.first(refs)
        if found is None:
            return None
        points = found[1]
        if model and names.model_labels:
            mine = [p for p in points if any(p.label(label) == model for label in names.model_labels)]
            points = mine or points
        values = [p.value for p in points]
        if not values or not all(math.isfinite(v) for v in values):
            return None  # +Inf and NaN are legal in a page, but no count a step can use
        return sum(values)

    def hist(h) -> tuple[float | None, float | None]:
        if h is None:
            return None, None
        for r in h.names:
            s, c = total((Ref(r.name + "_sum", r.match),)), total((Ref(r.name + "_count", r.match),))
            if s is not None and c is not None:
                return s * h.to_ms, c
        return None, None

    hits, queries = total(names.prefix_hits), total(names.prefix_queries)
    if queries is not None and hits is not None and names.prefix_queries_exclude_hits:
        queries += hits
    ttft_sum, ttft_count = hist(names.ttft)
    queue_sum, queue_count = hist(names.queue)
    kv = total(names.kv_usage)
    if kv is None and names.kv_blocks_used and names.kv_blocks_max:
        used, most = total(names.kv_blocks_used), total(names.kv_blocks_max)
        kv = used / most if used is not None and most else None
    return CounterReading(
        wall_time=wall_time,
        kind=names.kind,
        preemptions=total(names.preemptions),
        prefix_hits=hits,
        prefix_queries=queries,
        ttft_sum=ttft_sum,
        ttft_count=ttft_count,
        queue_sum=queue_sum,
        queue_count=queue_count,
        generation_tokens=total(names.generation_tokens),
        running=total(names.running),
        waiting=total(names.waiting),
        kv_usage=kv,
    )


def _detect(text: str) -> KindNames | None:
    for names in KINDS:
        if any(prefix in text for prefix in names.prefixes):
            return names
    return None


class ServerWatch:
    """Collects the engine's scrapes of one endpoint and reads its counters at a step's two ends."""

    def __init__(self, endpoint_name: str, metrics_url: str | None, model: str | None = None) -> None:
        self.endpoint_name = endpoint_name
        self.metrics_url = metrics_url
        self.model = model
        self.kind: str | None = None
        self.status = "ok" if metrics_url else "off: --no-metrics"
        self._scrapes: deque[tuple[float, ServerMetrics]] = deque(maxlen=MAX_SCRAPES_KEPT)
        self._gpus: deque[GpuSnapshot] = deque(maxlen=MAX_GPU_READINGS_KEPT)  # for the step's energy per token
        self._lock = threading.Lock()

    def on_engine_event(self, event: EngineEvent) -> None:
        """An `Engine.add_listener` listener (runs on the engine's loop: only appends)."""
        if isinstance(event, ScrapeEvent) and event.endpoint == self.endpoint_name:
            with self._lock:
                self._scrapes.append((event.wall_time, event.metrics))
        elif isinstance(event, GpuEvent) and event.gpu.devices:
            with self._lock:
                self._gpus.append(event.gpu)

    def scrapes_between(self, t0: float, t1: float) -> list[ServerMetrics]:
        with self._lock:
            return [m for t, m in self._scrapes if t0 <= t <= t1 and m.ok]

    def latest(self) -> ServerMetrics | None:
        with self._lock:
            return self._scrapes[-1][1] if self._scrapes else None

    async def read_counters(self, client: HttpClient, wall_time: float) -> CounterReading | None:
        """One GET of /metrics, parsed off the loop (a worker thread); None when there is nothing to read."""
        if not self.metrics_url:
            return None
        try:
            response = await client.get(self.metrics_url, headers={"Accept": "text/plain"},
                                        timeout=READ_TIMEOUT_S,  # every phase, and the whole GET (its total)
                                        max_bytes=MAX_METRICS_BYTES)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a server without /metrics still gets a load test
            self.status = f"no /metrics: {type(exc).__name__}: {exc}"[:160]
            return None
        if response.status_code != 200:
            self.status = f"no /metrics: HTTP {response.status_code}"
            return None
        text = response.content.decode("utf-8", errors="replace")
        hint = self.kind or _kind_of(self.latest())
        reading = await asyncio.to_thread(parse_counters, text, wall_time, hint, self.model)
        if reading is None:
            self.status = "no /metrics of a known server kind"
        else:
            self.kind = reading.kind
            self.status = "ok"
        return reading

    def during(self, t0: float, t1: float, first: CounterReading | None, last: CounterReading | None) -> ServerDuringStep | None:
        """The server's figures for the window [t0, t1] (wall clock)."""
        scrapes = self.scrapes_between(t0, t1)
        if not scrapes and first is None and last is None:
            if not self.metrics_url:
                return None
            return ServerDuringStep(kind=self.kind, status=self.status, scrapes=0)
        waiting = [m.requests_waiting for m in scrapes if is_finite(m.requests_waiting)]
        running = [m.requests_running for m in scrapes if is_finite(m.requests_running)]
        kv = [m.kv_cache_usage for m in scrapes if is_finite(m.kv_cache_usage)]
        for reading in (first, last):
            if reading is not None:
                if reading.waiting is not None:
                    waiting.append(reading.waiting)
                if reading.running is not None:
                    running.append(reading.running)
                if reading.kv_usage is not None:
                    kv.append(reading.kv_usage)

        def delta(name: str) -> float | None:
            a = getattr(first, name, None) if first else None
            b = getattr(last, name, None) if last else None
            if a is None or b is None or b < a:  # b < a: the server restarted in between
                return None
            return b - a

        def ratio(num: str, den: str) -> float | None:
            n, d = delta(num), delta(den)
            value = n / d if n is not None and d else None
            return value if is_finite(value) else None

        def first_or_last(reading: CounterReading | None, index: int) -> float | None:
            value = reading.waiting if reading else (scrapes[index].requests_waiting if scrapes else None)
            return value if is_finite(value) else None

        kind = self.kind or _kind_of(scrapes[-1] if scrapes else None)
        tokens = delta("generation_tokens")
        energy = self._energy(first, last, tokens)
        return ServerDuringStep(
            **energy,
            kind=kind,
            status=self.status,
            scrapes=len(scrapes) + sum(1 for r in (first, last) if r is not None),
            peak_requests_waiting=max(waiting) if waiting else None,
            peak_requests_running=max(running) if running else None,
            peak_kv_cache_usage=max(kv) if kv else None,
            first_requests_waiting=first_or_last(first, 0),
            last_requests_waiting=first_or_last(last, -1),
            preemptions=delta("preemptions"),
            prefix_cache_hit_rate=ratio("prefix_hits", "prefix_queries"),
            mean_ttft_ms=ratio("ttft_sum", "ttft_count"),
            mean_queue_ms=ratio("queue_sum", "queue_count"),
            generation_tokens=tokens,
        )


    def _energy(self, first: CounterReading | None, last: CounterReading | None, tokens: float | None) -> dict:
        """The GPUs' energy between the two counter readings, and per generated token between them."""
        with self._lock:
            readings = list(self._gpus)
        if not readings:
            return {}
        if first is None or last is None or tokens is None:
            return {"energy_note": "no generated-token counter read at both ends of the window"}
        joules, gpus, basis, source, reason = energy_between(readings, first.wall_time, last.wall_time,
                                                             self.endpoint_name)
        note = reason
        if joules is not None:
            how = [("all GPUs: the one endpoint" if basis == "only_endpoint" else None),
                   ("integrated power readings" if source == "power" else None)]
            note = "; ".join(h for h in how if h) or None
            if tokens <= 0:
                note = "no tokens generated in the window"
        return {"energy_j": joules, "energy_gpus": gpus, "energy_note": note,
                "joules_per_output_token": joules / tokens if joules is not None and tokens and tokens > 0 else None}


def _kind_of(metrics: ServerMetrics | None) -> str | None:
    if metrics is None or metrics.kind in ("", "unknown"):
        return None
    return metrics.kind
