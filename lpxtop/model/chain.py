"""Where one request's milliseconds went: the server's own span joined to lpxtop's record of the request.

A request lpxtop sent carries a W3C `traceparent`; the server's span for it (vLLM's `llm_request`) comes
back to lpxtop's OTLP receiver with the same trace id. Joined, they give the request's segments:

- ``to_server_ms``   span start − lpxtop's send time, only when both clocks are this host's
- ``queue_ms``       waiting for a slot in the batch (the server's own figure)
- ``prefill_ms``     scheduled → first token (the server's own figure)
- ``decode_ms``      first token → last token (the server's own figure)
- ``server_ttft_ms`` the server's arrival → first token
- ``outside_ms``     lpxtop's TTFT − the server's TTFT for that very request: network, HTTP server,
  tokenization, detokenization, streaming. Exact by construction: server TTFT + outside = client TTFT.

`ChainSummary` is a window of them for one endpoint, in the JSON shape of `once` and the load report.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lpxtop.model.probe import Percentiles

# The segments a server span may carry, in the order of a request's life.
SERVER_SEGMENTS = ("queue_ms", "prefill_ms", "decode_ms", "server_ttft_ms", "server_e2e_ms")
# Why a request lpxtop sent has no joined segments (ChainSummary.unjoined_reasons' keys).
UNJOINED_REASONS = (
    "no_span",  # nothing with its trace id came within the wait
    "span_without_latency_attributes",  # spans came, none with a segment lpxtop reads
    "receiver_dropped",  # the receiver dropped spans (rate, size, garbage) while this one was awaited
    "store_full",  # pushed out of the bounded store by newer requests before its span came
    "span_parent_unknown",  # spans came for its trace (shared by an agent step's calls), none under its own span
    "deadline",  # `once` ended (--deadline) before its span came
)


@dataclass(frozen=True)
class SpanSegments:
    """What one server's span (or the spans of one trace) said about one request; ms, None: not said.

    `start_wall_ns` is the span's start (the server's arrival time, its own clock); `server` names the
    reader that understood it ("vllm", "sglang", "tgi"); `source` says which server sent it (a short key
    of the span's resource attributes, for the population windows).
    """

    trace_id: str
    server: str
    source: str
    start_wall_ns: int | None = None
    queue_ms: float | None = None
    prefill_ms: float | None = None
    decode_ms: float | None = None
    server_ttft_ms: float | None = None
    server_e2e_ms: float | None = None
    complete: bool = True  # False: more spans of this trace may still add segments (SGLang's slices)
    span_id: str | None = None  # the span's own id (hex), and its parent's: a request lpxtop sent is the
    parent_span_id: str | None = None  # parent of its server span, so calls sharing one trace are told apart

    @property
    def has_latency(self) -> bool:
        return any(getattr(self, name) is not None for name in SERVER_SEGMENTS)


@dataclass(frozen=True)
class JoinedRequest:
    """One request lpxtop sent, with its server's segments (ms; None where not known)."""

    trace_id: str
    endpoint: str
    kind: str  # "probe", "agent", "load", ... as the sender noted it
    sent_wall_ns: int
    client_ttft_ms: float | None
    client_e2e_ms: float | None
    server: str
    to_server_ms: float | None = None
    queue_ms: float | None = None
    prefill_ms: float | None = None
    decode_ms: float | None = None
    server_ttft_ms: float | None = None
    server_e2e_ms: float | None = None
    outside_ms: float | None = None
    tag: str | None = None  # the sender's own label (a load step, an agent call), passed through
    span_id: str | None = None  # lpxtop's span of the request (its traceparent's), None when not noted
    client_limited: bool = False  # lpxtop was late while it ran: no outside or to-server from it (its TTFT holds the delay)

    @property
    def wall_time(self) -> float:
        return self.sent_wall_ns / 1e9

    @property
    def server_other_ms(self) -> float | None:
        """The server's TTFT outside its queue and prefill: its front end, tokenization, the hop to the engine.
        Not clamped at 0: the server takes its TTFT and its queue/prefill on two clocks (vLLM: the front end's
        and the engine core's), and a small negative value says so, where a clamp would break the sum."""
        if self.server_ttft_ms is None or self.queue_ms is None or self.prefill_ms is None:
            return None
        return self.server_ttft_ms - self.queue_ms - self.prefill_ms

    def to_json(self) -> dict:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 3)

        return {
            "trace_id": self.trace_id, "endpoint": self.endpoint, "kind": self.kind, "server": self.server,
            "client_ttft_ms": r(self.client_ttft_ms), "client_e2e_ms": r(self.client_e2e_ms),
            "to_server_ms": r(self.to_server_ms), "queue_ms": r(self.queue_ms), "prefill_ms": r(self.prefill_ms),
            "decode_ms": r(self.decode_ms), "server_ttft_ms": r(self.server_ttft_ms),
            "server_e2e_ms": r(self.server_e2e_ms), "outside_ms": r(self.outside_ms),
        }


