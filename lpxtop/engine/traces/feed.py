"""`ChainFeed`: the latency chain beside an engine (what `--traces-listen` turns on).

It owns a TraceJoin and the receiver that feeds it spans (TraceReceiverProcess: its own process), and
hooks into the engine three ways, each costing the probe loop microseconds:

- an engine listener: each finished probe (`SampleEvent`) is noted with its trace id, send time and
  client TTFT; each agent step's calls (`AgentStepEvent`: one trace, a span id per call) are noted
  together, so each call gets the server span whose parent is its own span. A probe during which lpxtop
  itself was late (`client_limited`) is joined for the server's figures, but gives no "outside" or "to
  server": its TTFT holds lpxtop's own delay, which is neither the server's nor the network's (unless the
  engine counts such probes, `--include-client-limited`: then the chain does too, as the percentiles);
- a snapshot hook: each endpoint's view gets its `chain` (ChainSummary over the window) and its agent
  view the span breakdown (views.py); the Gap then comes from the joined probes, exactly;
- `engine.post_event(ChainEvent)` for every request as it settles, joined or not (spans come late: vLLM
  batches them), so the recorder keeps the joined segments and the exporter observes them.

`start()` launches the receiver (in the background with `wait=False`, so a dashboard's first frame does
not wait for a process to spawn); a receiver that cannot start (port taken) is a status (`error`), an
alert and `traces.error` in JSON, never a crash. `wait_for_spans(seconds)` is what `once` does before
its report.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from lpxtop.engine.traces.context import same_host
from lpxtop.engine.traces.join import RequestNote, TraceJoin
from lpxtop.engine.traces.limits import DEFAULT_WAIT_S, ReceiverSettings
from lpxtop.engine.traces.views import with_chain
from lpxtop.model.agent import AgentStep, AgentStepEvent
from lpxtop.model.alerts import Alert
from lpxtop.model.chain import ChainEvent, JoinedRequest, ReceiverStats, UnjoinedRequest
from lpxtop.model.events import SampleEvent
from lpxtop.model.probe import Sample
from lpxtop.model.snapshot import Snapshot

log = logging.getLogger("lpxtop.traces")

WAIT_POLL_S = 0.1


class ChainFeed:
    """The join, its receiver, and the engine hooks. `attach(engine)` before the engine starts, then
    `start()`; `stop()` ends the receiver."""

    def __init__(self, settings: ReceiverSettings, *, wait_s: float = DEFAULT_WAIT_S, window_s: float | None = None,
                 max_samples: int | None = None, max_pending: int | None = None,
                 receiver_factory: Callable[..., Any] | None = None) -> None:
        kw: dict[str, Any] = {"wait_s": wait_s, "max_pending": max_pending}
        if window_s is not None:
            kw["window_s"] = window_s
        if max_samples is not None:
            kw["max_samples"] = max_samples
        self.settings = settings
        self.join = TraceJoin(**kw)
        self.join.same_host_of = self._same_host_of
        if receiver_factory is None:
            from lpxtop.engine.traces.process import TraceReceiverProcess

            receiver_factory = TraceReceiverProcess
        self.receiver = receiver_factory(self.join, settings)
        self.error: str | None = None
        self.started = threading.Event()  # set once the receiver listens or failed to
        self.noted = 0
        self.client_limited = 0  # noted requests during which lpxtop was late (no outside figure from them)
        self.include_client_limited = False  # the engine's --include-client-limited: take their outside too
        self._hosts: dict[str, bool] = {}
        self._engine: Any = None
        self._starter: threading.Thread | None = None
        self._stopped = False

    # ---- wiring ----

    def attach(self, engine: Any, endpoints: Iterable[Any] = ()) -> None:
        """Listen to `engine` (before it starts) and hand it the chain: snapshots, events, alerts. `endpoints`:
        the configs known now (whether each is this host); discovered ones are learnt from the snapshots."""
        self._engine = engine
        self.include_client_limited = bool(getattr(getattr(engine, "settings", None), "include_client_limited", False))
        engine.add_listener(self.on_event)
        engine.add_snapshot_hook(self.decorate)
        engine.add_alert_source(self.alerts)
        self.join.add_listener(self._settled)
        for config in endpoints:
            self.learn_endpoint(config.name, config.url)

    def start(self, *, wait: bool = True) -> None:
        """Start the receiver; with `wait=False` in a background thread (the failure, if any, lands in `error`)."""
        if wait:
            self._start_receiver()
            return
        self._starter = threading.Thread(target=self._start_receiver, name="lpxtop-traces-start", daemon=True)
        self._starter.start()

    def _start_receiver(self) -> None:
        try:
            host, port = self.receiver.start()
            log.info("receiving spans on %s:%d", host, port)
        except Exception as exc:  # noqa: BLE001 - OSError (port taken), OtelUnavailable, a spawn that timed out
            where = f"{self.settings.host}:{self.settings.port}"
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            self.error = f"the trace receiver cannot listen on {where}: {reason}"
            log.warning("%s", self.error)
        finally:
            self.started.set()
            if self._stopped:  # stopped while it started
                self._stop_receiver()

    def stop(self) -> None:
        self._stopped = True
        starter = self._starter
        if starter is not None and starter.is_alive():
            return  # it stops the receiver itself once started
        self._stop_receiver()

    def _stop_receiver(self) -> None:
        try:
            self.receiver.stop()
        except Exception:  # noqa: BLE001 - stopping must not raise over the command's own result
            log.exception("stopping the trace receiver failed")

    @property
    def running(self) -> bool:
        return self.error is None

    def learn_endpoint(self, name: str, url: str) -> None:
        if name not in self._hosts:
            self._hosts[name] = same_host(url)

    def _same_host_of(self, endpoint: str) -> bool:
        return self._hosts.get(endpoint, False)

    # ---- the engine's listener: on its loop, microseconds ----

    def on_event(self, event: Any) -> None:
        kind = type(event)
        if kind is SampleEvent:
            self.note_sample(event.sample, event.endpoint)
        elif kind is AgentStepEvent:
            self.note_step(event.step, event.endpoint)

    def note_sample(self, sample: Sample, endpoint: str, *, kind: str = "probe", tag: str | None = None) -> bool:
        """Note one finished request (a probe; a load request with kind "load"); False when it is not noted."""
        if not sample.ok or sample.trace_id is None or sample.sent_wall_ns is None:
            return False
        self.join.note_requests([RequestNote(
            sample.trace_id, endpoint, sample.sent_wall_ns, sample.ttft_ms, sample.e2e_ms, kind=kind, tag=tag,
            span_id=sample.span_id, client_limited=sample.client_limited and not self.include_client_limited)])
        self.client_limited += sample.client_limited
        self.noted += 1
        return True

    def note_step(self, step: AgentStep, endpoint: str) -> None:
        """Note an agent step's calls (an OpenAI-style step: call 1 and call 2, one trace) together."""
        if step.api != "chat" or not step.calls:
            return
        figures = ((step.call1_ttft_ms, step.call1_e2e_ms), (step.answer_ttft_ms, step.answer_e2e_ms))
        notes = []
        for n, (call, (ttft, e2e)) in enumerate(zip(step.calls, figures), start=1):
            if step.failed_call == n or ttft is None:
                continue
            notes.append(RequestNote(call.trace_id, endpoint, call.sent_wall_ns, ttft, e2e, kind="agent",
                                     tag=f"call{n}", span_id=call.span_id,
                                     client_limited=step.client_limited and not self.include_client_limited))
        if notes:
            self.join.note_requests(notes)
            self.noted += len(notes)

    def _settled(self, outcome: JoinedRequest | UnjoinedRequest) -> None:
        engine = self._engine
        if engine is None:
            return
        if isinstance(outcome, JoinedRequest):
            event = ChainEvent(time.time(), outcome.endpoint, joined=outcome)
        else:
            event = ChainEvent(time.time(), outcome.endpoint, unjoined=outcome)
        engine.post_event(event)

    # ---- the snapshot hook ----

    def decorate(self, snapshot: Snapshot) -> Snapshot:
        """Each endpoint with its chain (None for all while the receiver is down: there is none)."""
        if self.error is not None or not snapshot.endpoints:
            return snapshot
        views = []
        for view in snapshot.endpoints:
            self.learn_endpoint(view.name, view.config.url)
            views.append(with_chain(view, self.join))
        return replace(snapshot, endpoints=tuple(views))

    def alerts(self) -> tuple[Alert, ...]:
        if self.error is not None:
            return (Alert("warning", "traces", f"{self.error}: no server spans are joined (--traces-listen)"),)
        dropped = self.stats().dropped_total
        if dropped:
            return (Alert("info", "traces", f"the trace receiver dropped {dropped} spans (rate, size or unreadable "
                                            "bodies): some requests may stay unjoined"),)
        return ()

    # ---- readers ----

    def stats(self) -> ReceiverStats:
        stats = self.receiver.stats()
        if self.error is not None:
            return replace(stats, listening=None, error=self.error)
        return stats

    def status(self) -> dict:
        """`once --json`'s "traces": the receiver's counts, and the requests noted and settled."""
        data = self.stats().to_json()
        counts = self.join.counts
        data.update({"requests_noted": self.noted, "requests_joined": counts["joined"],
                     "requests_unjoined": counts["unjoined"], "requests_pending": self.join.pending(),
                     "client_limited": self.client_limited, "late_spans": counts["late_spans"]})
        return data

    def wait_for_spans(self, seconds: float) -> int:
        """Wait (at most `seconds`) until no noted request awaits its span; returns how many still do."""
        deadline = time.monotonic() + max(0.0, seconds)
        self.started.wait(max(0.0, seconds))
        while self.error is None and self.join.pending() and time.monotonic() < deadline:
            time.sleep(min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))
        return self.join.pending()

    def summary(self) -> str:
        """One line for stderr when a command ends."""
        if self.error is not None:
            return self.error
        c = self.join.counts
        stats = self.stats()
        return (f"traces: {c['joined']} of {self.noted} requests joined to their server spans "
                f"({c['unjoined']} unjoined); {stats.spans_received} spans received on {stats.listening}")
