"""A simulated Coze bot: `POST /v3/chat` with `"stream": true`.

The stream follows Coze's chat API (its documentation and SDK test captures): SSE `event:` and `data:`
lines, `conversation.chat.created` and `conversation.chat.in_progress` (Chat objects: `id`,
`conversation_id`, `bot_id`, `created_at` in whole seconds, `status`, `usage`), then Message objects:
the bot's model decides on a tool (a `conversation.message.completed` of type `function_call`, whose
content is `{"name", "arguments", "plugin_id", "api_id", "plugin_type"}`), the tool runs and answers (a
`tool_response` message), the answer streams as `conversation.message.delta` events of type `answer`
(one per token), its `conversation.message.completed` carries the whole text, a `verbose` message says
`generate_answer_finish`, a `follow_up` suggests a question, and `conversation.chat.completed` (with
`completed_at` and `usage`: `token_count`, `output_count`, `input_count`) is followed by `event: done`
with `data: "[DONE]"`.

Both model rounds run through the sim's scheduler (sim/platform.py), the tool takes `dify_tool_latency_ms`.
The record keeps `app["created_at"]` and `app["completed_at"]` as sent; event kinds "chat_created",
"chat_in_progress", "function_call", "tool_response", "answer", "answer_completed", "verbose",
"follow_up", "chat_completed", "done", "requires_action", "chat_failed".

Faults: `api_key` (HTTP 401 with Coze's `{"code": 4100, "msg"}` body), `fail_rate` (HTTP 200 with an
error body `{"code": 5000, "msg"}`, as Coze answers a chat it cannot start), `tool_fault:
"no_tool_call"` (the bot answers without a tool), `tool_fault: "requires_action"` (the tool is a
client-side plugin: `conversation.chat.requires_action` and the stream ends), `error_event_after_tokens`
(`conversation.chat.failed` after that many answer tokens), `first_token_delay_ms`.
"""

from __future__ import annotations

import json
import time
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


def coze_error(code: int, msg: str, status: int = 200) -> web.Response:
    # Coze's error body: {"code", "msg", "detail": {"logid"}}
    return web.json_response({"code": code, "msg": msg, "detail": {"logid": "20250101000000LPXTOPSIM"}},
                             status=status)


class CozeBot:
    """The /v3/chat handler of one SimServer."""

    def __init__(self, server: SimServer) -> None:
        self.server = server

    def _id(self) -> str:
        return str(7_300_000_000_000_000_000 + self.server.rng.randrange(10**17))

    async def chat(self, request: web.Request) -> web.StreamResponse:
        server = self.server
        record, faults = new_record(server, request, "coze", self._id())
        if not authorized(request, faults):
            return reject(record, coze_error(4100, "authentication is invalid", status=401))
        body = await read_json(request)
        if body is None:
            return reject(record, coze_error(4000, "The request body is not valid JSON."))
        if not isinstance(body.get("bot_id"), str) or not body["bot_id"]:
            return reject(record, coze_error(4000, "bot_id is required"))
        if body.get("stream") is not True:
            return reject(record, coze_error(4000, "lpxtop sim: only streamed chats are simulated"))
        if faults.fail_rate > 0 and server.rng.random() < faults.fail_rate:
            response = reject(record, coze_error(5000, "The bot could not start the chat (lpxtop sim fail_rate)."))
            record.outcome = "error_body"
            return response
        conversation_id = self._id()
        return await serve_stream(request, record,
                                  lambda resp: _CozeStream(server, record, faults, resp, body, conversation_id))