@dataclass(frozen=True)
class UnjoinedRequest:
    """One request lpxtop sent whose wait for its server span ended without one, and why (UNJOINED_REASONS)."""

    trace_id: str
    endpoint: str
    kind: str
    sent_wall_ns: int
    reason: str
    tag: str | None = None
    span_id: str | None = None

    @property
    def wall_time(self) -> float:
        return self.sent_wall_ns / 1e9


@dataclass(frozen=True)
class ChainEvent:
    """A request's chain settled (an engine event, lpxtop/model/events.py): joined to its server span
    (`joined`), or given up on (`unjoined`). `wall_time` is when lpxtop learned it. The recorder keeps
    them, so a replay shows the Chain tab and the exact Gap as they were."""

    wall_time: float
    endpoint: str
    joined: JoinedRequest | None = None
    unjoined: UnjoinedRequest | None = None

    @property
    def kind(self) -> str:
        settled = self.joined or self.unjoined
        return settled.kind if settled is not None else "probe"


@dataclass(frozen=True)
class PopulationSummary:
    """The server's whole population over the window: every request its spans described (load, users, probes)."""

    count: int = 0
    queue_ms: Percentiles | None = None
    prefill_ms: Percentiles | None = None
    decode_ms: Percentiles | None = None

    def to_json(self) -> dict:
        return {"count": self.count, "queue_ms": _p(self.queue_ms), "prefill_ms": _p(self.prefill_ms),
                "decode_ms": _p(self.decode_ms)}


@dataclass(frozen=True)
class ChainSummary:
    """One endpoint's latency chain over the window: percentiles of its joined requests' segments.

    `to_server_ms` is None unless the endpoint is on this host (the two clocks are then the same).
    `recent` holds the last joined requests (newest last) for a per-request view; not in `to_json`.
    """

    probes_joined: int = 0
    probes_unjoined: int = 0
    probes_pending: int = 0  # sent, their span not in yet (still within the wait)
    unjoined_reasons: dict[str, int] = field(default_factory=dict)
    server_ttft_ms: Percentiles | None = None
    queue_ms: Percentiles | None = None
    prefill_ms: Percentiles | None = None
    decode_ms: Percentiles | None = None
    outside_ms: Percentiles | None = None
    to_server_ms: Percentiles | None = None
    all_requests: PopulationSummary = field(default_factory=PopulationSummary)
    recent: tuple[JoinedRequest, ...] = ()
    source: str = "otlp"

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "probes_joined": self.probes_joined,
            "probes_unjoined": self.probes_unjoined,
            "probes_pending": self.probes_pending,
            "unjoined_reasons": dict(sorted(self.unjoined_reasons.items())),
            "server_ttft_ms": _p(self.server_ttft_ms),
            "queue_ms": _p(self.queue_ms),
            "prefill_ms": _p(self.prefill_ms),
            "decode_ms": _p(self.decode_ms),
            "outside_ms": _p(self.outside_ms),
            "to_server_ms": _p(self.to_server_ms),
            "all_requests": self.all_requests.to_json(),
        }


