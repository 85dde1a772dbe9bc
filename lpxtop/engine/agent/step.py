"""One agent step against an OpenAI-compatible server: call 1 (a tool call), the tool, call 2 (the answer).

- call 1: a system message and the user's question, with the tool set and `tool_choice` (`required` by
  default, `auto`, or one named function), streamed; at least 96 tokens (tool-call arguments are longer
  than the chat probe's sentence);
- the tool "runs" here, taking the configured latency (an asyncio sleep, measured, so lpxtop's own timer
  granularity is in `tool_ms` and never in the server's figures);
- call 2: the same conversation, the assistant's tool call(s) and one `tool` message per call with the
  result, `tool_choice: "none"` (the model answers; a `required` choice would demand another call, and
  `auto` needs server options that `none` does not), streamed until the answer ends.

Arguments that are not valid JSON are echoed to call 2 as `{}` with an error result, as an agent framework
reports a bad call back to the model (servers that render tool calls through a chat template reject
arguments that do not parse); the step is classified `bad_tool_args` and its times still count.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time

from lpxtop.engine.agent.schema import MAX_JSON_DEPTH, deeper_than, validate
from lpxtop.engine.agent.tools import ToolSet, conversation
from lpxtop.engine.probe.agentcall import ToolCallSink
from lpxtop.engine.probe.chat import name
from lpxtop.engine.probe.stream import StreamOutcome, measured_stream
from lpxtop.engine.probe.toolcalls import MAX_ARGUMENT_CHARS, ToolCall
from lpxtop.engine.probe.tracecontext import new_trace_context, next_call
from lpxtop.http import HttpClient
from lpxtop.model.agent import AgentStep, CallTrace
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.textsafe import scrub

CALL1_MIN_TOKENS = 96
MAX_TOOL_CALLS_RUN = 8  # a runaway answer with hundreds of calls gets its first ones run


def chat_url(endpoint: EndpointConfig) -> str:
    return endpoint.url.rstrip("/") + "/chat/completions"


def call1_body(endpoint: EndpointConfig, tools: ToolSet, model: str | None, include_usage: bool) -> dict:
    """Call 1's request: the question (with a fresh random prefix unless turned off) and the tools."""
    prompt = tools.prompt
    if endpoint.random_prefix:
        prompt = f"[{secrets.token_hex(6)}] {prompt}"
    body: dict = {
        "messages": conversation(tools, prompt),
        "tools": list(tools.tools),
        "tool_choice": tools.tool_choice(endpoint.tool_choice),
        "max_tokens": max(CALL1_MIN_TOKENS, endpoint.max_tokens),
        "stream": True,
    }
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    if model:
        body["model"] = model
    return body


def call2_body(first: dict, calls: list[ToolCall], results: list[str], echoed_args: list[str],
               endpoint: EndpointConfig) -> dict:
    """Call 2's request: call 1's conversation, the assistant's tool calls, one tool message each."""
    messages = list(first["messages"])
    ids = [call.id or f"call_lpxtop_{i}" for i, call in enumerate(calls)]
    messages.append({
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": args}}
            for call_id, call, args in zip(ids, calls, echoed_args)
        ],
    })
    for call_id, result in zip(ids, results):
        messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
    body = {key: value for key, value in first.items() if key not in ("messages", "tool_choice", "max_tokens")}
    body["messages"] = messages
    body["tool_choice"] = "none"
    body["max_tokens"] = endpoint.max_tokens
    return body


def _ms(t_ns: int | None, origin_ns: int) -> float | None:
    return None if t_ns is None else (t_ns - origin_ns) / 1e6


def rejects_stream_options(outcome: StreamOutcome) -> bool:
    """An older server that refuses `stream_options` (HTTP 400/422 naming it): call again without it."""
    return outcome.status in (400, 422) and "stream_options" in (outcome.error_message or "")


