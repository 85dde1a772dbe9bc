"""The simulator's per-request spans, as vLLM V1 sends them (`lpxtop sim --otlp-traces-endpoint URL`).

For each request that finishes, one SERVER span named `llm_request`, started at the request's arrival,
with vLLM's attributes (vllm/v1/engine/output_processor.py `do_tracing`): `gen_ai.latency.time_in_queue`,
`time_to_first_token`, `time_in_model_prefill`, `time_in_model_decode`, `time_in_model_inference`,
`e2e` (seconds), `gen_ai.usage.prompt_tokens`/`completion_tokens`, `gen_ai.request.id`,
`gen_ai.request.max_tokens`. Its trace and parent come from the request's `traceparent` header (a new
trace when there is none or it is invalid), as vLLM's do. The figures are the ones the simulator keeps in
its truth record (SimRecord.server_*), so a test can hold lpxtop's chain to them.

Export is OTLP/HTTP protobuf, batched like the OpenTelemetry SDK's BatchSpanProcessor that vLLM uses: a
batch leaves every `schedule_delay_s` (vLLM's OTEL_BSP_SCHEDULE_DELAY; 0.5 s here) or as soon as it holds
`max_batch` spans; at most `max_queue` spans wait (more are dropped and counted); a POST that fails is
counted and not retried. Messages are built with opentelemetry-proto, not the SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import Counter
from dataclasses import dataclass

import aiohttp

from lpxtop.engine.traces import otlp, parse_traceparent, perf_to_wall_offset_ns

log = logging.getLogger("lpxtop.sim")

SCHEDULE_DELAY_S = 0.5
MAX_BATCH = 512  # the SDK's OTEL_BSP_MAX_EXPORT_BATCH_SIZE
MAX_QUEUE = 2048  # the SDK's OTEL_BSP_MAX_QUEUE_SIZE
EXPORT_TIMEOUT_S = 10.0
SPAN_KIND_SERVER = 2
OFFSET_REFRESH_S = 10.0


@dataclass(frozen=True)
class RequestTimes:
    """One finished request's life on the server, in the simulator's own clock (perf_counter seconds)."""

    request_id: str
    arrival_s: float  # the front end received it (vLLM's arrival_time)
    queued_s: float  # it entered the engine's waiting queue
    scheduled_s: float  # first scheduled (prefill starts)
    first_token_s: float
    last_token_s: float
    prompt_tokens: int
    completion_tokens: int
    max_tokens: int
    traceparent: str | None = None

    @property
    def queue_ms(self) -> float:
        return (self.scheduled_s - self.queued_s) * 1000.0

    @property
    def prefill_ms(self) -> float:
        return (self.first_token_s - self.scheduled_s) * 1000.0

    @property
    def decode_ms(self) -> float:
        return (self.last_token_s - self.first_token_s) * 1000.0

    @property
    def ttft_ms(self) -> float:
        return (self.first_token_s - self.arrival_s) * 1000.0

    @property
    def e2e_ms(self) -> float:
        return (self.last_token_s - self.arrival_s) * 1000.0


class SimSpanExporter:
    """Batches `llm_request` spans and POSTs them to an OTLP/HTTP endpoint; start()/stop() on the sim's loop."""

    def __init__(self, url: str, *, service_name: str = "lpxtop-sim", schedule_delay_s: float = SCHEDULE_DELAY_S,
                 max_batch: int = MAX_BATCH, max_queue: int = MAX_QUEUE, timeout_s: float = EXPORT_TIMEOUT_S) -> None:
        self.proto = otlp.load()  # OtelUnavailable here, at start-up, with what to install
        self.url = url
        self.service_name = service_name
        self.schedule_delay_s = schedule_delay_s
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.timeout_s = timeout_s
        self._queue: list = []
        self._full = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._session: aiohttp.ClientSession | None = None
        self._offset: tuple[int, int] | None = None  # (wall − perf offset, when it was read)
        self.counts: Counter[str] = Counter()  # spans: queued, exported, dropped_queue_full, failed

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        self._task = asyncio.create_task(self._export_loop(), name="lpxtop-sim-spans")

    async def stop(self) -> None:
        """Send what is queued (one last POST, bounded by the timeout), then close."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self._session is not None:
            with contextlib.suppress(Exception):
                await self._flush()
            await self._session.close()
            self._session = None

    def add(self, times: RequestTimes, now_perf_s: float | None = None) -> None:
        """Queue the span of one finished request (never waits; dropped and counted when the queue is full)."""
        if len(self._queue) >= self.max_queue:
            self.counts["dropped_queue_full"] += 1
            return
        self._queue.append(self._span(times, now_perf_s))
        self.counts["queued"] += 1
        if len(self._queue) >= self.max_batch:
            self._full.set()

    def _wall_offset_ns(self) -> int:
        """The sim's clock is perf_counter, spans carry wall time: the offset, re-read every OFFSET_REFRESH_S
        (the wall clock may be slewed)."""
        now = time.perf_counter_ns()
        if self._offset is None or now - self._offset[1] > OFFSET_REFRESH_S * 1e9:
            self._offset = (perf_to_wall_offset_ns(), now)
        return self._offset[0]

    def _span(self, t: RequestTimes, now_perf_s: float | None):
        p = self.proto
        offset_ns = self._wall_offset_ns()

        def wall(perf_s: float) -> int:
            return int(perf_s * 1e9) + offset_ns

        parent = parse_traceparent(t.traceparent)
        span = p.Span(
            trace_id=bytes.fromhex(parent.trace_id) if parent else os.urandom(16),
            span_id=os.urandom(8),
            parent_span_id=bytes.fromhex(parent.span_id) if parent else b"",
            name="llm_request",
            kind=SPAN_KIND_SERVER,
            start_time_unix_nano=wall(t.arrival_s),
            end_time_unix_nano=wall(now_perf_s if now_perf_s is not None else t.last_token_s),
        )
        if parent is not None:
            span.flags = 0x100 | (parent.flags & 0xFF)  # remote parent, and its trace flags
        attributes = (
            ("gen_ai.latency.time_to_first_token", t.ttft_ms / 1000.0),
            ("gen_ai.latency.e2e", t.e2e_ms / 1000.0),
            ("gen_ai.latency.time_in_queue", t.queue_ms / 1000.0),
            ("gen_ai.usage.prompt_tokens", t.prompt_tokens),
            ("gen_ai.usage.completion_tokens", t.completion_tokens),
            ("gen_ai.latency.time_in_model_prefill", t.prefill_ms / 1000.0),
            ("gen_ai.latency.time_in_model_decode", t.decode_ms / 1000.0),
            ("gen_ai.latency.time_in_model_inference", (t.last_token_s - t.scheduled_s)),
            ("gen_ai.request.id", t.request_id),
            ("gen_ai.request.max_tokens", t.max_tokens),
        )
        for key, value in attributes:
            kv = span.attributes.add(key=key)
            if isinstance(value, str):
                kv.value.string_value = value
            elif isinstance(value, int):
                kv.value.int_value = value
            else:
                kv.value.double_value = value
        return span

    async def _export_loop(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._full.wait(), self.schedule_delay_s)
            self._full.clear()
            while self._queue:
                await self._flush()

    async def _flush(self) -> None:
        batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch:]
        if not batch or self._session is None:
            return
        p = self.proto
        request = p.ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.add(key="service.name").value.string_value = self.service_name
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.name = "lpxtop.sim"
        scope_spans.spans.extend(batch)
        body = request.SerializeToString()
        try:
            async with self._session.post(self.url, data=body,
                                          headers={"Content-Type": otlp.CONTENT_PROTOBUF}) as response:
                await response.read()
                ok = response.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
            log.debug("sending spans to %s failed: %s", self.url, exc)
            ok = False
        self.counts["exported" if ok else "failed"] += len(batch)