@dataclass(frozen=True)
class ReceiverStats:
    """The OTLP receiver's own counts since it started (what came, what was kept, what was dropped and why)."""

    listening: str | None = None  # "127.0.0.1:4318", None: not listening
    requests: int = 0
    spans_received: int = 0
    spans_read: int = 0  # spans a reader understood (they carry segments)
    spans_unrecognized: int = 0  # spans no reader knows (other names, loading spans): counted, not guessed at
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> spans (or requests, for whole bodies)
    forwarded: int = 0
    forward_dropped: dict[str, int] = field(default_factory=dict)
    error: str | None = None  # why it is not listening (port taken, opentelemetry-proto missing)

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    def to_json(self) -> dict:
        return {
            "listening": self.listening, "requests": self.requests, "spans_received": self.spans_received,
            "spans_read": self.spans_read, "spans_unrecognized": self.spans_unrecognized,
            "dropped": dict(sorted(self.dropped.items())), "forwarded": self.forwarded,
            "forward_dropped": dict(sorted(self.forward_dropped.items())), "error": self.error,
        }


def _p(p: Percentiles | None) -> dict | None:
    return None if p is None else p.to_json()


SPLIT_QUANTILES = (50, 95)
SPLIT_PARTS = ("queue_ms", "prefill_ms", "server_other_ms", "outside_ms")


@dataclass(frozen=True)
class TtftSplit:
    """A load step's TTFT at a quantile, split by its requests' own server spans.

    The requests whose client TTFT lies around the quantile (the nearest ranks: 5 % of the step's joined
    requests, at least one) and the mean of each part over them: the server's queue, its prefill, the rest
    of its TTFT (its front end, tokenization, the hop to the engine: `server_other_ms`), and the time
    outside the server. The parts add up to `ttft_ms`, those requests' mean client TTFT, exactly.
    """

    quantile: int
    ttft_ms: float
    queue_ms: float
    prefill_ms: float
    server_other_ms: float
    outside_ms: float
    requests: int

    def to_json(self) -> dict:
        return {"ttft_ms": round(self.ttft_ms, 3), "queue_ms": round(self.queue_ms, 3),
                "prefill_ms": round(self.prefill_ms, 3), "server_other_ms": round(self.server_other_ms, 3),
                "outside_ms": round(self.outside_ms, 3), "requests": self.requests}


@dataclass(frozen=True)
class StepChain:
    """A load step's requests joined to their server spans: the chain (as an endpoint's, over the step's
    counted requests; `all_requests`: every span that started during the step) and the TTFT split."""

    summary: ChainSummary
    split: tuple[TtftSplit, ...] = ()

    def split_at(self, quantile: int) -> TtftSplit | None:
        return next((s for s in self.split if s.quantile == quantile), None)

    def split_json(self) -> dict:
        return {f"p{q}": (s.to_json() if (s := self.split_at(q)) is not None else None) for q in SPLIT_QUANTILES}


def ttft_split(requests: list[JoinedRequest], quantile: int) -> TtftSplit | None:
    """The split of the TTFT at `quantile` (see TtftSplit) over joined requests with every part known."""
    usable = sorted((r for r in requests if r.client_ttft_ms is not None and r.outside_ms is not None
                     and r.server_other_ms is not None), key=lambda r: r.client_ttft_ms or 0.0)
    n = len(usable)
    if not n:
        return None
    center = round(quantile / 100 * (n - 1))
    half = round(0.025 * n)
    band = usable[max(0, center - half): min(n, center + half + 1)]

    def mean(name: str) -> float:
        return sum(getattr(r, name) for r in band) / len(band)

    return TtftSplit(quantile, mean("client_ttft_ms"), mean("queue_ms"), mean("prefill_ms"), mean("server_other_ms"),
                     mean("outside_ms"), len(band))
