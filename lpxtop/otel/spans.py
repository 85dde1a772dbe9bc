"""A probe, a load-test request or an agent step as OpenTelemetry spans whose ids are the request's own.

Every request lpxtop sends carries a W3C `traceparent` (its trace id and span id are kept in the Sample).
The span that describes the request must have exactly those ids, so that a server which continues the
trace (vLLM's `llm_request` span) becomes its child. The SDK's tracer makes its own ids; a custom
IdGenerator would have to be fed them through shared state. Here each span is built whole as the SDK's
`ReadableSpan` (its public constructor: context, parent, kind, times, attributes, events, status, links),
after the request ended, from what was measured, and handed to the SDK's OTLP exporter like any span.

Times are wall-clock nanoseconds: the start is `Sample.sent_wall_ns` (time.time_ns() just before sending;
before that field existed, the start's time.time() plus lpxtop's own pool wait), the end the start plus
the measured duration (lpxtop/otel/measures.py `request_duration_ms`), the first-token event the start
plus TTFT: one clock for the start, the monotonic clock for every interval.

Span shapes (the GenAI conventions v1.41.0, gen-ai-spans.md and gen-ai-agent-spans.md):
  probe / load request   CLIENT `chat {model}` (or `text_completion {model}`), event `lpxtop.first_token`
  agent step (OpenAI)    INTERNAL `invoke_agent lpxtop` (lpxtop runs the agent loop itself), children
                         CLIENT `chat {model}` (call 1), INTERNAL `execute_tool {tool}`, CLIENT `chat {model}`
  agent step (a platform: Dify app or workflow, Coze bot)  CLIENT `invoke_agent` (the agent runs there),
                         child INTERNAL `execute_tool {tool}` spanning the tool decision to its result as
                         the stream showed them
An agent call whose traceparent started a trace of its own is a root span in that trace, linked both ways
with the step's `invoke_agent` span.
"""

from __future__ import annotations

import random
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from lpxtop.model.agent import AgentStep
from lpxtop.model.endpoint import PLATFORM_APIS
from lpxtop.model.probe import Sample
from lpxtop.otel import semconv as sc
from lpxtop.otel.measures import EndpointInfo, request_duration_ms

SAMPLED = TraceFlags(TraceFlags.SAMPLED)
MAX_DESCRIPTION = 256
Ids = tuple[int, int]


def parse_ids(trace_id: str | None, span_id: str | None) -> Ids | None:
    """(trace id, span id) from 32 and 16 hex digits; None when absent or not valid (all zeros)."""
    if not trace_id or not span_id:
        return None
    try:
        t, s = int(trace_id, 16), int(span_id, 16)
    except ValueError:
        return None
    if not (0 < t < 1 << 128 and 0 < s < 1 << 64):
        return None
    return t, s


def new_trace_id() -> int:
    return random.getrandbits(128) or 1  # as the SDK's RandomIdGenerator (never the invalid 0)


def new_span_id() -> int:
    return random.getrandbits(64) or 1


def sample_ids(sample: Sample) -> Ids:
    """The ids the request was sent with; fresh ones for a request that carried none."""
    return parse_ids(sample.trace_id, sample.span_id) or (new_trace_id(), new_span_id())


def step_ids(step: AgentStep, field: str = "") -> Ids | None:
    """An agent step's ids (`trace_id`/`span_id`), or one call's (`call1_trace_id`/`call1_span_id` ...), when
    the step record carries them."""
    return parse_ids(getattr(step, f"{field}trace_id", None), getattr(step, f"{field}span_id", None))


def start_wall_ns(record: Any) -> int:
    """When the request left, on the wall clock: `sent_wall_ns` when measured, else the record's start time
    plus lpxtop's own wait for a connection (which comes before the send)."""
    sent = getattr(record, "sent_wall_ns", None)
    if sent:
        return int(sent)
    return int(record.wall_time * 1e9) + int((getattr(record, "pool_wait_ms", None) or 0.0) * 1e6)


def _ns(ms: float | None) -> int:
    return int(round((ms or 0.0) * 1e6))


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attributes.items() if v is not None}


