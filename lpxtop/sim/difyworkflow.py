"""A simulated Dify workflow: `POST /v1/workflows/run` with `response_mode: streaming`.

The stream follows Dify's workflow apps (its API documentation, "Workflow App API"): `event: ping`, then
`workflow_started`, and for each node `node_started` and `node_finished` (`data.id` the run's id,
`node_id`, `node_type`, `title`, `index`, `status`, `elapsed_time` in seconds), `text_chunk` events
(`data.text`) while the answering node streams, and `workflow_finished` (`status`, `elapsed_time`,
`total_tokens`, `outputs`). The workflow is five nodes:

    Start (start) -> Decide (llm) -> Weather (tool) -> Answer (llm, streamed as text_chunk) -> End (end)

A node's `elapsed_time` is the sim's own clock from just before its node_started is written to just
before its node_finished is; the workflow's from the request's arrival to just before workflow_finished.
Both LLM nodes run through the sim's scheduler (sim/platform.py), the tool node takes
`dify_tool_latency_ms`. The record keeps each node (`record.nodes`: title, node_type, node_id, the send
times of its two events, elapsed_s, status) and `record.app["elapsed_s"]`; event kinds "ping",
"workflow_started", "node_started", "node_finished", "text_chunk", "workflow_finished", "error".

Faults: `api_key` (HTTP 401), `fail_rate` (HTTP 500), `error_event_after_tokens` (the Answer node fails
after that many chunks: a failed node_finished, then a failed workflow_finished), `stall_after_tokens`
with `stall_s` (the Answer node stalls: it has started and does not finish for that long),
`first_token_delay_ms` (the Decide node's first token later).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from aiohttp import web

from lpxtop.sim.dify import dify_error
from lpxtop.sim.platform import (
    OBSERVATION,
    SYSTEM,
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

# (title, node_type, node_id) of the simulated workflow's nodes, in order
NODES = (("Start", "start", "1717000000001"), ("Decide", "llm", "1717000000002"),
         ("Weather", "tool", "1717000000003"), ("Answer", "llm", "1717000000004"), ("End", "end", "1717000000005"))


class DifyWorkflow:
    """The /v1/workflows/run handler of one SimServer."""

    def __init__(self, server: SimServer) -> None:
        self.server = server

    async def run(self, request: web.Request) -> web.StreamResponse:
        server = self.server
        record, faults = new_record(server, request, "dify-workflow")
        if not authorized(request, faults):
            return reject(record, dify_error(401, "unauthorized", "Access token is invalid"))
        body = await read_json(request)
        if body is None:
            return reject(record, dify_error(400, "invalid_param", "The request body is not valid JSON."))
        if not isinstance(body.get("inputs"), dict):
            return reject(record, dify_error(400, "invalid_param", "inputs is required"))
        if body.get("response_mode") != "streaming":
            return reject(record, dify_error(400, "invalid_param", "lpxtop sim: only streaming mode is simulated"))
        if faults.fail_rate > 0 and server.rng.random() < faults.fail_rate:
            return reject(record, dify_error(500, "internal_server_error",
                                             "Internal Server Error (lpxtop sim fail_rate)."))
        inputs = body["inputs"]
        return await serve_stream(request, record, lambda resp: _WorkflowStream(server, record, faults, resp, inputs))


class _WorkflowStream(PlatformStream):
    """One workflow run, written as Dify's workflow events."""

    def __init__(self, server: SimServer, record: Any, faults: Any, resp: web.StreamResponse, inputs: dict) -> None:
        super().__init__(server, record, faults, resp)
        self.inputs = inputs
        self.task_id = str(uuid.uuid4())
        self.workflow_id = str(uuid.uuid4())
        self.created_at = int(time.time())
        self.index = 0
        self.chunks = 0
        self.answer: list[str] = []

    def _event(self, event: str, data: dict) -> bytes:
        return sse({"event": event, "task_id": self.task_id, "workflow_run_id": self.record.response_id,
                    "data": data})

    async def _node_started(self, title: str, node_type: str, node_id: str) -> dict:
        self.index += 1
        node = {"title": title, "node_type": node_type, "node_id": node_id, "id": str(uuid.uuid4()),
                "index": self.index, "started_ns": time.perf_counter_ns(), "finished_ns": None, "elapsed_s": None,
                "status": "running"}
        self.record.nodes.append(node)
        await self.send("node_started", 0, self._event("node_started", {
            "id": node["id"], "node_id": node_id, "node_type": node_type, "title": title, "index": self.index,
            "predecessor_node_id": None, "inputs": None, "created_at": int(time.time()), "extras": {}}))
        return node

    async def _node_finished(self, node: dict, status: str = "succeeded", outputs: dict | None = None,
                             error: str | None = None) -> None:
        now = time.perf_counter_ns()
        node.update(finished_ns=now, elapsed_s=(now - node["started_ns"]) / 1e9, status=status)
        await self.send("node_finished", 0, self._event("node_finished", {
            "id": node["id"], "node_id": node["node_id"], "node_type": node["node_type"], "title": node["title"],
            "index": node["index"], "predecessor_node_id": None, "inputs": None, "process_data": None,
            "outputs": outputs, "status": status, "error": error, "elapsed_time": node["elapsed_s"],
            "execution_metadata": None, "created_at": int(time.time()), "finished_at": int(time.time()),
            "files": []}))

    async def _workflow_finished(self, status: str, error: str | None = None) -> None:
        elapsed = (time.perf_counter_ns() - self.record.t_received_ns) / 1e9
        self.record.app["elapsed_s"] = elapsed
        self.finish("ok" if status == "succeeded" else "error_event")
        await self.send("workflow_finished", 0, self._event("workflow_finished", {
            "id": self.record.response_id, "workflow_id": self.workflow_id, "sequence_number": 1, "status": status,
            "outputs": {"text": "".join(self.answer)} if status == "succeeded" else None, "error": error,
            "elapsed_time": elapsed, "total_tokens": self.prompt_tokens + self.completion_tokens,
            "total_steps": self.index, "created_at": self.created_at, "finished_at": int(time.time())}))
        await self.resp.write_eof()

    async def run(self) -> None:
        await self.send("ping", 0, b"event: ping\n\n")
        await self.send("workflow_started", 0, self._event("workflow_started", {
            "id": self.record.response_id, "workflow_id": self.workflow_id, "sequence_number": 1,
            "inputs": self.inputs, "created_at": self.created_at}))
        (start_title, start_type, start_id), decide, tool, answer, end = NODES
        node = await self._node_started(start_title, start_type, start_id)
        await self._node_finished(node, outputs=self.inputs)
        question = next((v for v in self.inputs.values() if isinstance(v, str)), "")
        prompt = SYSTEM + tokenize(question)
        try:
            node = await self._node_started(*decide)
            async for _ in self.model_round(prompt, self.config.dify_decision_tokens, self.faults.first_token_delay_ms):
                pass
            await self._node_finished(node, outputs={"text": json.dumps(TOOL_INPUT)})
            node = await self._node_started(*tool)
            await self.run_tool()
            await self._node_finished(node, outputs={"text": json.dumps(OBSERVATION)})
            node = await self._node_started(*answer)
            prompt2 = prompt + tokenize(json.dumps(TOOL_INPUT)) + tokenize(json.dumps(OBSERVATION))
            async for step in self.model_round(prompt2, self.config.dify_answer_tokens):
                if step == "token" and await self._chunk(node):
                    return
            await self._node_finished(node, outputs={"text": "".join(self.answer)})
        except Overloaded:
            await self._node_finished(node, status="failed", error="The model is overloaded (lpxtop sim).")
            await self._workflow_finished("failed", "The model is overloaded (lpxtop sim).")
            return
        node = await self._node_started(*end)
        await self._node_finished(node, outputs={"text": "".join(self.answer)})
        await self._workflow_finished("succeeded")

    async def _chunk(self, node: dict) -> bool:
        """Stream one answer token as a text_chunk; True when an injected fault ended the workflow instead."""
        faults = self.faults
        if faults.error_event_after_tokens is not None and self.chunks >= faults.error_event_after_tokens:
            error = "Injected error (lpxtop sim error_event_after_tokens)."
            await self._node_finished(node, status="failed", error=error)
            await self._workflow_finished("failed", error)
            return True
        if faults.stall_after_tokens is not None and self.chunks == faults.stall_after_tokens:
            await asyncio.sleep(faults.stall_s)
        self.chunks += 1
        text = self.server.words.token()
        self.answer.append(text)
        await self.send("text_chunk", 1, self._event("text_chunk", {
            "text": text, "from_variable_selector": [node["node_id"], "text"]}))
        return False
