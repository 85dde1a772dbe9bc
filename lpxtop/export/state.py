"""What the exporter accumulates between scrapes: per-endpoint histograms and counters, and labels.

The engine calls `ExportState.listener` on its loop for every event; it appends a probe's
`SampleEvent` (or an agent step's `AgentStepEvent`, a probe's `ChainEvent` once joined to its server span) to a bounded deque and returns (a few hundred nanoseconds: no work on the probe loop).
The deque is folded into the histograms when Prometheus scrapes, or by the HTTP server's idle tick
when it fills up, always on the exporter's threads.

Histograms are prometheus_client's own `Histogram` objects (one per endpoint and measure, not
registered anywhere): the library places observations in buckets and keeps the sums. The collector
re-labels them with the endpoint's current labels, so each endpoint has one series per family at a
time, whatever its model or server kind turn out to be.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import Histogram

from lpxtop.export.settings import DEFAULT_BUCKETS
from lpxtop.model.agent import BEHAVIOUR_KINDS, AgentStep, AgentStepEvent
from lpxtop.model.chain import ChainEvent, JoinedRequest
from lpxtop.model.events import SampleEvent
from lpxtop.model.probe import ERROR_KINDS, Sample
from lpxtop.model.snapshot import EndpointView

if TYPE_CHECKING:
    from lpxtop.model.events import EngineEvent

MEASURES = ("ttft", "itl", "tpot", "e2e")
DEFAULT_CHAIN_BUCKETS = DEFAULT_BUCKETS["chain"]
# The agent step's histograms: (bucket key, family name, the AgentStep field in ms)
AGENT_MEASURES = (("agent_step", "lpxtop_agent_step_seconds", "step_ms"),
                  ("agent_tool_call", "lpxtop_agent_time_to_tool_call_seconds", "time_to_tool_call_ms"))
# A probe's segments from its own server span (--traces-listen): (key, family name, JoinedRequest field in ms)
CHAIN_MEASURES = (("chain_queue", "lpxtop_chain_queue_seconds", "queue_ms"),
                  ("chain_prefill", "lpxtop_chain_prefill_seconds", "prefill_ms"),
                  ("chain_outside", "lpxtop_chain_outside_seconds", "outside_ms"))
# How an agent step can fail: the chat probe's transport classes, then the model's misbehaviour
AGENT_ERROR_KINDS = (*ERROR_KINDS, *(k for k in BEHAVIOUR_KINDS if k not in ERROR_KINDS))
MAX_PENDING = 4096  # samples waiting for a scrape; the idle tick folds them in long before this
DRAIN_AT = 256  # the idle tick folds the queue in once it holds this many
MAX_ENDPOINTS = 512  # a bound on the label sets: discovery cannot grow them without end
MAX_LABEL_CHARS = 200
# An endpoint's series appear once its labels are settled (a probe finished, so the model was asked
# for; the server's metrics were scraped once, so its kind is known), or this long after it appeared.
# Otherwise the first scrapes would publish `model=""` / `server_kind="unknown"` series that change
# seconds later, and Prometheus would see each counter as two series.
SETTLE_S = 10.0


def label_value(text: str | None) -> str:
    """A label value of bounded length (model ids and names come from outside)."""
    if not text:
        return ""
    return text if len(text) <= MAX_LABEL_CHARS else text[: MAX_LABEL_CHARS - 1] + "…"


@dataclass
class EndpointLabels:
    """An endpoint's labels. Sticky: once the model or the server kind is known, an outage (the
    /metrics scrape failing, /v1/models not answering) does not turn them back into "" or "unknown"."""

    endpoint: str
    model: str = ""
    server_kind: str = "unknown"
    url: str = ""
    first_seen: float = field(default_factory=time.monotonic)
    ready: bool = False

    def learn(self, view: EndpointView) -> None:
        if not self.ready:
            probed = view.probes_sent > 0 or (view.agent is not None and view.agent.steps_sent > 0)
            settled = probed and view.server is not None
            self.ready = settled or time.monotonic() - self.first_seen >= SETTLE_S
        if view.model:
            self.model = label_value(view.model)
        if view.server_kind and view.server_kind != "unknown":
            self.server_kind = view.server_kind
        self.url = label_value(view.config.url)

    def values(self, host: str) -> tuple[str, str, str, str]:
        """In the order of `ENDPOINT_LABELS`."""
        return host, self.endpoint, self.model, self.server_kind


ENDPOINT_LABELS = ("host", "endpoint", "model", "server_kind")


class EndpointSeries:
    """One endpoint's histograms and counters since the exporter started (they never reset)."""

    def __init__(self, buckets: Mapping[str, tuple[float, ...]]) -> None:
        self.histograms = {
            m: Histogram(f"lpxtop_probe_{m}_seconds", m, buckets=buckets[m], registry=None) for m in MEASURES
        }
        self.buckets = buckets
        self.probes = 0
        self.client_limited = 0
        self.errors = dict.fromkeys(ERROR_KINDS, 0)
        self.output_tokens = 0
        self.last_success: float | None = None
        self.agent: AgentSeries | None = None  # made at the endpoint's first agent step
        self.chain: ChainSeries | None = None  # made at the endpoint's first probe joined to its server span

    def add_chain(self, joined: JoinedRequest) -> None:
        if self.chain is None:
            self.chain = ChainSeries(self.buckets)
        self.chain.add(joined)

    def add_step(self, step: AgentStep) -> None:
        if self.agent is None:
            self.agent = AgentSeries(self.buckets)
        self.agent.add(step)

    def add(self, sample: Sample) -> None:
        self.probes += 1
        if sample.client_limited:
            self.client_limited += 1
        self.last_success = 1.0 if sample.ok else 0.0
        if not sample.ok:
            kind = sample.error_kind if sample.error_kind in self.errors else "other"
            self.errors[kind] += 1
            return
        # the same samples and values the engine's window summarizes (successful probes only)
        h = self.histograms
        if sample.ttft_ms is not None:
            h["ttft"].observe(sample.ttft_ms / 1000.0)
        if sample.e2e_ms is not None:
            h["e2e"].observe(sample.e2e_ms / 1000.0)
        if sample.tpot_ms is not None:
            h["tpot"].observe(sample.tpot_ms / 1000.0)
        itl = h["itl"]
        for gap in sample.itl_ms:
            itl.observe(gap / 1000.0)
        if sample.output_tokens:
            self.output_tokens += sample.output_tokens


