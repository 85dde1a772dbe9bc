"""One agent step's measurement, and its summary over a window (the agent part of an endpoint's view).

An agent step is what one turn of a tool-using agent costs: call 1 (the model streams a tool call), the
tool (run by lpxtop, with a configured latency), call 2 (the model answers with the tool's result). For an
agent platform (a Dify app, a Dify workflow, a Coze bot: `lpxtop.model.endpoint.PLATFORM_APIS`) the whole
step is one streamed request to the platform, which calls its own model and tools; a Dify workflow's (and
chatflow's) nodes are timed one by one (`lpxtop.model.platform`).

Every time is in milliseconds, taken like the chat probe's (at byte arrival, on the engine's loop): the
times of call 1 count from call 1's send, those of call 2 from call 2's send, and `step_ms` from call 1's
send to call 2's last token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lpxtop.model.endpoint import PLATFORM_APIS
from lpxtop.model.platform import AgentNode, NodeSummary
from lpxtop.model.probe import Percentiles

# The model answered, but not as an agent needs: counted and shown, yet the endpoint is up.
# `requires_action`: a Coze bot stopped for a tool its client must run (a client-side plugin); lpxtop runs none.
BEHAVIOUR_KINDS = ("no_tool_call", "bad_tool_args", "tool_args_schema", "unknown_tool", "requires_action")


@dataclass(frozen=True)
class CallTrace:
    """One request of a step as it went out: the trace context it carried (`traceparent`) and when.

    `trace_id`/`span_id` are the W3C ids lpxtop sent (engine/probe/tracecontext.py), so a server's own
    spans of this call can be found; `sent_wall_ns` is time.time_ns() as the request counted as sent.
    """

    trace_id: str
    span_id: str
    sent_wall_ns: int

    @classmethod
    def of(cls, outcome: Any) -> CallTrace:
        """From a measured stream's outcome (engine/probe/stream.py `StreamOutcome`)."""
        return cls(trace_id=outcome.trace.trace_id, span_id=outcome.trace.span_id, sent_wall_ns=outcome.sent_wall_ns)


