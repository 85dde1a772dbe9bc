"""A simulated Dify agent app: `POST /v1/chat-messages` with `response_mode: streaming`.

The stream follows Dify's agent-chat apps (its task pipeline and function-calling agent runner):
`event: ping` first, then per reasoning round an `agent_thought` when the round starts, one when the
model has decided on a tool (`tool`, `tool_input` as `{"tool_name": {arguments}}`), one with the tool's
`observation`; the answer streamed as `agent_message` events (one per token), a closing `agent_thought`
with the answer as its thought, and `message_end` whose `metadata.usage` holds the app's own `latency`
in seconds (from the request's arrival to just before this event is written) and, as newer Dify
versions send them, `time_to_first_token` and `time_to_generate` of its last model round (seconds, from
the round's submission to its first token, and from its first token to its last). Errors come as
`{"event": "error", "status", "code", "message"}`.

Both model rounds run through the sim's scheduler (sim/platform.py). Faults: `api_key` (HTTP 401 as Dify
answers it), `fail_rate` (HTTP 500), `tool_fault: "no_tool_call"` (the app answers without a tool),
`error_event_after_tokens` (an error event after that many answer tokens), `first_token_delay_ms`
(round 1's first token later). Truth record kinds: "ping", "agent_thought", "tool_decision",
"observation", "answer", "message_end", "error"; `record.app` holds the usage figures sent.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from aiohttp import web

from lpxtop.sim.platform import (
    OBSERVATION,
    SYSTEM,
    TOOL,
    TOOL_INPUT,
    Overloaded,
    PlatformStream,
    authorized,
    new_record,
    read_json,
    reject,
    serve_stream,
    sse,
)
from lpxtop.sim.text import tokenize

if TYPE_CHECKING:
    from lpxtop.sim.server import SimServer


def dify_error(status: int, code: str, message: str) -> web.Response:
    # Dify's error body: {"code", "message", "status"}
    return web.json_response({"code": code, "message": message, "status": status}, status=status)


class DifyApp:
    """The /v1/chat-messages handler of one SimServer."""

    def __init__(self, server: SimServer) -> None:
        self.server = server

    async def chat_messages(self, request: web.Request) -> web.StreamResponse:
        server = self.server
        record, faults = new_record(server, request, "dify")
        if not authorized(request, faults):
            return reject(record, dify_error(401, "unauthorized", "Access token is invalid"))
        body = await read_json(request)
        if body is None:
            return reject(record, dify_error(400, "invalid_param", "The request body is not valid JSON."))
        if not isinstance(body.get("query"), str):
            return reject(record, dify_error(400, "invalid_param", "query is required"))
        if body.get("response_mode") != "streaming":
            # what Dify answers for an agent app asked in blocking mode
            return reject(record, dify_error(400, "app_unavailable", "Agent Chat App does not support blocking mode"))
        if faults.fail_rate > 0 and server.rng.random() < faults.fail_rate:
            return reject(record, dify_error(500, "internal_server_error",
                                             "Internal Server Error (lpxtop sim fail_rate)."))
        return await serve_stream(request, record, lambda resp: _DifyStream(server, record, faults, resp, body))


class _DifyStream(PlatformStream):
    """One app message: two model rounds around a tool, written as Dify's events."""

    def __init__(self, server: SimServer, record: Any, faults: Any, resp: web.StreamResponse, body: dict) -> None:
        super().__init__(server, record, faults, resp)
        self.query = body["query"]
        self.conversation_id = body.get("conversation_id") or str(uuid.uuid4())
        self.task_id = str(uuid.uuid4())
        self.created_at = int(time.time())
        self._answer_tokens = 0
        self._answer: list[str] = []
        self._round_start_ns = 0
        self._first_ns: int | None = None
        self._last_ns: int | None = None

    def _head(self, event: str) -> dict[str, Any]:
        return {"event": event, "conversation_id": self.conversation_id, "message_id": self.record.response_id,
                "created_at": self.created_at, "task_id": self.task_id}

    async def _thought(self, kind: str, position: int, thought_id: str, **fields: Any) -> None:
        payload = {**self._head("agent_thought"), "id": thought_id, "position": position, "thought": "",
                   "observation": "", "tool": "", "tool_labels": {}, "tool_input": "", "message_files": []}
        payload.update(fields)
        await self.send(kind, 0, sse(payload))

    async def run(self) -> None:
        faults = self.faults
        await self.send("ping", 0, b"event: ping\n\n")
        prompt = SYSTEM + tokenize(self.query)
        first_id = str(uuid.uuid4())
        with_tool = faults.tool_fault != "no_tool_call"
        try:
            self._round_start_ns = time.perf_counter_ns()
            async for step in self.model_round(prompt, self.config.dify_decision_tokens if with_tool
                                               else self.config.dify_answer_tokens, faults.first_token_delay_ms):
                if step == "admitted":
                    await self._thought("agent_thought", 1, first_id)
                elif not with_tool and await self._answer_token():
                    return
            if with_tool:
                tool_input = json.dumps({TOOL: TOOL_INPUT}, ensure_ascii=False)
                await self._thought("tool_decision", 1, first_id, tool=TOOL, tool_input=tool_input,
                                    tool_labels={TOOL: {"en_US": "Weather"}})
                await self.run_tool()
                observation = json.dumps({TOOL: json.dumps(OBSERVATION)}, ensure_ascii=False)
                await self._thought("observation", 1, first_id, tool=TOOL, tool_input=tool_input,
                                    observation=observation)
                second_id = str(uuid.uuid4())
                prompt2 = prompt + tokenize(tool_input) + tokenize(observation)
                self._round_start_ns = time.perf_counter_ns()
                self._first_ns = self._last_ns = None
                async for step in self.model_round(prompt2, self.config.dify_answer_tokens):
                    if step == "admitted":
                        await self._thought("agent_thought", 2, second_id)
                    elif await self._answer_token():
                        return
                await self._thought("agent_thought", 2, second_id, thought="".join(self._answer).strip())
        except Overloaded:
            await self.send("error", 0, sse({**self._head("error"), "status": 503, "code": "server_busy",
                                             "message": "The model is overloaded (lpxtop sim)."}))
            self.record.outcome = "error_event"
            await self.resp.write_eof()
            return
        usage: dict[str, Any] = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                                 "total_tokens": self.prompt_tokens + self.completion_tokens, "currency": "USD",
                                 "total_price": "0"}
        if self._first_ns is not None and self._last_ns is not None:
            usage["time_to_first_token"] = (self._first_ns - self._round_start_ns) / 1e9
            usage["time_to_generate"] = (self._last_ns - self._first_ns) / 1e9
        usage["latency"] = (time.perf_counter_ns() - self.record.t_received_ns) / 1e9
        self.record.app = {k: usage[k] for k in ("latency", "time_to_first_token", "time_to_generate") if k in usage}
        end = {**self._head("message_end"), "id": self.record.response_id, "metadata": {"usage": usage}, "files": None}
        self.finish()
        await self.send("message_end", 0, sse(end))
        await self.resp.write_eof()

    async def _answer_token(self) -> bool:
        """Send one answer token; True when an injected error ended the stream instead."""
        limit = self.faults.error_event_after_tokens
        if limit is not None and self._answer_tokens >= limit:
            await self.send("error", 0, sse({**self._head("error"), "status": 500, "code": "internal_server_error",
                                             "message": "Injected error (lpxtop sim error_event_after_tokens)."}))
            self.record.outcome = "error_event"
            await self.resp.write_eof()
            return True
        self._answer_tokens += 1
        text = self.server.words.token()
        self._answer.append(text)
        now = time.perf_counter_ns()
        self._first_ns = self._first_ns or now
        self._last_ns = now
        await self.send("answer", 1, sse({**self._head("agent_message"), "id": self.record.response_id,
                                          "answer": text}))
        return False
