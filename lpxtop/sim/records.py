"""The truth record: what the sim really sent for each request, and when (perf_counter_ns)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

# Event kinds: "role", "content", "empty_content", "finish", "usage", "done", "error" (an error event
# mid-stream), "bad_json" (a malformed data line), "body" (a whole non-streaming JSON response).
EVENT_KINDS = ("role", "content", "empty_content", "finish", "usage", "done", "error", "bad_json", "body")


def token_times_ns(events) -> list[int]:
    """When each token event was written: content chunks, empty-content chunks (a token that completed no
    character, sent as `"content": ""` like vLLM does), and a finish chunk that carries a token.

    `events` are (t_ns, kind, n_tokens) triples, as in SimRecord.events or its JSON form.
    """
    return [t for t, kind, n in events if kind in _TOKEN_EVENT_KINDS and n > 0]


_TOKEN_EVENT_KINDS = ("content", "empty_content", "finish")


@dataclass
class SimRecord:
    """One request as the server saw and answered it.

    `events` holds (t_ns, kind, n_tokens); t_ns is time.perf_counter_ns() taken immediately before the
    event's bytes were written (CLOCK_MONOTONIC on Linux, so it compares with a client's own
    perf_counter in another thread or process on the same machine).
    `outcome` is "pending" while the request runs, then "ok", "cut", "error_event", "client_disconnect",
    "aborted" (the server stopped under it: connection dropped), or "http_<status>" for a request
    answered with an error status.
    """

    response_id: str
    model: str
    api: str  # "chat" | "completions" | "dify" | "dify-workflow" | "coze"
    stream: bool
    t_received_ns: int
    status: int = 200
    outcome: str = "pending"
    faults: tuple[str, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    events: list[tuple[int, str, int]] = field(default_factory=list)
    t_done_ns: int | None = None
    # The engine's own view of a completed request (ms), as vLLM's span reports it (sim/spans.py):
    # queue = scheduled - entered the engine, prefill = first token - scheduled, decode = last - first
    # token, ttft and e2e from the front end's receipt. None until the request completes.
    server_queue_ms: float | None = None
    server_prefill_ms: float | None = None
    server_decode_ms: float | None = None
    server_ttft_ms: float | None = None
    server_e2e_ms: float | None = None
    trace_id: str | None = None  # from the request's traceparent (None: none, or invalid)
    # An agent platform's own figures as it sent them (a Dify app's usage latency, time_to_first_token and
    # time_to_generate; a workflow's elapsed_time; a Coze chat's created_at and completed_at), and a
    # workflow's nodes: {"title", "node_type", "node_id", "started_ns", "finished_ns", "elapsed_s", "status"}
    app: dict = field(default_factory=dict)
    nodes: list[dict] = field(default_factory=list)

    @property
    def tokens_sent(self) -> int:
        """Tokens carried by the events sent so far (content, empty_content, finish, body)."""
        return sum(n for _, kind, n in self.events if kind in ("content", "empty_content", "finish", "body"))

    def times_ns(self, *kinds: str) -> list[int]:
        """Send times of the events of the given kinds, in order."""
        return [t for t, kind, _ in self.events if kind in kinds]

    def to_json(self) -> dict:
        """JSON form, for GET /sim/records/{id}."""
        return {
            "response_id": self.response_id,
            "model": self.model,
            "api": self.api,
            "stream": self.stream,
            "t_received_ns": self.t_received_ns,
            "status": self.status,
            "outcome": self.outcome,
            "faults": list(self.faults),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "finish_reason": self.finish_reason,
            "events": [list(e) for e in self.events],
            "t_done_ns": self.t_done_ns,
            "server_queue_ms": self.server_queue_ms,
            "server_prefill_ms": self.server_prefill_ms,
            "server_decode_ms": self.server_decode_ms,
            "server_ttft_ms": self.server_ttft_ms,
            "server_e2e_ms": self.server_e2e_ms,
            "trace_id": self.trace_id,
            "app": dict(self.app),
            "nodes": [dict(n) for n in self.nodes],
        }


class RecordStore:
    """Bounded, thread-safe map of response id -> SimRecord (oldest dropped first)."""

    def __init__(self, max_records: int) -> None:
        self._max = max(1, max_records)
        self._records: OrderedDict[str, SimRecord] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, record: SimRecord) -> None:
        """Keep a new record, dropping the oldest beyond the bound."""
        with self._lock:
            self._records[record.response_id] = record
            while len(self._records) > self._max:
                self._records.popitem(last=False)

    def get(self, response_id: str) -> SimRecord | None:
        """The record for a response id, or None (unknown or already dropped)."""
        with self._lock:
            return self._records.get(response_id)

    def all(self) -> list[SimRecord]:
        """All kept records, oldest first (a copy of the list; the records themselves are live)."""
        with self._lock:
            return list(self._records.values())

    def clear(self) -> None:
        """Forget every record."""
        with self._lock:
            self._records.clear()