@dataclass(frozen=True)
class AgentStep:
    """One agent step: two measured calls and a tool in between (or one request to an agent platform).

    `error_kind` is None for a step that went as it should: a tool call whose arguments are valid JSON and
    valid against the tool's schema, then an answer. Otherwise a transport class of the chat probe
    (`refused`, `http_5xx`, `first_token_timeout` …, `failed_call` says which call) or one of
    BEHAVIOUR_KINDS. Timings are kept wherever they were measured: a step with bad arguments still ran
    the tool (with an error result) and call 2, so its step time counts.
    """

    endpoint: str
    api: str  # "chat" (an OpenAI-compatible server), or a platform: "dify", "dify-workflow", "coze"
    wall_time: float
    start_ns: int  # perf_counter_ns just before call 1 was sent
    error_kind: str | None = None
    error_message: str | None = None
    http_status: int | None = None
    failed_call: int | None = None  # 1 or 2: the call a transport failure hit
    tool_name: str | None = None
    tool_calls: int = 0  # tool calls in call 1's answer
    args_valid_json: bool | None = None  # None: no tool call to judge
    args_valid_schema: bool | None = None  # None: not judged (invalid JSON, or no schema known)
    quirks: tuple[str, ...] = ()  # stream shapes worth knowing (see engine/probe/toolcalls.py)
    call1_ttft_ms: float | None = None
    time_to_tool_name_ms: float | None = None
    time_to_tool_call_ms: float | None = None
    call1_e2e_ms: float | None = None
    tool_ms: float | None = None
    call2_start_ms: float | None = None  # when call 2 was sent, from call 1's send
    answer_ttft_ms: float | None = None  # call 2's TTFT (from call 2's send; a platform: from the request)
    answer_e2e_ms: float | None = None  # call 2's last token (from call 2's send; a platform: from the request)
    step_ms: float | None = None
    call1_response_id: str | None = None
    call2_response_id: str | None = None
    # Agent platforms only (PLATFORM_APIS)
    time_to_observation_ms: float | None = None  # the platform's tool returned (Dify: observation; Coze: tool_response)
    # The platform's own time for the step: Dify app message_end's metadata.usage.latency, a workflow's
    # workflow_finished elapsed_time, a Coze chat's completed_at - created_at (whole seconds)
    app_latency_ms: float | None = None
    app_latency_resolution_ms: float | None = None  # how coarse app_latency_ms is (Coze: 1000); None: fine
    client_latency_ms: float | None = None  # the arrival at lpxtop of the event that carries app_latency_ms
    app_ttft_ms: float | None = None  # Dify's own TTFT of its (last) model call: message_end usage time_to_first_token
    app_generate_ms: float | None = None  # ... and its generation time: usage time_to_generate
    input_tokens: int | None = None  # from the platform's usage, where it sends one
    output_tokens: int | None = None
    total_tokens: int | None = None
    nodes: tuple[AgentNode, ...] = ()  # a Dify workflow's or chatflow's node runs, in the order they started
    nodes_left_out: int = 0  # node runs past lpxtop.model.platform.MAX_NODES
    client_limited: bool = False  # lpxtop itself was late while the step ran (engine/probe/clientlimit.py), as for probes
    # The requests sent, in order (call 1, then call 2; a platform: its one request): trace context and send time
    calls: tuple[CallTrace, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def answered(self) -> bool:
        """The server answered (even a model that misbehaved): only transport failures make a step unanswered."""
        return self.error_kind is None or self.error_kind in BEHAVIOUR_KINDS

    @property
    def error_text(self) -> str | None:
        if self.error_kind is None:
            return None
        return f"{self.error_kind}: {self.error_message}" if self.error_message else self.error_kind

    @property
    def segments_ms(self) -> dict[str, float] | None:
        """Where the step's time went, for the breakdown bar; None unless the whole step was measured.

        prefill: both calls' TTFT (queueing, prefill, and the network and HTTP front end on the way in);
        decode: first to last token of both calls; tool: the tool's run; outside: the rest of the step,
        time in no call's stream and not in the tool (the end of call 1's stream after its last token,
        building and sending call 2). A platform: until the tool decision, the platform's tool, the answer's TTFT
        and decode after the observation, and the client's time beyond the app's own latency.
        """
        if self.step_ms is None:
            return None
        if self.api in PLATFORM_APIS:
            return _platform_segments(self)
        parts = (self.call1_ttft_ms, self.call1_e2e_ms, self.answer_ttft_ms, self.answer_e2e_ms, self.tool_ms)
        if any(p is None for p in parts):
            return None
        ttft1, e2e1, ttft2, e2e2, tool = parts  # type: ignore[misc]
        prefill = ttft1 + ttft2
        decode = (e2e1 - ttft1) + (e2e2 - ttft2)
        return {"prefill": prefill, "decode": decode, "tool": tool,
                "outside": max(0.0, self.step_ms - prefill - decode - tool)}


def _platform_segments(step: AgentStep) -> dict[str, float] | None:
    decision, observation = step.time_to_tool_name_ms, step.time_to_observation_ms
    ttft, e2e = step.answer_ttft_ms, step.answer_e2e_ms
    if ttft is None or e2e is None:
        return None
    if decision is None or observation is None:  # the app answered without a tool
        decision = observation = 0.0
    segments = {
        "prefill": decision + max(0.0, ttft - observation),
        "decode": max(0.0, e2e - ttft),
        "tool": max(0.0, observation - decision),
    }
    outside = 0.0
    # a platform figure in whole seconds (Coze) says nothing about milliseconds outside it
    if step.app_latency_ms is not None and step.client_latency_ms is not None and step.app_latency_resolution_ms is None:
        outside = max(0.0, step.client_latency_ms - step.app_latency_ms)
    segments["outside"] = outside
    return segments


SEGMENTS = ("prefill", "decode", "tool", "outside")
SEGMENT_LABELS = {
    "prefill": "queue+prefill (TTFT)",
    "decode": "decode",
    "tool": "tool",
    "outside": "outside the engine",
}
# The same step split by the calls' own server spans (--traces-listen, lpxtop/engine/traces/views.py): the
# server's queue, prefill and decode of both calls, lpxtop's tool, and the rest of the step outside them
SPAN_SEGMENTS = ("queue", "prefill", "decode", "tool", "outside")
SPAN_SEGMENT_LABELS = {
    "queue": "queue",
    "prefill": "prefill",
    "decode": "decode",
    "tool": "tool",
    "outside": "outside queue/prefill/decode",
}


@dataclass(frozen=True)
class ChainBudget:
    """What a chain of `steps` agent steps costs at the window's step times.

    The distribution of the sum of `steps` independent draws from the window's step samples: exact when
    the window is small enough to enumerate, else a Monte Carlo estimate over `draws` sums with a fixed
    seed (engine/agent/chain.py). Not steps × p95: the p95 of a sum is not the sum of p95s (below it when
    slow steps are common; above it when a slow step rarer than 1 in 20 becomes likely somewhere in N).
    """

    steps: int
    p50_ms: float
    p95_ms: float
    samples: int  # step samples it was computed from
    exact: bool
    draws: int

    def to_json(self) -> dict:
        return {"steps": self.steps, "p50_ms": round(self.p50_ms, 3), "p95_ms": round(self.p95_ms, 3),
                "samples": self.samples, "method": "exact" if self.exact else f"monte_carlo_{self.draws}"}


@dataclass(frozen=True)
class AgentView:
    """The agent probe of one endpoint, summarized over the window (the chat probe's window and bounds)."""

    api: str
    status: str  # up | degraded | down | pending, from transport failures only
    steps_sent: int
    steps_ok: int
    steps_failed: int
    errors: Mapping[str, int]
    time_to_tool_name_ms: Percentiles | None
    time_to_tool_call_ms: Percentiles | None
    call1_e2e_ms: Percentiles | None
    tool_ms: Percentiles | None
    answer_ttft_ms: Percentiles | None
    answer_e2e_ms: Percentiles | None
    step_ms: Percentiles | None
    tool_call_valid_pct: float | None  # of the window's steps that got a tool call
    chain: ChainBudget | None
    breakdown_ms: Mapping[str, float]  # mean ms per segment over the window's fully measured steps
    last_error: str | None
    last_error_time: float | None
    samples: tuple[AgentStep, ...]  # the window, oldest first
    chain_steps: int = 5
    time_to_observation_ms: Percentiles | None = None
    app_latency_ms: Percentiles | None = None
    client_latency_ms: Percentiles | None = None
    in_flight: bool = False
    app_ttft_ms: Percentiles | None = None
    app_generate_ms: Percentiles | None = None
    app_latency_resolution_ms: float | None = None  # the coarsest of the window's steps (Coze: 1000)
    output_tokens: Percentiles | None = None
    total_tokens: Percentiles | None = None
    nodes: tuple[NodeSummary, ...] = ()  # a Dify workflow's or chatflow's nodes, in execution order
    steps_client_limited: int = 0  # steps during which lpxtop itself was late: left out of the times by default
    # the times count client-limited steps (asked for, or no other step with times was in the window)
    percentiles_with_client_limited: bool = False
    # where a step's time goes by its calls' own server spans (SPAN_SEGMENTS; mean over the window's steps
    # whose every call was joined to its span); empty without a receiver or such a step
    span_breakdown_ms: Mapping[str, float] = field(default_factory=dict)
    span_breakdown_steps: int = 0

    @property
    def recent_errors(self) -> tuple[AgentStep, ...]:
        return tuple(s for s in self.samples if not s.ok)[-20:]

    def to_json(self) -> dict:
        def p(x: Percentiles | None) -> dict | None:
            return x.to_json() if x is not None else None

        data = {
            "api": self.api,
            "status": "down" if self.status == "pending" else self.status,
            "steps": self.steps_sent,
            "steps_ok": self.steps_ok,
            "steps_failed": self.steps_failed,
            "steps_client_limited": self.steps_client_limited,
            "latency_includes_client_limited": self.percentiles_with_client_limited,
            "time_to_tool_name_ms": p(self.time_to_tool_name_ms),
            "time_to_tool_call_ms": p(self.time_to_tool_call_ms),
            "call1_e2e_ms": p(self.call1_e2e_ms),
            "tool_ms": p(self.tool_ms),
            "answer_ttft_ms": p(self.answer_ttft_ms),
            "answer_e2e_ms": p(self.answer_e2e_ms),
            "step_ms": p(self.step_ms),
            "tool_call_valid_pct": None if self.tool_call_valid_pct is None else round(self.tool_call_valid_pct, 2),
            "errors": dict(sorted(self.errors.items())),
            "chain": self.chain.to_json() if self.chain is not None else {"steps": self.chain_steps, "p50_ms": None,
                                                                          "p95_ms": None},
            "breakdown_ms": {k: round(v, 3) for k, v in self.breakdown_ms.items()},
            "breakdown_spans_ms": {k: round(v, 3) for k, v in self.span_breakdown_ms.items()},
            "breakdown_spans_steps": self.span_breakdown_steps,
            "last_error": self.last_error,
        }
        if self.api in PLATFORM_APIS:
            data["time_to_observation_ms"] = p(self.time_to_observation_ms)
            data["app_latency_ms"] = p(self.app_latency_ms)
            data["app_latency_resolution_ms"] = self.app_latency_resolution_ms
            data["client_latency_ms"] = p(self.client_latency_ms)
            data["app_ttft_ms"] = p(self.app_ttft_ms)
            data["app_generate_ms"] = p(self.app_generate_ms)
            data["output_tokens"] = p(self.output_tokens)
            data["total_tokens"] = p(self.total_tokens)
            data["nodes"] = [node.to_json() for node in self.nodes]
        return data


@dataclass(frozen=True)
class AgentStepEvent:
    """One finished agent step of `endpoint` (also a failed one), for the engine's listeners."""

    endpoint: str
    step: AgentStep
