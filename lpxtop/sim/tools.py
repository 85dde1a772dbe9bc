"""Tool calls in the simulated server: a chat request with `tools` is answered with a streamed tool call.

What the sim answers (`plan_tool_call`):
- `tool_choice` "none", no tools, or (with "auto") a conversation whose last message is a tool's result:
  ordinary text, as before;
- "required", "auto" or a named function: a call of the named function (or of the first tool), with
  arguments made from the tool's JSON schema (`city` is "Zürich", so the arguments hold a `\\u00fc` escape
  that the character-wise splitting cuts through now and then).

The call is streamed one chunk per generated token (each chunk one token event, timed by the sim's
engine like text), its arguments split every `tool_chars_per_token` characters. `tool_call_shape` picks
how the deltas look (SimConfig):
- "vllm" (the default; vLLM 0.32's, see tests/fixtures/toolcalls/vllm-0.32.0-*.txt): the first delta has
  `id`, `type`, `index` and `name` (no `arguments` key) beside `"content": null`, the others `index` and
  an arguments fragment, and a last chunk `delta: {}` carries the finish reason ("tool_calls" for
  `required`, "stop" for a named function, as vLLM sends them);
- "openai" (OpenAI's API): the first delta has `id`, `type`, `name` and `"arguments": ""`;
- "name_with_args" (llama.cpp; vLLM's named choice): the first delta carries the first fragment too;
- "repeated" (llama.cpp before PR 13800): every delta repeats `id`, `type` and `name`;
- "placeholder": the naming delta has `"arguments": "{}"`, then the real arguments follow;
- "parallel": two calls, their deltas side by side in each chunk (`index` 0 and 1);
- "whole" (Ollama): each call complete in one chunk.
Except for "vllm", the last chunk carries `finish_reason: "tool_calls"` ("length" when max_tokens cut the
arguments).

Faults (`tool_fault`, one-shot or standing, or `tool_fault_rate` for a random share): "no_tool_call"
(text instead), "bad_tool_args" (the arguments duplicated: `{...}{...}`, a parser bug servers have had),
"tool_args_schema" (valid JSON that breaks the schema: a required property missing, an enum violated).
The truth record marks every tool-call chunk as kind "tool_call" (one token each).
"""

from __future__ import annotations

import json
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lpxtop.sim.streaming import StreamSession
from lpxtop.sim.text import tokenize
from lpxtop.sim.toolcall_options import TOOL_FAULTS
from lpxtop.sim.wire import ChunkMaker

if TYPE_CHECKING:
    from lpxtop.sim.config import SimConfig
    from lpxtop.sim.faults import Faults

TOOL_CALL_KIND = "tool_call"  # the truth record's event kind for a tool-call chunk

_STRING_VALUES = {"city": "Zürich", "query": "streaming tool calls", "timezone": "Europe/Paris",
                  "location": "Zürich", "unit": "celsius"}


@dataclass
class ToolCallPlan:
    """The tool call(s) the sim will stream: per chunk, the `delta.tool_calls` list to send."""

    calls: list[tuple[str, str]]  # (name, arguments text)
    chunks: list[list[dict[str, Any]]]
    fault: str | None = None
    ids: list[str] = field(default_factory=list)
    shape: str = "vllm"
    named: bool = False  # a named tool choice (vLLM then finishes with "stop")

    @property
    def finish_only_chunk(self) -> bool:
        """vLLM sends the finish reason in a chunk of its own, `delta: {}`, after the last fragment."""
        return self.shape == "vllm"

    def wire_reason(self, engine_reason: str) -> str:
        if engine_reason != "stop":
            return engine_reason
        return "stop" if self.named and self.shape == "vllm" else "tool_calls"

    def target(self, max_tokens: int) -> tuple[int, str]:
        """Tokens to generate and the engine's finish reason: one token per chunk, cut by max_tokens.

        "stop" for a whole call, as vLLM counts it in its metrics; the last chunk says "tool_calls".
        """
        tokens = len(self.chunks) + (1 if self.finish_only_chunk else 0)
        if tokens <= max_tokens:
            return tokens, "stop"
        return max_tokens, "length"


