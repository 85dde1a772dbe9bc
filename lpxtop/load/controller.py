"""The load controller: runs a `LoadPlan` on its own thread and event loop, and publishes `LoadState`s.

Its loop is the load generator's alone: never the UI's, never the engine's (the engine keeps scraping the
server's /metrics, reading the GPU and the host beside it). Between steps, while nothing is in flight, it
computes the finished step's statistics, judges it and picks the next load; during a step it only sends,
stamps and files requests, and twice a second publishes a live view over the most recent ones.

Readers on other threads call `state()` (an attribute read) and `stop()`. Marks for a recording (step
started, step finished, run finished) go to the listeners of `add_mark_listener`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import IO, Any

from lpxtop import jsonout
from lpxtop.engine import no_model_listed
from lpxtop.engine.probe import LoopLag, ThreadCpuWait, fetch_models, rejects_stream_options, run_probe
from lpxtop.http import HttpClient
from lpxtop.load.plan import LoadPlan
from lpxtop.load.prompts import CALIBRATION_WORDS, Calibration, filler_text
from lpxtop.load.rhythm import rhythm_of
from lpxtop.load.search import capacity, knee, saturation
from lpxtop.load.server_window import ServerWatch
from lpxtop.load.step import StepRun, StepSpec
from lpxtop.load.stepstats import RequestRecord, client_health, summarize
from lpxtop.load.ticklag import TickLag
from lpxtop.loopthread import LoopThread
from lpxtop.model.load import Capacity, LoadState, StepResult
from lpxtop.model.probe import Sample

log = logging.getLogger("lpxtop.load")

PUBLISH_EVERY_S = 0.5
DOWN_KINDS = ("refused", "dns", "tls", "connect_timeout")
METRICS_CONNECTIONS = 4
REFINE_TRIES = 4  # requests (max_tokens 1) that check the prompt length of each target before the steps

MarkListener = Callable[[str, dict, float], None]


class TargetDown(Exception):
    """The target cannot be load-tested: it did not answer, or answered every warm-up request with an error."""


class LoadController:
    """Runs one load test. `start()`, then `wait()` or `stop()`; `state()` from any thread."""

    def __init__(
        self,
        plan: LoadPlan,
        *,
        server_watch: ServerWatch | None = None,
        requests_out: IO[str] | None = None,
    ) -> None:
        self.plan = plan
        self.server_watch = server_watch
        self.requests_out = requests_out
        self.model: str | None = plan.endpoint.model
        self.include_usage = True
        self.calibration: Calibration | None = None
        self.outcome = "running"  # "done" | "stopped" | "target_down" | "error"
        self.error: str | None = None
        self.steps: list[StepResult] = []
        self.started_at = time.time()
        self.finished_at: float | None = None
        self.prefix_cache_warning: str | None = None
        self.capacity: Capacity | None = None
        self._base: StepResult | None = None
        self._in_preflight = False
        self._strategy = plan.strategy()
        self._seq = 0
        self._state = LoadState(
            target=plan.endpoint.url, model=self.model, mode=plan.mode, search=plan.search,
            planned_levels=plan.levels, slo_text=plan.slo.text if plan.slo else None,
            duration_s=plan.duration_s, warmup_s=plan.warmup_s, message="starting",
        )
        self._loop_thread: LoopThread | None = None
        self._main: asyncio.Task | None = None
        self._run: StepRun | None = None
        self._stop_requested = threading.Event()
        self._done = threading.Event()
        self._marks: list[MarkListener] = []
        self._request_listeners: list[Callable[[int, RequestRecord], None]] = []
        self._sample_listeners: list[Callable[[int, str, Sample], None]] = []
        self._changed: list[Callable[[LoadState], None]] = []
        self._state_hooks: list[Callable[[LoadState], LoadState]] = []

    # ---- any thread ----

    def state(self) -> LoadState:
        state = self._state
        for hook in self._state_hooks:  # what arrives after a step ended (its server spans: load/chain.py)
            state = hook(state)
        return state

    def add_state_hook(self, hook: Callable[[LoadState], LoadState]) -> None:
        """`hook(state)` -> the state with what it adds, for every reader of `state()` (any thread)."""
        self._state_hooks.append(hook)

    def add_mark_listener(self, listener: MarkListener) -> None:
        """`listener(kind, payload, wall_time)` for "load_start", "load_step_start", "load_step_end",
        "load_end": where a recording marks the run (called on the load loop: return at once)."""
        self._marks.append(listener)

    def add_request_listener(self, listener: Callable[[int, RequestRecord], None]) -> None:
        """`listener(step_index, record)` for every finished request (warm-up and drain ones too; see
        `record.phase`), on the load loop: return at once (append to a list, put on a queue)."""
        self._request_listeners.append(listener)

    def add_sample_listener(self, listener: Callable[[int, str, Sample], None]) -> None:
        """`listener(step_index, phase, sample)` for every request that ran to an outcome, with its whole
        measurement (OpenTelemetry export, lpxtop/otel), on the load loop: return at once."""
        self._sample_listeners.append(listener)

    def on_state(self, listener: Callable[[LoadState], None]) -> None:
        """Called with every published state (on the load loop: return at once)."""
        self._changed.append(listener)

    def start(self) -> None:
        if self._loop_thread is not None:
            return
        self._loop_thread = LoopThread("lpxtop-load")
        self._loop_thread.start(self._run_to_end())

    def stop(self) -> None:
        """Stop at once: requests in flight are cancelled, the step under way is reported as partial."""
        self._stop_requested.set()
        if self._loop_thread is not None:
            self._loop_thread.call_soon(self._cancel_on_loop)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the run to end; True when it has."""
        return self._done.wait(timeout)

    def join(self, timeout: float = 10.0) -> None:
        if self._loop_thread is not None:
            self._loop_thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._loop_thread is not None and not self._done.is_set()

    # ---- the load loop ----

    async def _run_to_end(self) -> None:
        """The whole run, on the load thread's loop (lpxtop/loopthread.py), which ends with it."""
        try:
            await self._amain()
        except Exception as exc:  # noqa: BLE001 - reported in the state and the exit status
            log.exception("load test failed")
            self.outcome, self.error = "error", f"{type(exc).__name__}: {exc}"
        finally:
            self.finished_at = self.finished_at or time.time()
            self._done.set()

    def _cancel_on_loop(self) -> None:
        if self._run is not None:
            self._run.cancel()
        elif self._in_preflight and self._main is not None and not self._main.done():
            self._main.cancel()

    async def _amain(self) -> None:
        self._main = asyncio.current_task()
        if self._stop_requested.is_set():
            self._finish("stopped", "stopped before the first request")
            return
        plan = self.plan
        most = max(self._most_in_flight(level) for level in self._levels_bound())
        # One connection per request in flight, and more: the pool never makes a request wait.
        client = HttpClient(timeout=plan.endpoint.timeout_s, max_connections=most + 8, max_idle=most + 8,
                            idle_expiry_s=60.0)
        metrics_client = HttpClient(timeout=5.0, max_connections=METRICS_CONNECTIONS, max_idle=2)
        publisher = asyncio.ensure_future(self._publish_loop())
        try:
            self._emit_mark("load_start", {"plan": plan.summary()})
            self._in_preflight = True
            try:
                await self._preflight(client)
            except TargetDown as exc:
                self._finish("target_down", str(exc))
                return
            except asyncio.CancelledError:
                self._finish("stopped", "stopped during the warm-up")
                return
            finally:
                self._in_preflight = False
            lag = LoopLag()
            cpu = ThreadCpuWait()
            try:
                while not self._stop_requested.is_set():
                    level = self._strategy.next_level(self.steps)
                    if level is None:
                        break
                    step = await self._run_step(level, client, metrics_client, lag, cpu)
                    self.steps.append(step)
                    self._publish(phase="judging", live=None)
                    if step.status == "partial":
                        break
            finally:
                cpu.close()
            stopped = self._stop_requested.is_set()
            reason = "stopped by the user" if stopped else self._strategy.stop_reason(self.steps)
            self._finish("stopped" if stopped else "done", reason)
        finally:
            publisher.cancel()
            with contextlib.suppress(BaseException):
                await publisher
            await client.aclose()
            await metrics_client.aclose()
            for _ in range(3):  # aborted transports close their sockets in callbacks: let them run before the loop ends
                await asyncio.sleep(0)

    def _levels_bound(self) -> tuple[float, ...]:
        plan = self.plan
        if plan.search:
            return (plan.max_level,)
        return plan.levels

    def _most_in_flight(self, level: float) -> int:
        concurrency, rate, _ = self.plan.step_load(level)
        return concurrency if concurrency is not None else self.plan.max_concurrency

    # ---- before the first step ----

    async def _preflight(self, client: HttpClient) -> None:
        """Model, usage support, prompt calibration and warm-up requests; raise TargetDown when it is."""
        plan = self.plan
        endpoint = plan.endpoint
        self._publish(phase="warmup", message=f"checking {endpoint.url}")
        if self.model is None:
            ids, error = await fetch_models(client, endpoint)
            if error and not ids:
                raise TargetDown(f"{endpoint.url}: GET /models failed: {error}")
            if not ids:
                raise TargetDown(f"{endpoint.url}: {no_model_listed(endpoint)}")
            self.model = ids[0]
        if plan.uses_input_tokens:
            await self._calibrate(client)
        first_level = self._strategy.next_level([])
        assert first_level is not None
        _, _, tokens = plan.step_load(first_level)
        warm = plan.step_endpoint(tokens, self.calibration)
        successes, attempts, errors = 0, 0, []
        limit = max(3, 2 * plan.warmup_requests)
        while successes < max(1, plan.warmup_requests) and attempts < limit:
            attempts += 1
            self._publish(phase="warmup", message=f"warm-up request {attempts}")
            sample = await self._probe(client, warm)
            if sample.ok:
                successes += 1
                continue
            errors.append(sample.error_text or "error")
            if sample.error_kind in DOWN_KINDS:
                raise TargetDown(f"{endpoint.url} is down: {sample.error_text}")
        if successes == 0:
            raise TargetDown(f"{endpoint.url}: every warm-up request failed ({'; '.join(errors[-3:])})")

    async def _probe(self, client: HttpClient, endpoint) -> Sample:
        sample = await run_probe(client, endpoint, self.model, include_usage=self.include_usage)
        if self.include_usage and rejects_stream_options(sample):
            self.include_usage = False
            sample = await run_probe(client, endpoint, self.model, include_usage=False)
        return sample

    async def _calibrate(self, client: HttpClient) -> None:
        plan = self.plan
        points = []
        for words in (CALIBRATION_WORDS, 2 * CALIBRATION_WORDS):
            # no random prefix: its token count varies from request to request (see load/prompts.py)
            endpoint = replace(plan.step_endpoint(None, None), prompt=filler_text(words), max_tokens=1,
                               random_prefix=False)
            self._publish(phase="warmup", message=f"calibrating the prompt length ({words} words)")
            sample = await self._probe(client, endpoint)
            if not sample.ok and sample.error_kind in DOWN_KINDS:
                raise TargetDown(f"{plan.endpoint.url} is down: {sample.error_text}")
            if sample.prompt_tokens is not None:
                points.append((words, sample.prompt_tokens))
        if len(points) == 2:
            self.calibration = Calibration.from_points(*points[0], *points[1])
            for tokens in self._token_targets():
                await self._refine(client, tokens)
        else:
            log.warning("the server reports no prompt token counts: assuming one token per word")

    def _token_targets(self) -> list[int]:
        plan = self.plan
        if plan.mode == "input_tokens":
            return [int(level) for level in plan.levels]
        return [plan.input_tokens] if plan.input_tokens is not None else []

    async def _refine(self, client: HttpClient, tokens: int) -> None:
        """Check the line's word count for `tokens` with the server (max_tokens 1) and correct it, at most
        REFINE_TRIES times; keep the closest."""
        cal = self.calibration
        assert cal is not None
        words = cal.words_for(tokens)
        best: tuple[int, int] | None = None  # (distance, words)
        tried: list[tuple[int, int]] = []
        for _ in range(REFINE_TRIES):
            endpoint = replace(self.plan.step_endpoint(None, None), prompt=filler_text(words), max_tokens=1,
                               random_prefix=False)
            self._publish(phase="warmup", message=f"calibrating the prompt length ({tokens} tokens)")
            sample = await self._probe(client, endpoint)
            if sample.prompt_tokens is None:
                break
            distance = abs(sample.prompt_tokens - tokens)
            if best is None or distance < best[0]:
                best = (distance, words)
            if distance == 0:
                break
            tried.append((words, sample.prompt_tokens))
            words = cal.next_guess(tokens, tried)
        if best is not None:
            self.calibration = self.calibration.refined(tokens, best[1])

    # ---- one step ----

    async def _run_step(
        self, level: float, client: HttpClient, metrics_client: HttpClient, lag: LoopLag, cpu: ThreadCpuWait
    ) -> StepResult:
        plan = self.plan
        index = len(self.steps)
        concurrency, rate, tokens = plan.step_load(level)
        spec = StepSpec(
            index=index,
            endpoint=plan.step_endpoint(tokens, self.calibration),
            model=self.model,
            include_usage=self.include_usage,
            warmup_s=plan.warmup_s,
            duration_s=plan.duration_s,
            concurrency=concurrency,
            rate=rate,
            burstiness=plan.burstiness,
            max_concurrency=plan.max_concurrency,
            seed=plan.seed + index,
            stagger_s=plan.warmup_s if plan.stagger and concurrency is not None else 0.0,
            head_words=plan.head_words(tokens, self.calibration),
            ttft_from=plan.ttft_from,
        )
        base = StepResult(
            index=index, mode=plan.mode, level=level, concurrency=concurrency, request_rate=rate,
            burstiness=plan.burstiness if rate is not None else None,
            max_concurrency=plan.max_concurrency if rate is not None else None,
            input_tokens_target=tokens, output_tokens_target=plan.output_tokens, status="running",
            started_at=time.time(), duration_s=0.0, completed=0, failed=0,
        )
        readings: dict[str, Any] = {}
        cpu_marks: dict[str, tuple[int | None, float]] = {}
        watch = self.server_watch
        ticks = TickLag()

        def on_phase(phase: str) -> None:
            now = time.time()
            cpu_marks[phase] = (cpu.read(), time.perf_counter())
            if phase == "measuring":
                ticks.start()
            elif phase == "draining":
                ticks.stop()
            if watch is not None and phase in ("measuring", "draining"):
                readings[phase] = asyncio.ensure_future(watch.read_counters(metrics_client, now))
            self._publish(phase=phase, live=self._live(base, run))

        run = StepRun(spec, client, lag, on_request=self._on_request(index, level), on_phase=on_phase)
        self._run = run
        self._base = base
        self._emit_mark("load_step_start", {"step": index, "level": level, "mode": plan.mode})
        self._publish(phase="warmup", live=self._live(base, run), message="")
        try:
            await run.run()
        finally:
            self._run = None
            ticks.stop()
        end_perf = time.perf_counter()
        window_end_marks = cpu_marks.get("draining", (cpu.read(), end_perf))
        first, last = None, None
        if self._stop_requested.is_set():  # stopping: no waiting for /metrics
            for task in readings.values():
                task.cancel()
        else:
            if "measuring" in readings:
                first = await _result(readings["measuring"])
            if "draining" in readings:
                last = await _result(readings["draining"])
        times = run.times
        window_start_wall = times.wall(times.window_start)
        window_end_wall = times.wall(min(times.window_end, end_perf))
        server = watch.during(window_start_wall, window_end_wall, first, last) if watch is not None else None
        cpu_share = None
        start_mark = cpu_marks.get("measuring")
        if start_mark is not None and start_mark[0] is not None and window_end_marks[0] is not None:
            span = window_end_marks[1] - start_mark[1]
            if span > 0:
                cpu_share = (window_end_marks[0] - start_mark[0]) / 1e9 / span
        counted = run.counted
        health = client_health(ticks.lags_ms, cpu_share, lag_limit_ms=plan.lag_limit_ms,
                               cpu_wait_limit=plan.cpu_wait_limit, fd_failures=run.fd_failures)
        step = summarize(
            base, counted.records, counted.gaps, counted.duration_s,
            goodput_bounds=plan.slo.request_bounds() if plan.slo else None,
            client=health, server=server, status=run.status,
        )
        rhythm = rhythm_of([r.start_ns for r in counted.records], schedule=plan.schedule, workers=concurrency,
                           ttft_from=plan.ttft_from)
        step = replace(step, arrivals_delayed=run.arrivals_delayed, wall_s=end_perf - times.start,
                       window_extended_s=run.window_extended_s, rhythm=rhythm)
        if plan.slo is not None:
            results, met = plan.slo.judge(step)
            step = replace(step, slo=results, slo_met=met)
        previous = self.steps[-1] if self.steps else None
        step = replace(step, saturated=saturation(previous, step))
        if server is not None and server.prefix_cache_hit_rate is not None and server.prefix_cache_hit_rate > 0.5:
            self.prefix_cache_warning = (
                f"the server's prefix cache hit {server.prefix_cache_hit_rate * 100:.0f} % of prompt tokens in "
                f"step {index + 1}: prefill time is hidden (is --no-random-prefix set, or a long shared prompt?)"
            )
        if self.requests_out is not None:
            with contextlib.suppress(OSError, ValueError):
                self.requests_out.flush()
        self._emit_mark("load_step_end", {"step": index, "result": step.to_json()})
        return step

    def _on_request(self, index: int, level: float) -> Callable[[RequestRecord, Sample | None], None]:
        out = self.requests_out
        mode = self.plan.mode
        listeners = self._request_listeners
        sample_listeners = self._sample_listeners

        def handle(record: RequestRecord, sample: Sample | None) -> None:
            if out is not None:
                try:
                    out.write(jsonout.dumps(record.to_json(index, mode, level)) + "\n")
                except (OSError, ValueError) as exc:  # a full disk must not stop the test
                    log.warning("cannot write the requests file: %s", exc)
            for listener in tuple(listeners):
                try:
                    listener(index, record)
                except Exception:  # noqa: BLE001
                    log.exception("request listener failed; dropped")
                    listeners.remove(listener)
            if sample is not None:
                for sample_listener in tuple(sample_listeners):
                    try:
                        sample_listener(index, record.phase, sample)
                    except Exception:  # noqa: BLE001
                        log.exception("sample listener failed; dropped")
                        sample_listeners.remove(sample_listener)

        return handle

    # ---- publishing ----

    def _live(self, base: StepResult, run: StepRun) -> StepResult:
        counted = run.counted
        if not counted.recent:
            return base
        return summarize(base, counted.recent, list(counted.recent_gaps), counted.duration_s, status="running")

    async def _publish_loop(self) -> None:
        while True:
            await asyncio.sleep(PUBLISH_EVERY_S)
            run, base = self._run, self._base
            if run is not None and base is not None:
                self._publish(phase=_phase_name(run.phase), live=self._live(base, run))

    def _publish(self, *, phase: str, live: StepResult | None = None, message: str | None = None) -> None:
        run = self._run
        now = time.time()
        phase_ends = None
        level = None
        if run is not None:
            t = run.times
            if run.phase == "warmup":
                phase_ends = t.wall(t.window_start)
            elif run.phase == "measuring":
                phase_ends = t.wall(t.window_end)
            level = self._base.level if self._base is not None else None
        self._seq += 1
        state = replace(
            self._state,
            model=self.model,
            phase=phase,
            step_index=len(self.steps) if run is not None else self._state.step_index,
            level=level if level is not None else self._state.level,
            phase_started=now if phase != self._state.phase else self._state.phase_started,
            phase_ends=phase_ends,
            in_flight=run.in_flight if run is not None else 0,
            sent=run.sent if run is not None else 0,
            live=live,
            live_recent=len(run.counted.recent) if run is not None else 0,
            steps=tuple(self.steps),
            knee_index=knee(self.steps),
            capacity=self.capacity,
            message=self._state.message if message is None else message,
            seq=self._seq,
        )
        self._state = state
        for listener in tuple(self._changed):
            try:
                listener(state)
            except Exception:  # noqa: BLE001
                log.exception("load state listener failed; dropped")
                self._changed.remove(listener)

    def _finish(self, outcome: str, reason: str) -> None:
        self.outcome = outcome
        if outcome in ("target_down", "error"):
            self.error = reason
        plan = self.plan
        cap = capacity(plan.mode, self.steps, plan.slo is not None, reason)
        self.capacity = cap
        self.finished_at = time.time()
        message = reason if outcome != "done" else cap.sentence
        self._publish(phase={"done": "done", "stopped": "stopped"}.get(outcome, "failed"), live=None, message=message)
        self._emit_mark("load_end", {"outcome": outcome, "reason": reason, "capacity": cap.to_json()})

    def _emit_mark(self, kind: str, payload: dict) -> None:
        for listener in tuple(self._marks):
            try:
                listener(kind, payload, time.time())
            except Exception:  # noqa: BLE001 - a recorder's bug must not stop the test
                log.exception("load mark listener failed; dropped")
                self._marks.remove(listener)


def _phase_name(step_phase: str) -> str:
    return {"warmup": "warmup", "measuring": "measuring", "draining": "draining"}.get(step_phase, step_phase)


async def _result(task: asyncio.Future) -> Any:
    try:
        return await asyncio.wait_for(task, 15.0)
    except asyncio.CancelledError:
        raise
    except Exception:  # noqa: BLE001 - no server figures is not a failed step
        return None


