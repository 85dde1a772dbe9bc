"""SimServer: one simulated vLLM server (scheduler + HTTP front end) on the current asyncio loop."""

from __future__ import annotations

import random
import time
from typing import Any

from aiohttp import web

from lpxtop.engine.traces import parse_traceparent
from lpxtop.sim.config import SimConfig
from lpxtop.sim.faults import FaultState
from lpxtop.sim.handlers import SimHandlers
from lpxtop.sim.metrics import SimMetrics
from lpxtop.sim.records import RecordStore, SimRecord
from lpxtop.sim.scheduler import BatchScheduler, SimRequest
from lpxtop.sim.spans import RequestTimes, SimSpanExporter
from lpxtop.sim.text import WordSource

# Long enough for handlers to finish writing, short enough that stopping a sim with a stalled stream
# does not hang a test.
_SHUTDOWN_TIMEOUT_S = 0.5


class SimServer:
    """An OpenAI-compatible streaming server that behaves like vLLM 0.32 (see lpxtop/sim/__init__.py).

    Create it, then `port = await server.start()` on a running loop; `await server.stop()` to end.
    set_faults(), records, record_for() and the state properties may be used from other threads.
    """

    def __init__(self, config: SimConfig | None = None) -> None:
        self.config = config or SimConfig()
        self.metrics = SimMetrics(self.config.model, self.config.max_model_len, self.config.kv_tokens)
        self.scheduler = BatchScheduler(self.config, self.metrics)
        self.faults = FaultState(self.config)
        self.record_store = RecordStore(self.config.max_records)
        self.rng = random.Random(self.config.seed + 2)
        self.words = WordSource(random.Random(self.config.seed + 3))
        self.started_at = time.time()
        self.host = "127.0.0.1"
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        self.spans: SimSpanExporter | None = None  # with config.otlp_traces_endpoint
        self.scheduler.on_complete = self._completed

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Bind and serve; returns the bound port (a free one when port is 0). Raises OSError if taken."""
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.add_routes(SimHandlers(self).routes())
        runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            handler_cancellation=True,
            shutdown_timeout=_SHUTDOWN_TIMEOUT_S,
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
            if self.config.otlp_traces_endpoint:  # raises OtelUnavailable without opentelemetry-proto
                self.spans = SimSpanExporter(self.config.otlp_traces_endpoint,
                                             schedule_delay_s=self.config.otlp_schedule_delay_s)
                await self.spans.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.host = host
        self.port = int(runner.addresses[0][1])
        self.started_at = time.time()
        self.scheduler.start()
        return self.port

    async def stop(self) -> None:
        """Stop the engine (in-flight requests end as aborted) and close the listener and connections."""
        await self.scheduler.stop()
        if self.spans is not None:
            spans, self.spans = self.spans, None
            await spans.stop()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    def _completed(self, request: SimRequest, now: float) -> None:
        """A request completed in the engine: its server-side times into its record, its span out."""
        received = request.received_s if request.received_s is not None else request.arrival_s
        scheduled = request.scheduled_s if request.scheduled_s is not None else request.arrival_s
        times = RequestTimes(
            request_id=request.request_id, arrival_s=received, queued_s=request.arrival_s, scheduled_s=scheduled,
            first_token_s=request.first_token_s if request.first_token_s is not None else now, last_token_s=now,
            prompt_tokens=len(request.prompt), completion_tokens=request.generated, max_tokens=request.max_tokens,
            traceparent=request.traceparent,
        )
        record = None if request.virtual else self.record_store.get(request.request_id)
        if record is not None:
            record.server_queue_ms, record.server_prefill_ms = times.queue_ms, times.prefill_ms
            record.server_decode_ms, record.server_ttft_ms = times.decode_ms, times.ttft_ms
            record.server_e2e_ms = times.e2e_ms
            parent = parse_traceparent(request.traceparent)
            record.trace_id = parent.trace_id if parent else None
        if self.spans is not None:
            self.spans.add(times)

    def set_faults(self, count: int | None = None, **faults: Any) -> None:
        """Change faults at run time (see lpxtop/sim/faults.py); count=N: only the next N requests."""
        self.faults.set(count=count, **faults)

    def reset(self) -> None:
        """Faults back to the start-up ones and records cleared."""
        self.faults.reset()
        self.record_store.clear()

    @property
    def records(self) -> list[SimRecord]:
        """The kept truth records, oldest first."""
        return self.record_store.all()

    def record_for(self, response_id: str) -> SimRecord | None:
        """The truth record of one response (by its `id`), or None."""
        return self.record_store.get(response_id)

    @property
    def requests_running(self) -> int:
        """Requests in the running batch now."""
        return self.scheduler.requests_running

    @property
    def requests_waiting(self) -> int:
        """Requests in the waiting queue now."""
        return self.scheduler.requests_waiting

    @property
    def kv_cache_usage(self) -> float:
        """KV-cache use now, 0..1."""
        return self.scheduler.kv_cache_usage

    @property
    def preemptions_total(self) -> int:
        """Preemptions since start."""
        return self.scheduler.preemptions_total