class _CozeStream(PlatformStream):
    """One chat: two model rounds around a tool, written as Coze's events."""

    def __init__(self, server: SimServer, record: Any, faults: Any, resp: web.StreamResponse, body: dict,
                 conversation_id: str) -> None:
        super().__init__(server, record, faults, resp)
        self.bot_id = body["bot_id"]
        messages = body.get("additional_messages")
        first = messages[0] if isinstance(messages, list) and messages and isinstance(messages[0], dict) else {}
        self.question = first.get("content") if isinstance(first.get("content"), str) else ""
        self.conversation_id = conversation_id
        self.created_at = int(time.time())
        self.record.app["created_at"] = self.created_at
        self._messages = 0
        self._answer_tokens = 0
        self.answer: list[str] = []

    def _chat(self, status: str, **extra: Any) -> dict:
        return {"id": self.record.response_id, "conversation_id": self.conversation_id, "bot_id": self.bot_id,
                "created_at": self.created_at, "last_error": {"code": 0, "msg": ""}, "status": status,
                "usage": {"token_count": 0, "output_count": 0, "input_count": 0}, "section_id": self.conversation_id,
                **extra}

    def _message(self, kind: str, content: str, message_id: str | None = None) -> dict:
        if message_id is None:
            self._messages += 1
            message_id = str(int(self.record.response_id) + self._messages)
        return {"id": message_id, "conversation_id": self.conversation_id, "bot_id": self.bot_id, "role": "assistant",
                "type": kind, "content": content, "content_type": "text", "chat_id": self.record.response_id,
                "section_id": self.conversation_id}

    async def run(self) -> None:
        faults = self.faults
        await self.send("chat_created", 0, sse(self._chat("created"), "conversation.chat.created"))
        await self.send("chat_in_progress", 0, sse(self._chat("in_progress"), "conversation.chat.in_progress"))
        prompt = SYSTEM + tokenize(self.question)
        with_tool = faults.tool_fault != "no_tool_call"
        try:
            async for step in self.model_round(prompt, self.config.dify_decision_tokens if with_tool
                                               else self.config.dify_answer_tokens, faults.first_token_delay_ms):
                if step == "token" and not with_tool and await self._answer_token():
                    return
            if with_tool:
                if faults.tool_fault == "requires_action":
                    await self._requires_action()
                    return
                call = {"name": TOOL, "arguments": TOOL_INPUT, "plugin_id": 7_400_000_000_000_000_001,
                        "api_id": 7_400_000_000_000_000_002, "plugin_type": 1}
                await self.send("function_call", 0, sse(self._message("function_call", json.dumps(call)),
                                                        "conversation.message.completed"))
                await self.run_tool()
                await self.send("tool_response", 0, sse(self._message("tool_response", json.dumps(OBSERVATION)),
                                                        "conversation.message.completed"))
                prompt2 = prompt + tokenize(json.dumps(call)) + tokenize(json.dumps(OBSERVATION))
                async for step in self.model_round(prompt2, self.config.dify_answer_tokens):
                    if step == "token" and await self._answer_token():
                        return
        except Overloaded:
            await self._failed(5000, "The model is overloaded (lpxtop sim).")
            return
        answer_id = str(int(self.record.response_id) + 1000)
        await self.send("answer_completed", 0, sse(self._message("answer", "".join(self.answer), answer_id),
                                                   "conversation.message.completed"))
        verbose = json.dumps({"msg_type": "generate_answer_finish", "data": "", "from_module": None, "from_unit": None})
        await self.send("verbose", 0, sse(self._message("verbose", verbose), "conversation.message.completed"))
        await self.send("follow_up", 0, sse(self._message("follow_up", "Will it rain tomorrow too?"),
                                            "conversation.message.completed"))
        completed_at = int(time.time())
        self.record.app["completed_at"] = completed_at
        usage = {"token_count": self.prompt_tokens + self.completion_tokens, "output_count": self.completion_tokens,
                 "input_count": self.prompt_tokens}
        self.finish()
        await self.send("chat_completed", 0, sse(self._chat("completed", completed_at=completed_at, usage=usage),
                                                 "conversation.chat.completed"))
        await self.send("done", 0, sse('"[DONE]"', "done"))
        await self.resp.write_eof()

    async def _answer_token(self) -> bool:
        """Send one answer token; True when an injected failure ended the chat instead."""
        limit = self.faults.error_event_after_tokens
        if limit is not None and self._answer_tokens >= limit:
            await self._failed(5000, "Injected failure (lpxtop sim error_event_after_tokens).")
            return True
        self._answer_tokens += 1
        text = self.server.words.token()
        self.answer.append(text)
        answer_id = str(int(self.record.response_id) + 1000)
        await self.send("answer", 1, sse(self._message("answer", text, answer_id), "conversation.message.delta"))
        return False

    async def _requires_action(self) -> None:
        action = {"type": "submit_tool_outputs", "submit_tool_outputs": {"tool_calls": [
            {"id": "BUJJF0dAQ0NAEBVeQkVKEV5HFURFXhFCEhFeFxdHShcSQEtFSxY", "type": "function",
             "function": {"name": TOOL, "arguments": json.dumps(TOOL_INPUT)}}]}}
        self.finish("requires_action")
        await self.send("requires_action", 0, sse(self._chat("requires_action", required_action=action),
                                                  "conversation.chat.requires_action"))
        await self.send("done", 0, sse('"[DONE]"', "done"))
        await self.resp.write_eof()

    async def _failed(self, code: int, msg: str) -> None:
        failed_at = int(time.time())
        self.finish("error_event")
        await self.send("chat_failed", 0, sse(self._chat("failed", failed_at=failed_at,
                                                         last_error={"code": code, "msg": msg}),
                                              "conversation.chat.failed"))
        await self.resp.write_eof()