class AgentSeries:
    """One endpoint's agent-step histograms and counters since the exporter started (they never reset).

    A step's times are observed wherever they were measured, as the engine's agent window takes them: a
    step whose model sent bad arguments still ran the tool and call 2, so its step time counts."""

    def __init__(self, buckets: Mapping[str, tuple[float, ...]]) -> None:
        self.histograms = {
            key: Histogram(name, key, buckets=buckets[key], registry=None) for key, name, _ in AGENT_MEASURES
        }
        self.steps = 0
        self.errors = dict.fromkeys(AGENT_ERROR_KINDS, 0)

    def add(self, step: AgentStep) -> None:
        self.steps += 1
        if step.error_kind is not None:
            self.errors[step.error_kind if step.error_kind in self.errors else "other"] += 1
        for key, _, attr in AGENT_MEASURES:
            ms = getattr(step, attr)
            if ms is not None and 0 <= ms < float("inf"):
                self.histograms[key].observe(ms / 1000.0)


class ChainSeries:
    """One endpoint's probes joined to their server spans: a histogram per segment (they never reset)."""

    def __init__(self, buckets: Mapping[str, tuple[float, ...]]) -> None:
        edges = buckets.get("chain") or DEFAULT_CHAIN_BUCKETS
        self.histograms = {key: Histogram(name, key, buckets=edges, registry=None) for key, name, _ in CHAIN_MEASURES}
        self.joined = 0

    def add(self, joined: JoinedRequest) -> None:
        self.joined += 1
        for key, _, attr in CHAIN_MEASURES:
            ms = getattr(joined, attr)
            if ms is not None and -3_600_000.0 < ms < 3_600_000.0:
                self.histograms[key].observe(ms / 1000.0)