class SpanBuilder:
    """Builds the spans of one resource and instrumentation scope."""

    def __init__(self, resource: Resource, scope: InstrumentationScope) -> None:
        self.resource = resource
        self.scope = scope

    def span(self, name: str, kind: SpanKind, ids: Ids, parent: int | None, start_ns: int, end_ns: int,
             attributes: dict[str, Any], *, events: tuple[Event, ...] = (), error: str | None = None,
             links: tuple[Link, ...] = ()) -> ReadableSpan:
        trace_id, span_id = ids
        context = SpanContext(trace_id, span_id, is_remote=False, trace_flags=SAMPLED)
        parent_context = (SpanContext(trace_id, parent, is_remote=False, trace_flags=SAMPLED)
                          if parent is not None else None)
        status = Status(StatusCode.ERROR, error[:MAX_DESCRIPTION]) if error else Status(StatusCode.UNSET)
        return ReadableSpan(name, context=context, parent=parent_context, resource=self.resource,
                            attributes=_clean(attributes), events=events, links=links, kind=kind, status=status,
                            start_time=start_ns, end_time=max(end_ns, start_ns), instrumentation_scope=self.scope)

    # ---- one inference request: a probe or a load-test request ----

    def request(self, sample: Sample, info: EndpointInfo, kind: str = "probe", ids: Ids | None = None,
                extra: dict[str, Any] | None = None) -> ReadableSpan:
        ids = ids or sample_ids(sample)
        start = start_wall_ns(sample)
        duration = request_duration_ms(sample)
        operation = info.operation
        model = info.request_model
        attributes = {
            **info.operation_attrs(),
            sc.RESPONSE_MODEL: sample.model,
            sc.RESPONSE_ID: sample.response_id,
            sc.FINISH_REASONS: (sample.finish_reason,) if sample.finish_reason else None,
            sc.MAX_TOKENS: info.max_tokens,
            sc.STREAM: True,
            sc.TIME_TO_FIRST_CHUNK: sample.ttft_ms / 1000.0 if sample.ttft_ms is not None else None,
            sc.INPUT_TOKENS: sample.prompt_tokens,
            sc.OUTPUT_TOKENS: sample.output_tokens,
            sc.HTTP_STATUS: sample.http_status,
            sc.ENDPOINT: info.name,
            sc.REQUEST_KIND: kind,
            sc.CLIENT_LIMITED: True if sample.client_limited else None,
            sc.TOKENS_APPROX: True if sample.output_tokens_approx else None,
            sc.ERROR_TYPE: None if sample.ok else sample.error_kind,
            **(extra or {}),
        }
        events = ((Event(sc.FIRST_TOKEN_EVENT, {}, start + _ns(sample.ttft_ms)),)
                  if sample.ttft_ms is not None else ())
        return self.span(f"{operation} {model}" if model else operation, SpanKind.CLIENT, ids, None, start,
                         start + _ns(duration), attributes, events=events,
                         error=None if sample.ok else sample.error_text)

    # ---- one agent step ----

    def agent_step(self, step: AgentStep, info: EndpointInfo) -> list[ReadableSpan]:
        if step.api in PLATFORM_APIS:
            return self._dify_step(step, info)
        start = start_wall_ns(step)
        own = step_ids(step)
        call_ids = {n: step_ids(step, f"call{n}_") for n in (1, 2)}
        trace_id = own[0] if own else (call_ids[1][0] if call_ids[1] else new_trace_id())
        root: Ids = (trace_id, own[1] if own else new_span_id())
        error = None if step.ok else step.error_text
        model = info.request_model
        children: list[ReadableSpan] = []
        links: list[Link] = []
        calls = [(1, 0.0, step.call1_ttft_ms, self._call1_end_ms(step), step.call1_response_id)]
        if step.call2_start_ms is not None:
            answer_end = step.answer_e2e_ms if step.answer_e2e_ms is not None else step.answer_ttft_ms
            calls.append((2, step.call2_start_ms, step.answer_ttft_ms, answer_end, step.call2_response_id))
        for n, at_ms, ttft_ms, end_ms, response_id in calls:
            ids, parent, call_links = self._child_ids(call_ids[n], root)
            if parent is None:
                links.append(Link(SpanContext(*ids, is_remote=False, trace_flags=SAMPLED)))
            failed = step.failed_call == n
            call_start = start + _ns(at_ms)
            attributes = {
                **info.operation_attrs(sc.CHAT), sc.RESPONSE_ID: response_id, sc.STREAM: True,
                sc.TIME_TO_FIRST_CHUNK: ttft_ms / 1000.0 if ttft_ms is not None else None,
                sc.ENDPOINT: info.name, sc.REQUEST_KIND: "agent_step",
                sc.HTTP_STATUS: step.http_status if failed else None,
                sc.ERROR_TYPE: step.error_kind if failed else None,
            }
            events = (Event(sc.FIRST_TOKEN_EVENT, {}, call_start + _ns(ttft_ms)),) if ttft_ms is not None else ()
            children.append(self.span(f"{sc.CHAT} {model}" if model else sc.CHAT, SpanKind.CLIENT, ids, parent,
                                      call_start, call_start + _ns(end_ms if end_ms is not None else 0.0),
                                      attributes, events=events, error=error if failed else None,
                                      links=call_links))
            if n == 1 and step.tool_ms is not None and step.call2_start_ms is not None:
                tool_end = start + _ns(step.call2_start_ms)
                children.append(self.span(
                    f"{sc.EXECUTE_TOOL} {step.tool_name}" if step.tool_name else sc.EXECUTE_TOOL, SpanKind.INTERNAL,
                    (trace_id, new_span_id()), root[1], tool_end - _ns(step.tool_ms), tool_end,
                    {sc.OPERATION: sc.EXECUTE_TOOL, sc.TOOL_NAME: step.tool_name, sc.TOOL_TYPE: "function",
                     sc.ENDPOINT: info.name, "lpxtop.agent.tool_calls": step.tool_calls}))
        agent = self.span(
            f"{sc.INVOKE_AGENT} {sc.AGENT}", SpanKind.INTERNAL, root, None, start,
            start + _ns(self._step_end_ms(step)),
            {**info.operation_attrs(sc.INVOKE_AGENT), sc.AGENT_NAME: sc.AGENT, sc.ENDPOINT: info.name,
             sc.REQUEST_KIND: "agent_step", sc.ERROR_TYPE: step.error_kind, sc.HTTP_STATUS: step.http_status,
             sc.CLIENT_LIMITED: True if step.client_limited else None,
             "lpxtop.agent.tool_calls": step.tool_calls},
            error=error, links=tuple(links))
        return [agent, *children]

    def _dify_step(self, step: AgentStep, info: EndpointInfo) -> list[ReadableSpan]:
        start = start_wall_ns(step)
        ids = step_ids(step) or (new_trace_id(), new_span_id())
        events = ((Event(sc.FIRST_TOKEN_EVENT, {}, start + _ns(step.answer_ttft_ms)),)
                  if step.answer_ttft_ms is not None else ())
        spans = [self.span(
            sc.INVOKE_AGENT, SpanKind.CLIENT, ids, None, start, start + _ns(self._step_end_ms(step)),
            {**info.operation_attrs(sc.INVOKE_AGENT), sc.RESPONSE_ID: step.call1_response_id, sc.STREAM: True,
             sc.TIME_TO_FIRST_CHUNK: step.answer_ttft_ms / 1000.0 if step.answer_ttft_ms is not None else None,
             sc.ENDPOINT: info.name, sc.REQUEST_KIND: "agent_step", sc.ERROR_TYPE: step.error_kind,
             sc.HTTP_STATUS: step.http_status, sc.CLIENT_LIMITED: True if step.client_limited else None},
            events=events, error=None if step.ok else step.error_text)]
        decided, observed = step.time_to_tool_name_ms, step.time_to_observation_ms
        if decided is not None and observed is not None:
            spans.append(self.span(
                f"{sc.EXECUTE_TOOL} {step.tool_name}" if step.tool_name else sc.EXECUTE_TOOL, SpanKind.INTERNAL,
                (ids[0], new_span_id()), ids[1], start + _ns(decided), start + _ns(observed),
                {sc.OPERATION: sc.EXECUTE_TOOL, sc.TOOL_NAME: step.tool_name, sc.ENDPOINT: info.name,
                 "lpxtop.observed": "stream"}))
        return spans

    @staticmethod
    def _child_ids(call: Ids | None, root: Ids) -> tuple[Ids, int | None, tuple[Link, ...]]:
        """A call's (ids, parent span id, links): a child of the step in the step's trace; a root linked to the
        step when its traceparent began a trace of its own."""
        if call is None:
            return (root[0], new_span_id()), root[1], ()
        if call[0] == root[0]:
            return call, root[1], ()
        return call, None, (Link(SpanContext(root[0], root[1], is_remote=False, trace_flags=SAMPLED)),)

    @staticmethod
    def _call1_end_ms(step: AgentStep) -> float | None:
        if step.call1_e2e_ms is not None:
            return step.call1_e2e_ms
        known = [v for v in (step.time_to_tool_call_ms, step.time_to_tool_name_ms, step.call1_ttft_ms) if v is not None]
        return max(known) if known else None

    @staticmethod
    def _step_end_ms(step: AgentStep) -> float:
        """The step's end from its start: its measured time, else the last moment measured (a failed step)."""
        if step.step_ms is not None:
            return max(step.step_ms, step.client_latency_ms or 0.0)
        known = [step.call1_e2e_ms, step.call1_ttft_ms, step.time_to_tool_call_ms, step.time_to_observation_ms,
                 step.client_latency_ms]
        if step.call2_start_ms is not None:
            known += [step.call2_start_ms + (step.answer_e2e_ms or step.answer_ttft_ms or 0.0)]
        values = [v for v in known if v is not None]
        return max(values) if values else 0.0
