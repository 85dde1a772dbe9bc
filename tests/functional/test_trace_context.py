"""Every request lpxtop sends carries a fresh W3C `traceparent`, and the record of the request keeps its
ids: the chat and completions probes (Sample), both agent calls and a Dify step (AgentStep.calls), and
each load request (its per-request record and `--requests-jsonl` line). Recordings keep the new fields,
and a recording made before them still replays."""

from __future__ import annotations

import json
import re
import time

import pytest

from lpxtop.engine.agent.dify import run_dify_step
from lpxtop.engine.agent.step import run_agent_step
from lpxtop.engine.agent.tools import ToolSet
from lpxtop.engine.probe import run_probe
from lpxtop.engine.probe import stream as stream_module
from lpxtop.engine.probe.clientlimit import LoopLag
from lpxtop.engine.probe.tracecontext import TraceContext, new_trace_context
from lpxtop.http import HttpClient
from lpxtop.load.step import StepRun, StepSpec
from lpxtop.model.agent import AgentStep, CallTrace
from lpxtop.model.probe import Sample
from lpxtop.record.codec import Decoder, Encoder, record_types
from tests.support.hostile import HostileServer, Reply, Request
from tests.support.sim import endpoint

pytestmark = pytest.mark.timeout(60)

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-01$")
HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
DONE = b"data: [DONE]\n\n"