async def run_agent_step(
    client: HttpClient,
    endpoint: EndpointConfig,
    tools: ToolSet,
    model: str | None = None,
    *,
    include_usage: bool = True,
) -> AgentStep:
    """One agent step; never raises (except CancelledError). Every failure is a classified AgentStep."""
    model = model or endpoint.model
    url = chat_url(endpoint)
    body1 = call1_body(endpoint, tools, model, include_usage)
    one = ToolCallSink()
    trace = new_trace_context()  # the step's trace: each call a span of its own in it
    out1 = await measured_stream(client, endpoint, url, body1, one, trace=trace)
    start = out1.start_ns
    fields: dict = {
        "endpoint": endpoint.name, "api": "chat", "wall_time": out1.wall_time, "start_ns": start,
        "calls": (CallTrace.of(out1),),
        "call1_ttft_ms": _ms(one.first_token_ns, start),
        "call1_e2e_ms": _ms(one.last_token_ns, start),
        "call1_response_id": name(one.response_id),
        "quirks": tuple(sorted(one.tool_calls.quirks)),
    }
    calls = [c for c in one.tool_calls.ordered() if c.name or c.arguments]
    if calls:
        fields["tool_calls"] = len(calls)
        fields["tool_name"] = scrub(calls[0].name)[:100] if calls[0].name else None  # type: ignore[index]
        fields["time_to_tool_name_ms"] = _ms(one.tool_calls.first_name_ns, start)
        fields["time_to_tool_call_ms"] = _ms(one.tool_calls.last_ns, start)
    if not out1.ok:
        return _failed(fields, out1, call=1)
    if not calls:
        said = scrub(one.text.strip()) or ""
        return AgentStep(**fields, error_kind="no_tool_call",
                         error_message=f"the model answered with text instead of a tool call "
                                       f"(finish_reason {name(one.finish_reason)}): {said[:80]!r}")

    verdict, results, echoed = _judge(calls, tools, name(one.finish_reason))
    fields.update(verdict)
    tool_started = time.perf_counter_ns()
    if endpoint.tool_latency_s > 0:
        await asyncio.sleep(endpoint.tool_latency_s * min(len(calls), MAX_TOOL_CALLS_RUN))
    tool_done = time.perf_counter_ns()
    fields["tool_ms"] = (tool_done - tool_started) / 1e6

    two = ToolCallSink()
    out2 = await measured_stream(client, endpoint, url, call2_body(body1, calls[:MAX_TOOL_CALLS_RUN], results, echoed,
                                                                    endpoint), two, trace=next_call(trace))
    fields["calls"] = (*fields["calls"], CallTrace.of(out2))
    fields["call2_start_ms"] = _ms(out2.start_ns, start)
    fields["answer_ttft_ms"] = _ms(two.first_token_ns, out2.start_ns)
    fields["answer_e2e_ms"] = _ms(two.last_token_ns, out2.start_ns)
    fields["call2_response_id"] = name(two.response_id)
    if not out2.ok:
        return _failed(fields, out2, call=2)
    fields["step_ms"] = _ms(two.last_token_ns, start)
    return AgentStep(**fields)


def _failed(fields: dict, outcome: StreamOutcome, call: int) -> AgentStep:
    # A failed call's own times are not the server's answer times: keep only what came before it.
    if call == 1:
        fields = {k: v for k, v in fields.items() if k not in ("call1_e2e_ms", "time_to_tool_call_ms")}
    else:
        fields = {k: v for k, v in fields.items() if k != "answer_e2e_ms"}
    fields.pop("error_kind", None)
    fields.pop("error_message", None)
    return AgentStep(
        **fields,
        error_kind=outcome.error_kind,
        error_message=f"call {call}: {scrub(outcome.error_message) or outcome.error_kind}",
        http_status=outcome.status,
        failed_call=call,
    )


def _judge(calls: list[ToolCall], tools: ToolSet, finish_reason: str | None) -> tuple[dict, list[str], list[str]]:
    """Classify the calls (first problem wins), and the results and arguments to send back in call 2."""
    verdict: dict = {"args_valid_json": True, "args_valid_schema": True}
    results: list[str] = []
    echoed: list[str] = []
    problem: tuple[str, str] | None = None
    for call in calls[:MAX_TOOL_CALLS_RUN]:
        text = call.arguments_text
        unusable = _unusable(call, text)
        if unusable is None:
            try:
                arguments = json.loads(text) if text.strip() else {}
            except RecursionError:
                unusable = f"arguments nested deeper than {MAX_JSON_DEPTH} levels: not judged"
            except ValueError as exc:
                why = "cut by max_tokens" if finish_reason == "length" else str(exc)
                unusable = f"arguments are not valid JSON ({why}): {scrub(text)[:80]!r}"
            else:
                if deeper_than(arguments):
                    unusable = f"arguments nested deeper than {MAX_JSON_DEPTH} levels: not judged"
        if unusable is not None:
            verdict["args_valid_json"] = False
            verdict["args_valid_schema"] = None
            problem = problem or ("bad_tool_args", f"{scrub(call.name) or '?'}: {unusable}")
            results.append(json.dumps({"error": "the arguments were not valid JSON"}))
            echoed.append("{}")
            continue
        echoed.append(text if text.strip() else "{}")
        schema = tools.schema_for(call.name)
        if schema is None:
            verdict["args_valid_schema"] = False
            problem = problem or ("unknown_tool", f"the model called {scrub(call.name)[:60]!r}, which is not one of "
                                                  f"the tools ({', '.join(tools.names)})")
            results.append(json.dumps({"error": f"no tool named {call.name}"}))
            continue
        if not isinstance(arguments, dict):
            errors = [f"$: expected object, got {type(arguments).__name__}"]
        else:
            errors = validate(arguments, schema)
        if errors:
            if verdict["args_valid_schema"] is not None:
                verdict["args_valid_schema"] = False
            problem = problem or ("tool_args_schema", f"{call.name}: {'; '.join(errors[:2])}")
            results.append(json.dumps({"error": "invalid arguments: " + "; ".join(errors[:2])}))
            continue
        results.append(tools.result_for(call.name, arguments))
    if problem is not None:
        verdict["error_kind"], verdict["error_message"] = problem
    return verdict, results, echoed


def _unusable(call: ToolCall, text: str) -> str | None:
    """Why a call's arguments cannot be judged before parsing them (lpxtop's bounds), or None."""
    if call.truncated:
        return (f"arguments longer than {MAX_ARGUMENT_CHARS} characters (lpxtop keeps no more, all calls "
                f"together): cut, so not judged")
    if call.too_deep:
        return f"arguments nested deeper than {MAX_JSON_DEPTH} levels: not judged"
    return None
