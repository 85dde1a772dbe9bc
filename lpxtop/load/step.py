"""One step of a load test: hold a load for warm-up + window + drain, on the generator's own loop.

Timeline of a step (perf_counter seconds from its start):

    0 ── warm-up ──► W ── measured window ──► W+D ── drain ──► the last counted request ends
    requests sent in [W, W+D) are *counted*; the others keep the load steady around them
    (closed loop: the window lasts until every worker has sent one counted request, if that takes longer)

During the drain the load goes on (uncounted requests, as in the warm-up) until every counted request has
ended, so the counted ones finish under the same load they started in; then the uncounted requests still
in flight are cancelled. Every request is one `run_probe` (the probe's code path and timeouts: the same
measurement as `lpxtop` and `lpxtop once`), with one connection each: the client's pool holds more
connections than can ever be in flight, so no request waits for one.

- Closed loop: `concurrency` workers, each sending its next request when the previous one ends: exactly
  that many in flight, never more. They start together (as `vllm bench serve --max-concurrency`), or with
  `stagger_s` worker i of C sends its first request i/C of it later, so they do not go in rounds
  (lpxtop/load/rhythm.py).
- Open loop: arrivals on an absolute timeline from `schedule.arrival_gaps` (gamma, `burstiness`); at most
  `max_concurrency` in flight; an arrival that finds them all busy waits for a slot (as `vllm bench serve
  --max-concurrency`) and is counted in `arrivals_delayed`. A request's phase is decided by its arrival
  time, or, when it waited for a slot, by when it was sent: an overloaded open loop (`--rate 1e9` with 64
  slots) never gets past its first arrivals' moments, and would otherwise count nothing.

A step is bounded: its counted requests end by the window's end plus the request timeout; past that (plus
a grace) the step is cut (`timed_out`), and what was in flight is counted as failed (`step_timeout`).
`cancel()` (Ctrl-C, `q`) ends it at once: in-flight requests are cancelled and not counted (`partial`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from lpxtop.engine.probe import LoopLag, run_probe
from lpxtop.http import HttpClient
from lpxtop.load.prompts import FreshStarts
from lpxtop.load.schedule import arrival_gaps
from lpxtop.load.stepstats import RequestRecord, StepRequests
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.probe import Sample

STEP_GRACE_S = 2.0


@dataclass(frozen=True)
class StepSpec:
    """The load one step holds, and for how long."""

    index: int
    endpoint: EndpointConfig  # prompt, max_tokens and extra body already set for this step
    model: str | None
    include_usage: bool
    warmup_s: float
    duration_s: float
    concurrency: int | None = None  # closed loop
    rate: float | None = None  # open loop
    burstiness: float = 1.0
    max_concurrency: int = 1024
    seed: int = 0
    stagger_s: float = 0.0  # closed loop: worker i of C sends its first request at i / C of this (0: all at once)
    ttft_from: str = "sent"  # where each request's clock starts (lpxtop/engine/probe/stream.py TTFT_FROM)
    head_words: int = 0  # each request's prompt has its 2nd..(head_words+1)th words shuffled (load/prompts.py)

    @property
    def closed_loop(self) -> bool:
        return self.concurrency is not None

    @property
    def most_in_flight(self) -> int:
        return self.concurrency if self.concurrency is not None else self.max_concurrency


@dataclass
class StepTimes:
    """The step's moments: perf_counter seconds and their wall-clock equivalents."""

    start: float = 0.0
    window_start: float = 0.0
    window_end: float = 0.0
    deadline: float = 0.0
    wall_offset: float = 0.0  # wall = perf + offset

    def wall(self, perf: float) -> float:
        return perf + self.wall_offset


