"""What the simulated agent platforms share (a Dify app, a Dify workflow, a Coze bot): the request's truth
record, the checks every platform makes first, model rounds through the sim's scheduler, and writing events
with their send times recorded.

Each platform's model rounds run through the sim's scheduler (queueing, prefill, decode, like any request);
its tool takes `dify_tool_latency_ms` (one setting for every simulated platform). A record's events are
(t_ns, kind, n_tokens), t_ns taken just before the event's bytes were written (lpxtop/sim/records.py).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from lpxtop.engine.traces import parse_traceparent
from lpxtop.sim.records import SimRecord
from lpxtop.sim.scheduler import SimRequest
from lpxtop.sim.text import tokenize

if TYPE_CHECKING:
    from lpxtop.sim.faults import Faults
    from lpxtop.sim.server import SimServer

TOOL = "get_weather"
TOOL_INPUT = {"city": "Paris", "unit": "celsius"}
OBSERVATION = {"city": "Paris", "temperature_c": 18, "conditions": "light rain"}
SYSTEM = tokenize("You are an agent. Use the tools when they help. " * 8)


class Overloaded(Exception):
    """The engine took no more requests (or is stopping): the platform reports its own error."""


def sse(payload: Any, event: str | None = None) -> bytes:
    """One SSE event: `data:` with compact JSON (a string as is), after an `event:` line when named."""
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data}\n\n".encode()


def new_record(server: SimServer, request: web.Request, api: str,
               response_id: str | None = None) -> tuple[SimRecord, Faults]:
    """A request's truth record (with the trace id its traceparent carried), kept by the server, and the faults
    that apply to it."""
    faults = server.faults.take()
    parent = parse_traceparent(request.headers.get("traceparent"))
    record = SimRecord(response_id=response_id or str(uuid.uuid4()), model=server.config.model, api=api, stream=True,
                       t_received_ns=time.perf_counter_ns(), faults=tuple(faults.active()),
                       trace_id=parent.trace_id if parent else None)
    server.record_store.add(record)
    return record, faults


def authorized(request: web.Request, faults: Faults) -> bool:
    """The request carries the key the `api_key` fault asks for (or none is asked for)."""
    if not faults.api_key:
        return True
    given = request.headers.get("Authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {faults.api_key}".encode())


def reject(record: SimRecord, response: web.Response) -> web.Response:
    """Answer with an error status (or, for Coze, an error body), and record it."""
    record.status = response.status
    record.outcome = f"http_{response.status}"
    record.t_done_ns = time.perf_counter_ns()
    response.headers["X-Sim-Response-Id"] = record.response_id
    return response


async def read_json(request: web.Request) -> dict | None:
    """The request's JSON object, or None when it is not one."""
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return body if isinstance(body, dict) else None


async def serve_stream(request: web.Request, record: SimRecord,
                       stream_on: Callable[[web.StreamResponse], PlatformStream]) -> web.StreamResponse:
    """Open an event stream and run the platform stream `stream_on(response)` on it; a client that goes
    away is recorded, and the stream's engine work is aborted however it ends."""
    resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                                   "X-Sim-Response-Id": record.response_id})
    stream: PlatformStream | None = None
    try:
        await resp.prepare(request)
        stream = stream_on(resp)
        await stream.run()
    except ConnectionError:
        record.outcome = "client_disconnect"
    except asyncio.CancelledError:
        if record.outcome == "pending":
            record.outcome = "client_disconnect"
        raise
    finally:
        if stream is not None:
            stream.abort()
        record.t_done_ns = time.perf_counter_ns()
    return resp


class PlatformStream:
    """One platform request's stream: model rounds through the engine, events written and recorded."""

    def __init__(self, server: SimServer, record: SimRecord, faults: Faults, resp: web.StreamResponse) -> None:
        self.server = server
        self.config = server.config
        self.record = record
        self.faults = faults
        self.resp = resp
        self._current: SimRequest | None = None
        self.prompt_tokens = 0
        self.completion_tokens = 0

    async def send(self, kind: str, n_tokens: int, data: bytes) -> None:
        self.record.events.append((time.perf_counter_ns(), kind, n_tokens))
        await self.resp.write(data)

    async def model_round(self, prompt: list[str], tokens: int, delay_ms: float = 0.0) -> AsyncIterator[str]:
        """Run one model round through the sim's scheduler; yields "admitted", then "token" after each token."""
        sim_request = SimRequest(request_id=f"{self.record.response_id}-{len(prompt)}", prompt=prompt,
                                 max_tokens=tokens, target_tokens=tokens, finish_reason="stop",
                                 first_token_delay_s=delay_ms / 1000.0, events=asyncio.Queue())
        if not self.server.scheduler.submit(sim_request):
            raise Overloaded
        self._current = sim_request
        self.prompt_tokens += len(prompt)
        while True:
            event = await sim_request.events.get()
            if event[0] == "admitted":
                yield "admitted"
                continue
            if event[0] == "finished":
                raise Overloaded  # the server is stopping
            self.completion_tokens += event[1]
            yield "token"
            if event[3] is not None:
                self._current = None
                return

    async def run(self) -> None:
        """Write the platform's whole stream (each platform's own events)."""
        raise NotImplementedError

    async def run_tool(self) -> None:
        await asyncio.sleep(self.config.dify_tool_latency_ms / 1000.0)

    def finish(self, outcome: str = "ok") -> None:
        self.record.completion_tokens = self.completion_tokens
        self.record.prompt_tokens = self.prompt_tokens
        self.record.finish_reason = "stop" if outcome == "ok" else None
        self.record.outcome = outcome

    def abort(self) -> None:
        if self._current is not None:
            self.server.scheduler.abort(self._current)
            self._current = None