class ExportState:
    """The listener's queue, and every endpoint's series and labels. Thread-safe."""

    def __init__(self, buckets: Mapping[str, tuple[float, ...]]) -> None:
        self.buckets = buckets
        self._pending: deque[SampleEvent | AgentStepEvent | ChainEvent] = deque(maxlen=MAX_PENDING)
        self._received = 0  # written by the engine's thread only
        self._folded = 0  # taken off the queue by drain()
        self._queue_lost = 0  # discarded by the full queue
        self._unlabelled = 0  # samples of endpoints past MAX_ENDPOINTS
        self._series: dict[str, EndpointSeries] = {}
        self._labels: dict[str, EndpointLabels] = {}
        # (kind, severity) of every alert seen since start: reported as 0 once over, so a series does not
        # vanish between two alerts, and the label sets only grow up to the bounded set of alert kinds
        self.alert_keys: set[tuple[str, str]] = set()
        self.lock = threading.Lock()

    def listener(self, event: EngineEvent) -> None:
        """For `Engine.add_listener`: runs on the engine's loop, so it only appends."""
        kind = type(event)
        # a ChainEvent: a probe joined to its server span (--traces-listen); not the agent's calls, nor the unjoined
        chained = kind is ChainEvent and event.joined is not None and event.joined.kind == "probe"  # type: ignore[union-attr]
        if kind is SampleEvent or kind is AgentStepEvent or chained:
            self._pending.append(event)  # type: ignore[arg-type]
            self._received += 1

    @property
    def pending(self) -> int:
        return len(self._pending)

    def drain(self) -> None:
        """Fold the queued samples into the histograms (caller holds `lock`)."""
        pending = self._pending
        while pending:
            try:
                event = pending.popleft()
            except IndexError:  # pragma: no cover - emptied by another drain
                break
            self._folded += 1
            series = self._series_for(event.endpoint)
            if series is None:
                self._unlabelled += 1
                continue
            kind = type(event)
            if kind is AgentStepEvent:
                series.add_step(event.step)  # type: ignore[union-attr]
            elif kind is ChainEvent:
                series.add_chain(event.joined)  # type: ignore[union-attr, arg-type]
            else:
                series.add(event.sample)  # type: ignore[union-attr]
        # what the full deque discarded: received, but neither taken off it nor still on it
        self._queue_lost = max(self._queue_lost, self._received - self._folded - len(pending))

    @property
    def dropped(self) -> int:
        """Samples that reached no histogram (a full queue, or too many endpoints)."""
        return self._queue_lost + self._unlabelled

    def _series_for(self, name: str) -> EndpointSeries | None:
        series = self._series.get(name)
        if series is None:
            if len(self._series) >= MAX_ENDPOINTS:
                return None
            series = self._series[name] = EndpointSeries(self.buckets)
            self._labels.setdefault(name, EndpointLabels(label_value(name)))
        return series

    def learn(self, views: Iterable[EndpointView]) -> None:
        """Take each endpoint's model and server kind from the snapshot (caller holds `lock`)."""
        for view in views:
            labels = self._labels.get(view.name)
            if labels is None:
                if len(self._labels) >= MAX_ENDPOINTS:
                    continue
                labels = self._labels[view.name] = EndpointLabels(label_value(view.name))
            labels.learn(view)

    def labels(self, name: str) -> EndpointLabels | None:
        return self._labels.get(name)

    def endpoints(self) -> list[tuple[EndpointLabels, EndpointSeries | None]]:
        """Every endpoint whose labels are settled, in a stable order, with its series (None before its
        first probe)."""
        return [(labels, self._series.get(name)) for name, labels in sorted(self._labels.items()) if labels.ready]
