"""SimServer: one simulated vLLM server (engine + HTTP front end) on the current asyncio loop."""

from __future__ import annotations

import random
import time
from typing import Any

from aiohttp import web

from lpxtop.sim.config import SimConfig
from lpxtop.sim.engine import Engine
from lpxtop.sim.faults import FaultState
from lpxtop.sim.handlers import SimHandlers
from lpxtop.sim.metrics import SimMetrics
from lpxtop.sim.records import RecordStore, SimRecord
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
        self.engine = Engine(self.config, self.metrics)
        self.faults = FaultState(self.config)
        self.record_store = RecordStore(self.config.max_records)
        self.rng = random.Random(self.config.seed + 2)
        self.words = WordSource(random.Random(self.config.seed + 3))
        self.started_at = time.time()
        self.host = "127.0.0.1"
        self.port: int | None = None
        self._runner: web.AppRunner | None = None

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
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.host = host
        self.port = int(runner.addresses[0][1])
        self.started_at = time.time()
        self.engine.start()
        return self.port

    async def stop(self) -> None:
        """Stop the engine (in-flight requests end as aborted) and close the listener and connections."""
        await self.engine.stop()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

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
        return self.engine.requests_running

    @property
    def requests_waiting(self) -> int:
        """Requests in the waiting queue now."""
        return self.engine.requests_waiting

    @property
    def kv_cache_usage(self) -> float:
        """KV-cache use now, 0..1."""
        return self.engine.kv_cache_usage

    @property
    def preemptions_total(self) -> int:
        """Preemptions since start."""
        return self.engine.preemptions_total