class StepRun:
    """Runs one `StepSpec` on the running loop; read its progress from any thread (plain attributes)."""

    def __init__(
        self,
        spec: StepSpec,
        client: HttpClient,
        lag: LoopLag,
        *,
        on_request: Callable[[RequestRecord, Sample | None], None] | None = None,
        on_phase: Callable[[str], None] | None = None,
    ) -> None:
        self.spec = spec
        self.client = client
        self.lag = lag
        self.on_request = on_request
        self.on_phase = on_phase
        self.counted = StepRequests()
        self.times = StepTimes()
        self.phase = "warmup"
        self.in_flight = 0
        self.sent = 0
        self.arrivals_delayed = 0
        self.counted_sent = 0
        self.workers_counted = 0  # closed loop: workers that have sent a counted request
        self.fd_failures = 0  # requests (any phase) that lpxtop could not send: its own descriptors ran out
        self.window_extended_s = 0.0
        self.status = "running"
        self._counted_open: dict[asyncio.Task, tuple[int, float]] = {}  # counted requests in flight: start
        self._tasks: set[asyncio.Task] = set()
        self._cancelled = False
        self._sending = True
        self._starts = FreshStarts(spec.endpoint.prompt, spec.head_words) if spec.head_words else None
        self._extending = False  # closed loop: the window held open past its end until every worker counted
        self._every_worker_counted = asyncio.Event()
        self._drained = asyncio.Event()
        self._stop = asyncio.Event()

    # ---- from the loop that runs the step ----

    async def run(self) -> None:
        """Run the whole step; returns when it is over (done, timed out or cancelled)."""
        spec = self.spec
        now = time.perf_counter()
        t = self.times
        t.start = now
        t.wall_offset = time.time() - now
        t.window_start = now + spec.warmup_s
        t.window_end = t.window_start + spec.duration_s
        t.deadline = t.window_end + spec.endpoint.timeout_s + STEP_GRACE_S
        driver = asyncio.ensure_future(self._closed_loop() if spec.closed_loop else self._open_loop())
        try:
            await self._until(t.window_start)
            if not self._cancelled:
                self._set_phase("measuring")
            await self._until(t.window_end)
            if self.spec.closed_loop and not self._cancelled:
                await self._until_every_worker_counted(t.deadline)
            if not self._cancelled:
                self._set_phase("draining")
                if self._counted_open:
                    await self._wait_drained(t.deadline)
                if self._counted_open and not self._cancelled:
                    self._time_out_open_requests()
        finally:
            self._sending = False
            driver.cancel()
            tasks = [driver, *self._tasks]
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._cancelled:
            self.status = "partial"
        elif self.status == "running":
            self.status = "done"

    def cancel(self) -> None:
        """Stop now (call on the step's loop): nothing more is sent, what is in flight is cancelled."""
        self._cancelled = True
        self._sending = False
        self._stop.set()

    async def _until(self, perf_deadline: float) -> None:
        delay = perf_deadline - time.perf_counter()
        if delay > 0 and not self._stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)

    async def _wait_drained(self, perf_deadline: float) -> None:
        delay = perf_deadline - time.perf_counter()
        if delay <= 0:
            return
        drained = asyncio.ensure_future(self._drained.wait())
        stopped = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({drained, stopped}, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
        finally:
            drained.cancel()
            stopped.cancel()

    async def _until_every_worker_counted(self, cap: float) -> None:
        """A closed-loop window lasts until each worker has sent a counted request (bounded by `cap`): with
        requests longer than the window, a worker busy with its warm-up request all window long would
        otherwise leave the step with nothing to measure (seen on a starved real server: 10-s requests, a
        10-s window, 0 counted). While it is held open, every request sent is counted (`_extending`, not a
        deadline moved in small steps: a worker whose request ended while the loop was late saw the moved
        deadline already past, stopped, and the step ended with nothing counted). The window's end is
        where it was released, so the load is counted as it was held. Reaching `cap` times the step out."""
        assert self.spec.concurrency is not None
        t = self.times
        if self.workers_counted >= self.spec.concurrency or self._cancelled:
            return
        self._extending = True
        try:
            delay = cap - time.perf_counter()
            if delay > 0:
                counted = asyncio.ensure_future(self._every_worker_counted.wait())
                stopped = asyncio.ensure_future(self._stop.wait())
                try:
                    await asyncio.wait({counted, stopped}, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    counted.cancel()
                    stopped.cancel()
            if self.workers_counted < self.spec.concurrency and not self._cancelled:
                self.status = "timed_out"  # some worker never got to send a counted request
        finally:
            self._extending = False
            t.window_end = max(t.window_end, time.perf_counter())
            self.window_extended_s = max(0.0, t.window_end - (t.window_start + self.spec.duration_s))

    def _set_phase(self, phase: str) -> None:
        self.phase = phase
        if self.on_phase is not None:
            self.on_phase(phase)

    def _phase_at(self, perf: float) -> str:
        t = self.times
        if perf < t.window_start:
            return "warmup"
        if perf < t.window_end or self._extending:
            return "measured"
        return "drain"

    def _keep_sending(self) -> bool:
        """Past the window, the load goes on only while counted requests are still running."""
        if not self._sending:
            return False
        return time.perf_counter() < self.times.window_end or self._extending or bool(self._counted_open)

    async def _closed_loop(self) -> None:
        spec = self.spec
        assert spec.concurrency is not None
        workers = [asyncio.ensure_future(self._worker(i * spec.stagger_s / spec.concurrency))
                   for i in range(spec.concurrency)]
        try:
            await asyncio.gather(*workers)
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def _worker(self, first_after_s: float = 0.0) -> None:
        if first_after_s > 0:
            await self._until(self.times.start + first_after_s)
        counted = False  # has this worker sent a counted request yet?
        while self._sending and (not counted or self._keep_sending()):
            phase = self._phase_at(time.perf_counter())
            if phase == "drain" and not counted:
                # past the window's end before `_until_every_worker_counted` took over (its timer ran late):
                # the window is held open for this worker all the same
                phase = "measured"
            if phase == "measured" and not counted:
                counted = True
                self.workers_counted += 1
                if self.workers_counted >= (self.spec.concurrency or 0):
                    self._every_worker_counted.set()
            await self._one(phase)

    async def _open_loop(self) -> None:
        spec = self.spec
        assert spec.rate is not None
        slots = asyncio.Semaphore(spec.max_concurrency)
        gaps = arrival_gaps(spec.rate, spec.burstiness, spec.seed)
        arrival = self.times.start
        while self._keep_sending():
            delay = arrival - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
                if not self._keep_sending():
                    break
            waited = slots.locked()
            await slots.acquire()
            if waited and not self._keep_sending():
                slots.release()
                break
            # an arrival that waited for a slot is sent now: its phase is the moment it leaves
            phase = self._phase_at(max(arrival, time.perf_counter()) if waited else arrival)
            if waited and phase == "measured":
                self.arrivals_delayed += 1  # every slot busy: this arrival waited, the offered rate is not held
            task = asyncio.ensure_future(self._one(phase))
            self._tasks.add(task)
            task.add_done_callback(lambda t: (self._tasks.discard(t), slots.release()))
            arrival += next(gaps)

    async def _one(self, phase: str) -> None:
        spec = self.spec
        task = asyncio.current_task()
        counted = phase == "measured"
        if counted:
            self.counted_sent += 1
        if counted and task is not None:
            self._counted_open[task] = (time.perf_counter_ns(), time.time())
        watch = self.lag.watch()
        self.in_flight += 1
        self.sent += 1
        endpoint = spec.endpoint
        if self._starts is not None:
            endpoint = replace(endpoint, prompt=self._starts.next())
        try:
            sample = await run_probe(self.client, endpoint, spec.model, include_usage=spec.include_usage,
                                     ttft_from=spec.ttft_from)
        finally:
            lag_ns = watch.close()
            self.in_flight -= 1
            if counted and task is not None:
                self._counted_open.pop(task, None)
        end_ns = time.perf_counter_ns()
        if sample.error_kind == "client_fd_limit":
            self.fd_failures += 1
        record = RequestRecord.of(sample, end_ns, lag_ns / 1e6, phase)
        if counted:
            self.counted.add(record, sample)
            if not self._counted_open and time.perf_counter() >= self.times.window_end:
                self._drained.set()
        if self.on_request is not None:
            self.on_request(record, sample)

    def _time_out_open_requests(self) -> None:
        """The deadline passed with counted requests still running: they count as failed."""
        self.status = "timed_out"
        now_ns = time.perf_counter_ns()
        for start_ns, start_wall in list(self._counted_open.values()):
            record = RequestRecord(
                phase="measured", start_wall=start_wall, start_ns=start_ns, end_ns=now_ns, ok=False,
                error_kind="step_timeout",
                error_message=f"still running at the step's deadline ({self.spec.endpoint.timeout_s:g} s request timeout + grace)",
                http_status=None, response_id=None, ttft_ms=None, e2e_ms=None, tpot_ms=None, output_tokens=None,
                output_tokens_approx=False, prompt_tokens=None, token_events=0, lag_ms=0.0,
            )
            self.counted.add_failure(record)
            if self.on_request is not None:
                self.on_request(record, None)
        self._counted_open.clear()
