"""The simulated engine: one asyncio scheduler loop doing continuous batching over a KV-cache budget.

Each iteration (a "step") admits waiting requests FIFO while there is a free slot (max_num_seqs) and
room in the KV cache (with `wave_load`, only once the batch has emptied: waves), preempts the newest running request while the step's new tokens would not fit,
sleeps for the step's simulated duration, then hands every scheduled request its next token. Handlers
read tokens from the request's own asyncio.Queue; virtual (background) requests have none.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from lpxtop.sim.config import SimConfig, load_function
from lpxtop.sim.metrics import SimMetrics
from lpxtop.sim.prefix_cache import PrefixCache

# Handler-facing events put on SimRequest.events:
#   ("admitted", t_s)                  first scheduled (prefill starts)
#   ("tokens", n, t_s, finish_reason)  n new tokens; finish_reason is None until the last ones
#   ("finished", reason, t_s)          ended without a token (abort/error)
RequestEvent = tuple

_BACKGROUND_TICK_S = 0.25
_MAX_WAVES = 10_000
_SYSTEM_PREFIX = [f"<sys{i}>" for i in range(64)]  # shared by virtual requests, so the prefix cache hits


@dataclass
class Wave:
    """One admission of the wave mode: when it was admitted and when its first tokens came (perf_counter_ns).

    A request that reaches the queue at `t` (with a slot free in the next wave) is admitted by the first
    wave with `admitted_ns >= t` and has its first token at that wave's `first_token_ns`: the ground
    truth of the TTFT a request arriving at any moment would see.
    """

    admitted_ns: int
    size: int
    first_token_ns: int | None = None


@dataclass(eq=False)
class SimRequest:
    """One request inside the engine (HTTP or virtual)."""

    request_id: str
    prompt: list[str]
    max_tokens: int
    target_tokens: int  # where it stops: max_tokens, or earlier for a simulated EOS
    finish_reason: str = "length"  # reason when target_tokens is reached
    virtual: bool = False
    closed_loop: bool = False  # a wave-load client's request: the client asks again when it ends
    first_token_delay_s: float = 0.0
    arrival_s: float = field(default_factory=time.perf_counter)  # entered the engine (vLLM's queued_ts)
    events: asyncio.Queue | None = None
    received_s: float | None = None  # the HTTP front end received it (vLLM's arrival_time); None: virtual
    traceparent: str | None = None  # the request's W3C header, for its span (sim/spans.py)

    state: str = "new"  # new | waiting | prefill | running | finished
    generated: int = 0
    kv_held: int = 0
    prefill_ready_s: float = 0.0
    prefill_uncached: int = 0
    scheduled_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    num_preemptions: int = 0

    def emit(self, event: RequestEvent) -> None:
        """Pass an event to the handler, if there is one."""
        if self.events is not None:
            self.events.put_nowait(event)


class BatchScheduler:
    """Continuous-batching scheduler with a KV budget, preemption, prefix caching and background load."""

    def __init__(self, config: SimConfig, metrics: SimMetrics) -> None:
        self.config = config
        self.metrics = metrics
        self._rng = random.Random(config.seed)
        self._load_rng = random.Random(config.seed + 1)
        self._waiting: deque[SimRequest] = deque()
        self._running: list[SimRequest] = []
        self._kv_used = 0
        self._preemptions = 0
        self._prefix_cache = PrefixCache(
            config.prefix_block_tokens, config.kv_tokens // config.prefix_block_tokens
        )
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._virtual_ids = itertools.count(1)
        self._virtual_in_flight = 0
        self._started_s = time.perf_counter()
        self._waves: deque[Wave] = deque(maxlen=_MAX_WAVES)
        self._stopping = False
        # called with (request, finish time) for each request that completes (SimServer: records, spans)
        self.on_complete: Callable[[SimRequest, float], None] | None = None

    @property
    def requests_running(self) -> int:
        """Requests in the batch (prefilling or decoding)."""
        return len(self._running)

    @property
    def requests_waiting(self) -> int:
        """Requests queued for a slot (new or preempted)."""
        return len(self._waiting)

    @property
    def kv_tokens_used(self) -> int:
        """KV-cache tokens held by running requests."""
        return self._kv_used

    @property
    def kv_cache_usage(self) -> float:
        """KV-cache use, 0..1."""
        return self._kv_used / self.config.kv_tokens

    @property
    def preemptions_total(self) -> int:
        """Preemptions since start."""
        return self._preemptions

    @property
    def waves(self) -> list[Wave]:
        """The wave mode's admissions, oldest first (bounded; empty without `wave_load`)."""
        return list(self._waves)

    @property
    def virtual_in_flight(self) -> int:
        """Background (virtual) requests waiting or running."""
        return self._virtual_in_flight

    def start(self) -> None:
        """Start the scheduler loop (and the background load, if configured) on the running loop."""
        self._started_s = time.perf_counter()
        self._stopping = False
        self._tasks.append(asyncio.create_task(self._schedule_loop(), name="sim-scheduler"))
        if self.config.wave_load is not None:
            for _ in range(self.config.wave_load[0]):
                self._submit_closed_loop()
        load = load_function(self.config.background_load)
        if load is not None:
            self._tasks.append(asyncio.create_task(self._background_loop(load), name="sim-background"))
        self._publish()

    async def stop(self) -> None:
        """Stop the loops and end every request still in flight with "abort"."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        for request in [*self._running, *self._waiting]:
            self.abort(request)

    def has_room(self) -> bool:
        """Whether the waiting queue can take one more request."""
        return len(self._waiting) < self.config.max_waiting

    def submit(self, request: SimRequest) -> bool:
        """Queue a request; False (and counted as an admission rejection) when the queue is full."""
        if not self.has_room():
            self.metrics.rejected_queue_full.inc()
            return False
        request.state = "waiting"
        self._waiting.append(request)
        if request.virtual:
            self._virtual_in_flight += 1
        self.metrics.observe_request_params(request.max_tokens)
        self._publish()
        self._wake.set()
        return True

    def abort(self, request: SimRequest, reason: str = "abort") -> None:
        """End a request that has not finished (client gone, error injected); frees its KV."""
        if request.state in ("finished", "new"):
            return
        if request.state == "waiting":
            with contextlib.suppress(ValueError):
                self._waiting.remove(request)
        else:
            self._release(request)
        self._mark_finished(request)
        self.metrics.success[reason].inc()
        request.emit(("finished", reason, time.perf_counter()))
        self._publish()

    async def _schedule_loop(self) -> None:
        while True:
            if not self._running and not self._waiting:
                self._wake.clear()
                await self._wake.wait()
                continue
            now = time.perf_counter()
            self._admit(now)
            prefilling = [r for r in self._running if r.state == "prefill" and r.prefill_ready_s <= now]
            decoding = [r for r in self._running if r.state == "running"]
            prefilling, decoding = self._make_room(prefilling, decoding)
            if not prefilling and not decoding:
                await self._idle_until_ready(now)
                continue
            await asyncio.sleep(self._step_seconds(prefilling, decoding))
            self._finish_step(prefilling, decoding, time.perf_counter())

    def _admit(self, now: float) -> None:
        cfg = self.config
        if cfg.wave_load is not None:
            if self._running or not self._waiting:
                return  # waves: nobody joins a batch that is still running
            self._waves.append(Wave(admitted_ns=int(now * 1e9), size=0))
        while self._waiting and len(self._running) < cfg.max_num_seqs:
            request = self._waiting[0]
            # A preempted request recomputes its prompt and what it has generated so far.
            context = (
                request.prompt if request.generated == 0 else request.prompt + ["<gen>"] * request.generated
            )
            if self._kv_used + len(context) + 1 > cfg.kv_tokens:
                if self._running:
                    break  # FIFO: the head waits for room, nobody overtakes it
                # Could never fit (requests are validated against max_model_len, so only a bug gets here).
                self.abort(request, reason="error")
                continue
            self._waiting.popleft()
            cached = self._prefix_cache.lookup_and_insert(context)
            self.metrics.count_prefill(len(context), cached)
            request.prefill_uncached = len(context) - cached
            request.kv_held = len(context)
            self._kv_used += request.kv_held
            request.state = "prefill"
            self._running.append(request)
            if cfg.wave_load is not None:
                self._waves[-1].size += 1
            if request.scheduled_s is None:
                request.scheduled_s = now
                request.prefill_ready_s = now + request.first_token_delay_s
                request.emit(("admitted", now))
            else:
                request.prefill_ready_s = now
        self._publish()

    def _make_room(
        self, prefilling: list[SimRequest], decoding: list[SimRequest]
    ) -> tuple[list[SimRequest], list[SimRequest]]:
        # Every scheduled request gains one KV token this step; preempt the newest until that fits.
        while self._running and self._kv_used + len(prefilling) + len(decoding) > self.config.kv_tokens:
            victim = self._running[-1]
            self._release(victim)
            victim.state = "waiting"
            victim.num_preemptions += 1
            self._waiting.appendleft(victim)
            self._preemptions += 1
            self.metrics.preemptions.inc()
            prefilling = [r for r in prefilling if r is not victim]
            decoding = [r for r in decoding if r is not victim]
        self._publish()
        return prefilling, decoding

    async def _idle_until_ready(self, now: float) -> None:
        # Only requests held back by first_token_delay (or none runnable): wait for the earliest one.
        held = [r.prefill_ready_s for r in self._running if r.state == "prefill"]
        timeout = max(0.001, min(held) - now) if held else 0.05
        self._wake.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    def _step_seconds(self, prefilling: list[SimRequest], decoding: list[SimRequest]) -> float:
        cfg = self.config
        ms = 0.0
        if decoding:
            # Only the requests decoding in this step add to its decode cost: one whose prompt is prefilled in
            # it pays the prefill below (a real engine's step costs its tokens: a prompt's, plus one per
            # decoding request). Charging a prefill a decode slot as well made a round of C prompts cost
            # C decode slots more as soon as one request was decoding beside it (296 ms against 58 at 100).
            ms += cfg.itl_ms * (1.0 + cfg.batch_factor * (len(decoding) - 1))
        if prefilling:
            # Prefills of one step are batched: one fixed cost plus a per-token term.
            ms += cfg.ttft_ms + cfg.prefill_ms_per_token * sum(r.prefill_uncached for r in prefilling)
        if cfg.jitter > 0:
            ms *= 1.0 + self._rng.uniform(-cfg.jitter, cfg.jitter)
        return max(0.0, ms) / 1000.0

    def _finish_step(self, prefilling: list[SimRequest], decoding: list[SimRequest], now: float) -> None:
        m = self.metrics
        iteration_tokens = len(decoding) + sum(r.prefill_uncached for r in prefilling)
        m.h_iteration_tokens.observe(iteration_tokens)
        for request in prefilling + decoding:
            if request.state not in ("prefill", "running"):
                continue  # aborted while the step ran
            request.state = "running"
            if request.first_token_s is None:
                request.first_token_s = now
                m.h_ttft.observe(now - request.arrival_s)
                if self._waves and self._waves[-1].first_token_ns is None:
                    self._waves[-1].first_token_ns = int(now * 1e9)
            elif request.last_token_s is not None:
                m.h_itl.observe(now - request.last_token_s)
            request.last_token_s = now
            request.generated += 1
            request.kv_held += 1
            self._kv_used += 1
            m.generation_tokens.inc()
            if request.generated >= request.target_tokens:
                self._complete(request, now)
            else:
                request.emit(("tokens", 1, now, None))
        self._publish()

    def _complete(self, request: SimRequest, now: float) -> None:
        self._release(request)
        self._mark_finished(request)
        m = self.metrics
        m.success[request.finish_reason].inc()
        scheduled = request.scheduled_s if request.scheduled_s is not None else request.arrival_s
        first = request.first_token_s if request.first_token_s is not None else now
        m.h_e2e.observe(now - request.arrival_s)
        m.h_queue.observe(scheduled - request.arrival_s)
        m.h_inference.observe(now - scheduled)
        m.h_prefill.observe(first - scheduled)
        m.h_decode.observe(now - first)
        if request.generated > 1:
            m.h_tpot.observe((now - first) / (request.generated - 1))
        m.h_prompt_tokens.observe(len(request.prompt))
        m.h_generation_tokens.observe(request.generated)
        m.h_num_preemptions.observe(request.num_preemptions)
        if self.on_complete is not None:
            self.on_complete(request, now)
        request.emit(("tokens", 1, now, request.finish_reason))

    def _release(self, request: SimRequest) -> None:
        if request in self._running:
            self._running.remove(request)
            self._kv_used -= request.kv_held
        request.kv_held = 0

    def _mark_finished(self, request: SimRequest) -> None:
        request.state = "finished"
        if request.virtual:
            self._virtual_in_flight -= 1
        if request.closed_loop and not self._stopping:
            self._submit_closed_loop()  # the client asks again at once: it is waiting when the batch empties

    def _submit_closed_loop(self) -> None:
        assert self.config.wave_load is not None
        tokens = max(1, min(self.config.wave_load[1], self.config.max_model_len - len(_SYSTEM_PREFIX[:16]) - 1))
        request = SimRequest(
            request_id=f"virtual-{next(self._virtual_ids)}",
            prompt=_SYSTEM_PREFIX[:16],
            max_tokens=tokens,
            target_tokens=tokens,
            virtual=True,
            closed_loop=True,
        )
        self.submit(request)

    def _publish(self) -> None:
        self.metrics.set_state(len(self._running), len(self._waiting), self.kv_cache_usage)

    async def _background_loop(self, load) -> None:
        """Keep about load(t) virtual requests in flight, so the demo's gauges and latencies move."""
        rng = self._load_rng
        cfg = self.config
        max_len = cfg.max_model_len
        while True:
            target = int(max(0.0, load(time.perf_counter() - self._started_s)))
            while self._virtual_in_flight < target and self.has_room():
                own = [f"<v{rng.getrandbits(32)}>" for _ in range(rng.randint(*cfg.background_prompt_tokens))]
                prompt = (_SYSTEM_PREFIX + own)[: max(1, max_len // 2)]
                max_tokens = max(1, min(rng.randint(*cfg.background_max_tokens), max_len - len(prompt)))
                request = SimRequest(
                    request_id=f"virtual-{next(self._virtual_ids)}",
                    prompt=prompt,
                    max_tokens=max_tokens,
                    target_tokens=max_tokens,
                    virtual=True,
                )
                self.submit(request)
            await asyncio.sleep(_BACKGROUND_TICK_S)