def plan_tool_call(body: dict, config: SimConfig, faults: Faults, rng: random.Random) -> ToolCallPlan | None:
    """The tool call to answer `body` with, or None for a text answer."""
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    choice = body.get("tool_choice", "auto")
    if not tools or choice == "none":
        return None
    messages = body.get("messages")
    last_role = messages[-1].get("role") if isinstance(messages, list) and messages and isinstance(messages[-1], dict) else None
    if choice == "auto" and last_role == "tool":
        return None  # the model answers with the tool's result
    fault = faults.tool_fault
    if fault is None and config.tool_fault_rate > 0 and rng.random() < config.tool_fault_rate:
        fault = rng.choice(TOOL_FAULTS)
    if fault == "no_tool_call":
        return None
    chosen = _chosen_tools(tools, choice, config.tool_call_shape)
    calls = []
    for tool in chosen:
        function = tool["function"]
        schema = function.get("parameters") if isinstance(function.get("parameters"), dict) else {}
        args = _schema_breaking_arguments(schema) if fault == "tool_args_schema" else _arguments_for(schema)
        text = json.dumps(args)  # ASCII: "Zürich" becomes "Z\u00fcrich", an escape to split
        if fault == "bad_tool_args":
            text = text + text
        calls.append((str(function.get("name", "tool")), text))
    ids = [f"chatcmpl-tool-{uuid.uuid4().hex[:16]}" for _ in calls]
    chunks = _chunks(calls, ids, config.tool_call_shape, max(1, config.tool_chars_per_token))
    return ToolCallPlan(calls=calls, chunks=chunks, fault=fault, ids=ids, shape=config.tool_call_shape,
                        named=isinstance(choice, dict))


def tool_prompt_tokens(body: dict) -> list[str]:
    """Extra prompt tokens for the tool definitions and the tool calls in the conversation (the template's)."""
    extra: list[str] = []
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        extra += tokenize(json.dumps(tools))
    for message in body.get("messages") or []:
        if isinstance(message, dict) and isinstance(message.get("tool_calls"), list):
            extra += tokenize(json.dumps(message["tool_calls"]))
    return extra


def _chosen_tools(tools: list[dict], choice: Any, shape: str) -> list[dict]:
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        named = [t for t in tools if t["function"].get("name") == name]
        if named:
            return named[:1]
    if shape == "parallel":
        return tools[:2]
    return tools[:1]


def _arguments_for(schema: dict, depth: int = 0) -> Any:
    """A value that satisfies the small schema subset tools use."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if kind == "object" or (kind is None and "properties" in schema):
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        if depth > 4:
            return {}
        return {name: _value_for(name, sub, depth) for name, sub in properties.items() if isinstance(sub, dict)}
    return _value_for("", schema, depth)


def _value_for(name: str, schema: dict, depth: int) -> Any:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if kind == "integer":
        low, high = schema.get("minimum"), schema.get("maximum")
        return max(int(low) if isinstance(low, (int, float)) else 3, min(3, int(high) if isinstance(high, (int, float)) else 3))
    if kind == "number":
        return 1.5
    if kind == "boolean":
        return True
    if kind == "array":
        items = schema.get("items") if isinstance(schema.get("items"), dict) else {"type": "string"}
        return [_value_for(name, items, depth + 1)]
    if kind == "object":
        return _arguments_for(schema, depth + 1)
    return _STRING_VALUES.get(name, "lpxtop")


def _schema_breaking_arguments(schema: dict) -> Any:
    """Valid JSON that the schema refuses: required properties left out, an enum or a type broken."""
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = [r for r in schema.get("required") or [] if isinstance(r, str)]
    args = {name: _value_for(name, sub, 1) for name, sub in properties.items() if isinstance(sub, dict)}
    for name in required:
        args.pop(name, None)
    for name, sub in properties.items():
        if isinstance(sub, dict) and isinstance(sub.get("enum"), list):
            args[name] = "not-one-of-them"
            break
    else:
        if not required:
            first = next(iter(properties), None)
            args = {first: {"wrong": "type"}} if first else ["not", "an", "object"]
    return args


def _split(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def _chunks(calls: list[tuple[str, str]], ids: list[str], shape: str, size: int) -> list[list[dict[str, Any]]]:
    def naming(i: int, arguments: str) -> dict[str, Any]:
        if shape == "vllm" and not arguments:
            return {"id": ids[i], "type": "function", "index": i, "function": {"name": calls[i][0]}}
        return {"index": i, "id": ids[i], "type": "function", "function": {"name": calls[i][0], "arguments": arguments}}

    def fragment(i: int, arguments: str) -> dict[str, Any]:
        if shape == "repeated":
            return naming(i, arguments)
        return {"index": i, "function": {"arguments": arguments}}

    if shape == "whole":
        return [[naming(i, text) for i, (_, text) in enumerate(calls)]]
    pieces = [_split(text, size) for _, text in calls]
    if shape == "parallel":
        out: list[list[dict[str, Any]]] = [[naming(i, "") for i in range(len(calls))]]
        for step in range(max(len(p) for p in pieces)):
            out.append([fragment(i, p[step]) for i, p in enumerate(pieces) if step < len(p)])
        return out
    out = []
    for i, parts in enumerate(pieces):
        if shape == "name_with_args":
            out.append([naming(i, parts[0])])
            parts = parts[1:]
        else:
            out.append([naming(i, "{}" if shape == "placeholder" else "")])
        out += [[fragment(i, part)] for part in parts]
    return out


def tool_chunk(chunks: ChunkMaker, tool_calls: list[dict[str, Any]], finish_reason: str | None,
               content_null: bool = False) -> dict[str, Any]:
    """One chat.completion.chunk carrying tool-call deltas (none: a finish-only chunk), in vLLM's key order."""
    delta: dict[str, Any] = {"content": None} if content_null and tool_calls else {}
    if tool_calls:
        delta["tool_calls"] = tool_calls
    choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    if finish_reason is not None:
        choice["stop_reason"] = None
    choice["token_ids"] = None
    return {"id": chunks.response_id, "object": chunks.object, "created": chunks.created, "model": chunks.model,
            "choices": [choice]}


