"""A load test's requests joined to the server's own spans, step by step (`lpxtop load --traces-listen`).

Each counted request (sent inside a step's measured window) is noted with the feed's join when it ends,
tagged with its step; the server's span of it comes seconds later (vLLM batches them), so a step's chain
fills in after the step: the load view shows it as it does, and the report is written after a bounded
wait for the last spans (LAST_SPANS_S). Per step:

- the chain of its counted requests (the same ChainSummary an endpoint's probes have), with
  `all_requests`: every span that started during the step (warm-up and drain included: the whole
  population the server ran), and
- the TTFT split (model/chain.py TtftSplit): the step's TTFT p50 and p95 into queue, prefill, the rest of
  the server's TTFT, and the time outside the server, from the requests around those quantiles.

The answer to "why did TTFT p95 grow at 20 concurrent": the queue. Bounded: at most MAX_REQUESTS joined
requests and MAX_SPANS population spans per run are kept (past the bounds they are left out: a step's
figures then cover the ones kept).
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import replace
from typing import Any

from lpxtop.model.chain import (
    SPLIT_QUANTILES,
    ChainSummary,
    JoinedRequest,
    PopulationSummary,
    SpanSegments,
    StepChain,
    UnjoinedRequest,
    ttft_split,
)
from lpxtop.model.load import LoadState, StepResult
from lpxtop.model.probe import Percentiles, Sample

KIND = "load"
MAX_REQUESTS = 200_000
MAX_SPANS = 200_000
LAST_SPANS_S = 15.0  # how long the report waits for the last steps' spans, at most (the join's wait, if shorter)
MAX_PENDING = 100_000  # requests awaiting their span: 1,000 a second against spans batched every 5 s, and more

_CHAIN = ("server_ttft_ms", "queue_ms", "prefill_ms", "decode_ms", "outside_ms", "to_server_ms")
_POPULATION = ("queue_ms", "prefill_ms", "decode_ms")


class LoadChain:
    """The per-step chains of one load test, fed by a ChainFeed (engine/traces/feed.py)."""

    def __init__(self, feed: Any, endpoint: str) -> None:
        self.feed = feed
        self.endpoint = endpoint
        self._lock = threading.Lock()
        self._joined: dict[int, list[JoinedRequest]] = {}
        self._unjoined: dict[int, Counter[str]] = {}
        self._spans: dict[int, list[SpanSegments]] = {}  # per step: the spans that started during it
        self._spans_kept = 0
        self._intervals: list[list] = []  # [step, start ns, end ns or None], wall clock
        self._memo: dict[int, tuple[tuple, StepChain]] = {}
        self._kept = 0
        self._noted: Counter[int] = Counter()  # per step
        self._dropped: Counter[int] = Counter()  # per step: joined past MAX_REQUESTS
        self.noted = 0

    def attach(self, controller: Any) -> None:
        """Note the controller's requests, take the join's outcomes, and give every reader of the controller's
        state the steps' chains (before either starts)."""
        controller.add_sample_listener(self.on_sample)
        controller.add_mark_listener(self.on_mark)
        controller.add_state_hook(self.decorate)
        self.feed.join.add_listener(self.on_settled)
        self.feed.join.add_population_listener(self.on_span)

    def on_mark(self, kind: str, payload: dict, wall_time: float) -> None:
        """Each step's start and end on the wall clock: the spans that start between are its population."""
        step = payload.get("step")
        if not isinstance(step, int):
            return
        with self._lock:
            if kind == "load_step_start":
                self._intervals.append([step, int(wall_time * 1e9), None])
            elif kind == "load_step_end":
                for interval in self._intervals:
                    if interval[0] == step:
                        interval[2] = int(wall_time * 1e9)

    # ---- the load loop's side (microseconds) ----

    def on_sample(self, step_index: int, phase: str, sample: Sample) -> None:
        if phase == "measured" and self.feed.note_sample(sample, self.endpoint, kind=KIND, tag=str(step_index)):
            self.noted += 1
            self._noted[step_index] += 1

    # ---- the join's side ----

    def on_settled(self, outcome: JoinedRequest | UnjoinedRequest) -> None:
        if outcome.kind != KIND or outcome.tag is None or not outcome.tag.isdigit():
            return
        step = int(outcome.tag)
        with self._lock:
            if isinstance(outcome, JoinedRequest):
                if self._kept >= MAX_REQUESTS:
                    self._dropped[step] += 1
                    return
                self._kept += 1
                self._joined.setdefault(step, []).append(outcome)
            else:
                self._unjoined.setdefault(step, Counter())[outcome.reason] += 1

    def on_span(self, segments: SpanSegments) -> None:
        start = segments.start_wall_ns
        if start is None:
            return
        with self._lock:
            for step, begins, ends in reversed(self._intervals):
                if start >= begins and (ends is None or start <= ends):
                    if self._spans_kept < MAX_SPANS:
                        self._spans.setdefault(step, []).append(segments)
                        self._spans_kept += 1
                    return

    # ---- readers ----

    def step_chain(self, step: StepResult) -> StepChain:
        """The step's chain as it stands (spans still coming fill it in)."""
        with self._lock:
            joined = list(self._joined.get(step.index, ()))
            unjoined = Counter(self._unjoined.get(step.index, Counter()))
            pending = max(0, self._noted[step.index] - len(joined) - self._dropped[step.index] - sum(unjoined.values()))
            spans = list(self._spans.get(step.index, ()))
        key = (len(joined), sum(unjoined.values()), len(spans), pending, step.status)
        memo = self._memo.get(step.index)
        if memo is not None and memo[0] == key:
            return memo[1]

        def column(records: list, name: str) -> Percentiles | None:
            return Percentiles.of([v for r in records if (v := getattr(r, name)) is not None])

        summary = ChainSummary(
            probes_joined=len(joined), probes_unjoined=sum(unjoined.values()),
            probes_pending=pending,
            unjoined_reasons=dict(unjoined),
            **{name: column(joined, name) for name in _CHAIN},
            all_requests=PopulationSummary(count=len(spans), **{name: column(spans, name) for name in _POPULATION}),
        )
        chain = StepChain(summary, tuple(s for q in SPLIT_QUANTILES if (s := ttft_split(joined, q)) is not None))
        self._memo[step.index] = (key, chain)
        return chain

    def decorate(self, state: LoadState) -> LoadState:
        """The state with each step's chain (the finished steps, and the running one's so far)."""
        steps = tuple(replace(s, chain=self.step_chain(s)) for s in state.steps)
        live = state.live
        if live is not None and not state.finished:
            live = replace(live, chain=self.step_chain(live))
        return replace(state, steps=steps, live=live)

    def finish(self, seconds: float = LAST_SPANS_S) -> None:
        """After the test: wait (bounded) for the last requests' spans, then give up on the rest."""
        self.feed.wait_for_spans(min(seconds, self.feed.join.wait_s))
        self.feed.join.give_up_pending("deadline")


def attach_chain(engine: Any, controller: Any, args: Any) -> LoadChain | None:
    """With --traces-listen: the receiver beside the load's engine and the per-step chains on the controller,
    attached before anything starts; None without. ConfigError (exit 2) as start_traces says."""
    from lpxtop.engine.traces import start_traces

    target = controller.plan.endpoint
    feed = start_traces(engine, args, None, endpoints=[target], max_pending=MAX_PENDING)
    if feed is None:
        return None
    chain = LoadChain(feed, target.name)
    chain.attach(controller)
    return chain


def finish_chain(chain: LoadChain | None, *, quiet: bool = False) -> None:
    """After the test, before the report: the last steps' spans (bounded wait), then the receiver stops."""
    if chain is None:
        return
    import sys

    from lpxtop.engine.traces import stop_traces

    if chain.feed.join.pending() and not quiet:
        print(f"lpxtop load: waiting up to {min(LAST_SPANS_S, chain.feed.join.wait_s):.0f} s for the last requests' "
              "server spans", file=sys.stderr, flush=True)
    chain.finish()
    stop_traces(chain.feed, prog="lpxtop load", quiet=quiet)