def event(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(delta: dict, finish: str | None = None) -> bytes:
    return event({**HEAD, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


CHAT = [chunk({"role": "assistant", "content": ""}), chunk({"content": "It rains."}), chunk({}, "stop"), DONE]
COMPLETION = [event({**HEAD, "choices": [{"index": 0, "text": "It rains.", "finish_reason": None}]}),
              event({**HEAD, "choices": [{"index": 0, "text": "", "finish_reason": "length"}]}), DONE]
TOOL_CALL = [chunk({"role": "assistant", "content": ""}),
             chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}),
             chunk({}, "tool_calls"), DONE]
DIFY = [event({"event": "agent_thought", "message_id": "m1", "tool": "get_weather",
               "tool_input": json.dumps({"get_weather": {"city": "Paris"}})}),
        event({"event": "agent_thought", "message_id": "m1", "tool": "get_weather", "observation": "rain"}),
        event({"event": "agent_message", "message_id": "m1", "answer": "It rains."}),
        event({"event": "message_end", "message_id": "m1", "metadata": {"usage": {"latency": 0.01}}})]


def answer(request: Request) -> Reply:
    if request.path.endswith("/chat-messages"):
        return Reply(pieces=DIFY)
    if request.path.endswith("/completions") and not request.path.endswith("/chat/completions"):
        return Reply(pieces=COMPLETION)
    body = json.loads(request.body)
    if "tools" in body and body.get("tool_choice") != "none":
        return Reply(pieces=TOOL_CALL)
    return Reply(pieces=CHAT)


@pytest.fixture(autouse=True)
def short_waits(monkeypatch):
    monkeypatch.setattr(stream_module, "DRAIN_TIMEOUT_S", 0.05)


def sent_ids(server: HostileServer) -> list[tuple[str, str]]:
    """(trace id, span id) of each request the server got, each checked against the W3C format."""
    ids = []
    for request in server.requests:
        match = TRACEPARENT.match(request.headers.get("traceparent", ""))
        assert match, request.headers
        trace_id, span_id = match.groups()
        assert set(trace_id) != {"0"} and set(span_id) != {"0"}
        ids.append((trace_id, span_id))
    return ids


def test_a_new_trace_context_is_random_valid_and_reads_as_a_traceparent():
    contexts = [new_trace_context() for _ in range(1000)]
    assert len({c.trace_id for c in contexts}) == 1000 and len({c.span_id for c in contexts}) == 1000
    for c in contexts[:50]:
        assert TRACEPARENT.match(c.traceparent()).groups() == (c.trace_id, c.span_id)
    assert TraceContext("a" * 32, "b" * 16).traceparent() == f"00-{'a' * 32}-{'b' * 16}-01"
    with pytest.raises(AttributeError):
        contexts[0].trace_id = "0" * 32  # type: ignore[misc]


async def test_every_request_of_every_path_carries_a_fresh_traceparent_that_its_record_keeps():
    with HostileServer(answer) as server:
        before_ns = time.time_ns()
        async with HttpClient() as client:
            chat = [await run_probe(client, endpoint(server.url, model="m")) for _ in range(2)]
            completions = await run_probe(client, endpoint(server.url, model="m", api="completions"))
            step = await run_agent_step(client, endpoint(server.url, probes=("agent",), tool_latency_s=0.0),
                                        ToolSet(), "m")
            dify = await run_dify_step(client, endpoint(server.url, api="dify", probes=("agent",)), ToolSet())
        after_ns = time.time_ns()
        sent = sent_ids(server)
    assert all(s.ok for s in (*chat, completions)) and step.ok and dify.ok, (step.error_text, dify.error_text)
    recorded = [(s.trace_id, s.span_id) for s in (*chat, completions)]
    recorded += [(c.trace_id, c.span_id) for c in (*step.calls, *dify.calls)]
    assert len(step.calls) == 2 and len(dify.calls) == 1
    assert recorded == sent  # in the order sent: each record names its own request's ids
    assert len(set(sent)) == len(sent)  # a span of its own each
    # a fresh trace per request, but the agent step's two calls share the step's (one trace, a span per call)
    assert len({t for t, _ in sent}) == len(sent) - 1
    assert step.calls[0].trace_id == step.calls[1].trace_id and step.calls[0].span_id != step.calls[1].span_id
    walls = [s.sent_wall_ns for s in (*chat, completions)] + [c.sent_wall_ns for c in (*step.calls, *dify.calls)]
    assert walls == sorted(walls) and before_ns <= walls[0] and walls[-1] <= after_ns
    # the send's wall clock sits beside the perf_counter start the times count from
    assert abs((chat[1].sent_wall_ns - chat[0].sent_wall_ns) - (chat[1].start_ns - chat[0].start_ns)) < 2_000_000


async def test_each_load_request_carries_its_own_traceparent_in_its_record_and_jsonl_line():
    with HostileServer(answer) as server:
        spec = StepSpec(index=0, endpoint=endpoint(server.url, model="m"), model="m", include_usage=True,
                        warmup_s=0.0, duration_s=0.2, concurrency=2)
        seen = []
        async with HttpClient() as client:
            run = StepRun(spec, client, LoopLag(), on_request=lambda record, sample: seen.append(record))
            await run.run()
        sent = sent_ids(server)
    assert len(seen) >= 2 and all(r.ok for r in seen)
    assert len(set(sent)) == len(sent)
    assert {(r.trace_id, r.span_id) for r in seen} <= set(sent)
    lines = [r.to_json(0, "concurrency", 2) for r in seen]
    assert [line["trace_id"] for line in lines] == [r.trace_id for r in seen]
    assert all(r.sent_wall_ns is not None for r in seen)


def test_recordings_keep_the_trace_fields_and_older_recordings_still_replay():
    sample = Sample(endpoint="e", wall_time=1.0, start_ns=5, ok=True, trace_id="ab" * 16, span_id="cd" * 8,
                    sent_wall_ns=1_700_000_000_000_000_000)
    step = AgentStep(endpoint="e", api="chat", wall_time=1.0, start_ns=5,
                     calls=(CallTrace("ab" * 16, "cd" * 8, 1), CallTrace("ef" * 16, "01" * 8, 2)))
    encoder = Encoder(text=lambda s: s)
    data = {"Sample": encoder.encode(sample), "AgentStep": encoder.encode(step)}
    decoder = Decoder(json.loads(json.dumps(encoder.layouts)), record_types([Sample, AgentStep]))
    assert decoder.decode("Sample", json.loads(json.dumps(data["Sample"]))) == sample
    assert decoder.decode("AgentStep", json.loads(json.dumps(data["AgentStep"]))) == step
    # a file written before the fields existed: their layouts lack them, and they read as None / ()
    new = {"trace_id", "span_id", "sent_wall_ns", "calls"}
    old_layouts = {name: [f for f in fields if f not in new] for name, fields in encoder.layouts.items()}
    keep = {name: [i for i, f in enumerate(fields) if f not in new] for name, fields in encoder.layouts.items()}
    old = Decoder(old_layouts, record_types([Sample, AgentStep]))
    old_sample = old.decode("Sample", [data["Sample"][i] for i in keep["Sample"]])
    old_step = old.decode("AgentStep", [data["AgentStep"][i] for i in keep["AgentStep"]])
    assert (old_sample.trace_id, old_sample.span_id, old_sample.sent_wall_ns) == (None, None, None)
    assert old_sample.start_ns == 5 and old_step.calls == () and old_step.start_ns == 5


@pytest.mark.parametrize("name", ["traceparent", "Traceparent", "TRACEPARENT"])
async def test_a_configured_traceparent_header_is_replaced_by_the_requests_own_never_sent_twice(name):
    """The rule (docs/measurement.md, "Trace context"): the measured stream's own traceparent replaces a
    `traceparent` in the endpoint's headers, under any spelling, so the server's span names the request lpxtop
    recorded; the other configured headers go out as they are."""
    configured = f"00-{'a' * 32}-{'b' * 16}-01"
    with HostileServer(answer) as server:
        async with HttpClient() as client:
            sample = await run_probe(client, endpoint(server.url, model="m",
                                                      headers=((name, configured), ("x-team", "infra"))))
        (request,) = server.requests
    assert sample.ok, sample.error_text
    lines = [line for line in request.header_lines if line.lower().startswith("traceparent:")]
    assert lines == [f"traceparent: 00-{sample.trace_id}-{sample.span_id}-01"]
    assert request.headers["x-team"] == "infra"