class ToolCallSession(StreamSession):
    """A StreamSession whose tokens are tool-call chunks (see the module docstring)."""

    def __init__(self, *args: Any, plan: ToolCallPlan, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.plan = plan

    async def _stream_events(self) -> None:
        cfg = self.config
        if cfg.role_chunk_at == "received":
            await self._send_role()
        sent = 0
        while True:
            event = await self.sim_request.events.get()
            if event[0] == "admitted":
                if cfg.role_chunk_at == "admitted":
                    await self._send_role()
                continue
            if event[0] == "finished":
                self._cut(outcome="aborted")
                return
            _, n, _, finish = event
            await self._send_role()
            for i in range(n):
                if await self._fault_ends_stream():
                    return
                last = finish is not None and i == n - 1
                deltas = self.plan.chunks[sent] if sent < len(self.plan.chunks) else []
                sent += 1
                reason = self.plan.wire_reason(finish) if last else None
                chunk = tool_chunk(self.chunks, deltas, reason, content_null=self.plan.shape == "vllm")
                # a finish-only chunk (`delta: {}`) carries no token: recorded as "finish" with 0 tokens
                await self._send(TOOL_CALL_KIND if deltas else "finish", 1 if deltas else 0, chunk)
                self._sent_tokens += 1
            if finish is not None:
                self.record.finish_reason = self.plan.wire_reason(finish)
                break
        completion = self.sim_request.generated
        self.record.completion_tokens = completion
        if self.include_usage:
            if await self._fault_ends_stream():
                return
            await self._send("usage", 0, self.chunks.usage(self.record.prompt_tokens, completion))
        if await self._fault_ends_stream():
            return
        await self._send("done", 0, "[DONE]")
        self.record.outcome = "ok"
        await self._resp_or_fail().write_eof()

    async def respond_once(self):  # type: ignore[override]
        """A non-streaming answer: the whole tool call in `message.tool_calls`."""
        from aiohttp import web

        from lpxtop.sim.wire import compact_json

        try:
            finish = None
            while finish is None:
                event = await self.sim_request.events.get()
                if event[0] == "admitted":
                    continue
                if event[0] == "finished":
                    return self._cut(outcome="aborted")
                finish = event[3]
            completion = self.sim_request.generated
            self.record.completion_tokens = completion
            self.record.finish_reason = self.plan.wire_reason(finish)
            body = self.chunks.full_response("", self.plan.wire_reason(finish), self.record.prompt_tokens, completion)
            message = body["choices"][0]["message"]
            message["content"] = None
            message["tool_calls"] = [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}
                for call_id, (name, text) in zip(self.plan.ids, self.plan.calls)
            ]
            self.record.events.append((time.perf_counter_ns(), "body", completion))
            self.record.outcome = "ok"
            return web.Response(body=compact_json(body).encode(), headers={
                "Content-Type": "application/json", "X-Sim-Response-Id": self.record.response_id})
        finally:
            self._finish()


def tool_call_times_ns(events) -> list[int]:
    """When each tool-call chunk was written (the truth for time to tool name, and to tool call)."""
    return [t for t, kind, _ in events if kind == TOOL_CALL_KIND]
