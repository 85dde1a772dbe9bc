"""A simulated Dify agent app: `POST /v1/chat-messages` with `response_mode: streaming`.

The stream follows Dify's agent-chat apps (its task pipeline and function-calling agent runner):
`event: ping` first, then per reasoning round an `agent_thought` when the round starts, one when the
model has decided on a tool (`tool`, `tool_input` as `{"tool_name": {arguments}}`), one with the tool's
`observation`; the answer streamed as `agent_message` events (one per token), a closing `agent_thought`
with the answer as its thought, and `message_end` whose `metadata.usage.latency` is the app's own time
in seconds (from the request's arrival to just before this event is written). Errors come as
`{"event": "error", "status", "code", "message"}`.

Both model rounds run through the sim's engine (queueing, prefill, decode, like any request); the tool
takes `dify_tool_latency_ms`. Faults: `api_key` (HTTP 401 as Dify answers it), `fail_rate` (HTTP 500),
`tool_fault: "no_tool_call"` (the app answers without a tool), `error_event_after_tokens` (an error
event after that many answer tokens), `first_token_delay_ms` (round 1's first token later).
Truth record kinds: "ping", "agent_thought", "tool_decision", "observation", "answer", "message_end",
"error".
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from aiohttp import web

from lpxtop.sim.engine import SimRequest
from lpxtop.sim.records import SimRecord
from lpxtop.sim.text import tokenize

if TYPE_CHECKING:
    from lpxtop.sim.server import SimServer

DIFY_TOOL = "get_weather"
DIFY_TOOL_INPUT = {"city": "Paris", "unit": "celsius"}
DIFY_OBSERVATION = {"city": "Paris", "temperature_c": 18, "conditions": "light rain"}
_SYSTEM = tokenize("You are an agent. Use the tools when they help. " * 8)


def _error(status: int, code: str, message: str) -> web.Response:
    # Dify's error body: {"code", "message", "status"}
    return web.json_response({"code": code, "message": message, "status": status}, status=status)


def _sse(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()


class DifyApp:
    """The /v1/chat-messages handler of one SimServer."""

    def __init__(self, server: SimServer) -> None:
        self.server = server
        self.config = server.config

    async def chat_messages(self, request: web.Request) -> web.StreamResponse:
        server, cfg = self.server, self.config
        faults = server.faults.take()
        record = SimRecord(response_id=str(uuid.uuid4()), model=cfg.model, api="dify", stream=True,
                           t_received_ns=time.perf_counter_ns(), faults=tuple(faults.active()))
        server.record_store.add(record)
        if faults.api_key:
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {faults.api_key}".encode()):
                return self._reject(record, _error(401, "unauthorized", "Access token is invalid"))
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return self._reject(record, _error(400, "invalid_param", "The request body is not valid JSON."))
        if not isinstance(body, dict) or not isinstance(body.get("query"), str):
            return self._reject(record, _error(400, "invalid_param", "query is required"))
        if body.get("response_mode") != "streaming":
            # what Dify answers for an agent app asked in blocking mode
            return self._reject(record, _error(400, "app_unavailable", "Agent Chat App does not support blocking mode"))
        if faults.fail_rate > 0 and server.rng.random() < faults.fail_rate:
            return self._reject(record, _error(500, "internal_server_error", "Internal Server Error (lpxtop sim fail_rate)."))
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                                       "X-Sim-Response-Id": record.response_id})
        stream = _DifyStream(self, request, resp, record, faults, body)
        try:
            await resp.prepare(request)
            await stream.run()
        except ConnectionError:
            record.outcome = "client_disconnect"
        except asyncio.CancelledError:
            if record.outcome == "pending":
                record.outcome = "client_disconnect"
            raise
        finally:
            stream.abort()
            record.t_done_ns = time.perf_counter_ns()
        return resp

    def _reject(self, record: SimRecord, response: web.Response) -> web.Response:
        record.status = response.status
        record.outcome = f"http_{response.status}"
        record.t_done_ns = time.perf_counter_ns()
        response.headers["X-Sim-Response-Id"] = record.response_id
        return response


class _DifyStream:
    """One app message: two model rounds around a tool, written as Dify's events."""

    def __init__(self, app: DifyApp, request: web.Request, resp: web.StreamResponse, record: SimRecord,
                 faults: Any, body: dict) -> None:
        self.server = app.server
        self.config = app.config
        self.request = request
        self.resp = resp
        self.record = record
        self.faults = faults
        self.query = body["query"]
        self.conversation_id = body.get("conversation_id") or str(uuid.uuid4())
        self.task_id = str(uuid.uuid4())
        self.created_at = int(time.time())
        self._current: SimRequest | None = None
        self._answer_tokens = 0
        self._answer: list[str] = []
        self._prompt_tokens = 0
        self._completion_tokens = 0

    def _head(self, event: str) -> dict[str, Any]:
        return {"event": event, "conversation_id": self.conversation_id, "message_id": self.record.response_id,
                "created_at": self.created_at, "task_id": self.task_id}

    async def _send(self, kind: str, n_tokens: int, data: bytes) -> None:
        self.record.events.append((time.perf_counter_ns(), kind, n_tokens))
        await self.resp.write(data)

    async def _thought(self, kind: str, position: int, thought_id: str, **fields: Any) -> None:
        payload = {**self._head("agent_thought"), "id": thought_id, "position": position, "thought": "",
                   "observation": "", "tool": "", "tool_labels": {}, "tool_input": "", "message_files": []}
        payload.update(fields)
        await self._send(kind, 0, _sse(payload))

    async def _round(self, prompt: list[str], tokens: int, delay_ms: float = 0.0):
        """Run one model round through the sim's engine; yields after each generated token."""
        sim_request = SimRequest(request_id=f"{self.record.response_id}-{len(prompt)}", prompt=prompt,
                                 max_tokens=tokens, target_tokens=tokens, finish_reason="stop",
                                 first_token_delay_s=delay_ms / 1000.0, events=asyncio.Queue())
        if not self.server.engine.submit(sim_request):
            raise _Overloaded
        self._current = sim_request
        self._prompt_tokens += len(prompt)
        while True:
            event = await sim_request.events.get()
            if event[0] == "admitted":
                yield "admitted"
                continue
            if event[0] == "finished":
                raise _Overloaded  # the server is stopping
            self._completion_tokens += event[1]
            yield "token"
            if event[3] is not None:
                self._current = None
                return

    async def run(self) -> None:
        cfg, faults = self.config, self.faults
        await self._send("ping", 0, b"event: ping\n\n")
        prompt = _SYSTEM + tokenize(self.query)
        first_id = str(uuid.uuid4())
        with_tool = faults.tool_fault != "no_tool_call"
        try:
            async for step in self._round(prompt, cfg.dify_decision_tokens if with_tool else cfg.dify_answer_tokens,
                                          faults.first_token_delay_ms):
                if step == "admitted":
                    await self._thought("agent_thought", 1, first_id)
                elif not with_tool and await self._answer_token():
                    return
            if with_tool:
                tool_input = json.dumps({DIFY_TOOL: DIFY_TOOL_INPUT}, ensure_ascii=False)
                await self._thought("tool_decision", 1, first_id, tool=DIFY_TOOL, tool_input=tool_input,
                                    tool_labels={DIFY_TOOL: {"en_US": "Weather"}})
                await asyncio.sleep(cfg.dify_tool_latency_ms / 1000.0)
                observation = json.dumps({DIFY_TOOL: json.dumps(DIFY_OBSERVATION)}, ensure_ascii=False)
                await self._thought("observation", 1, first_id, tool=DIFY_TOOL, tool_input=tool_input,
                                    observation=observation)
                second_id = str(uuid.uuid4())
                prompt2 = prompt + tokenize(tool_input) + tokenize(observation)
                async for step in self._round(prompt2, cfg.dify_answer_tokens):
                    if step == "admitted":
                        await self._thought("agent_thought", 2, second_id)
                    elif await self._answer_token():
                        return
                await self._thought("agent_thought", 2, second_id, thought="".join(self._answer).strip())
        except _Overloaded:
            await self._send("error", 0, _sse({**self._head("error"), "status": 503, "code": "server_busy",
                                              "message": "The model is overloaded (lpxtop sim)."}))
            self.record.outcome = "error_event"
            await self.resp.write_eof()
            return
        usage = {"prompt_tokens": self._prompt_tokens, "completion_tokens": self._completion_tokens,
                 "total_tokens": self._prompt_tokens + self._completion_tokens, "currency": "USD",
                 "total_price": "0"}
        usage["latency"] = (time.perf_counter_ns() - self.record.t_received_ns) / 1e9
        end = {**self._head("message_end"), "id": self.record.response_id,
               "metadata": {"usage": usage}, "files": None}
        self.record.completion_tokens = self._completion_tokens
        self.record.prompt_tokens = self._prompt_tokens
        self.record.finish_reason = "stop"
        await self._send("message_end", 0, _sse(end))
        self.record.outcome = "ok"
        await self.resp.write_eof()

    async def _answer_token(self) -> bool:
        """Send one answer token; True when an injected error ended the stream instead."""
        limit = self.faults.error_event_after_tokens
        if limit is not None and self._answer_tokens >= limit:
            await self._send("error", 0, _sse({**self._head("error"), "status": 500, "code": "internal_server_error",
                                              "message": "Injected error (lpxtop sim error_event_after_tokens)."}))
            self.record.outcome = "error_event"
            await self.resp.write_eof()
            return True
        self._answer_tokens += 1
        text = self.server.words.token()
        self._answer.append(text)
        await self._send("answer", 1, _sse({**self._head("agent_message"), "id": self.record.response_id,
                                            "answer": text}))
        return False

    def abort(self) -> None:
        if self._current is not None:
            self.server.engine.abort(self._current)
            self._current = None


class _Overloaded(Exception):
    pass
