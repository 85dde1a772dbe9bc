"""The sink of a Dify workflow's stream (`POST /v1/workflows/run`, `response_mode: streaming`).

The stream (Dify's API documentation, "Workflow App API"; tests/fixtures/platforms/SOURCES.md):
`workflow_started`, then per node `node_started` and `node_finished` (timed one by one, difyevents.py),
`text_chunk` events (`data.text`: the output streamed from an LLM node towards the End node: the answer,
whose first non-empty text is its TTFT and whose last is its end), then `workflow_finished` with the
workflow's `status`, `elapsed_time` (seconds) and `total_tokens`, which ends the stream (TTS events may
follow it; they are drained, not read). `event: ping` keep-alives are passed over.

A `workflow_finished` whose status is not `succeeded` (nor `partial-succeeded`: a node failed into its
error branch) fails the step as `error_event` with the workflow's error and the node that failed;
Dify's `error` event, an SSE `event: error` and an `error` object do too. A blocking-mode answer (one
JSON object with `workflow_run_id` and `data`) is `not_streamed`.
"""

from __future__ import annotations

from lpxtop.engine.probe.difyevents import NodeTimeline, dify_error, dify_event, is_dify_error_body
from lpxtop.engine.probe.errors import StreamError
from lpxtop.engine.probe.sink import StreamSink


class DifyWorkflowSink(StreamSink):
    """A Dify workflow stream: its nodes, its streamed text, and its end.

    `first_token_ns` is the first workflow or node event or text: the workflow's first sign of work (a
    workflow may run for long before any text comes, or stream none at all).
    """

    markers = (b"workflow_finished", b"error")

    def __init__(self) -> None:
        super().__init__()
        self.nodes = NodeTimeline()
        self.answer_first_ns: int | None = None
        self.answer_last_ns: int | None = None
        self.chunks = 0

    @property
    def token_events(self) -> int:
        return len(self.nodes.runs) + self.chunks

    def whole_body(self, obj: dict) -> bool:
        if is_dify_error_body(obj):
            raise StreamError("error_event", dify_error(obj))
        return "workflow_run_id" in obj and isinstance(obj.get("data"), dict)

    def event(self, data: str, name: str | None, t_ns: int) -> None:
        if not data.strip() or name == "ping":
            return
        if self.first_event_ns is None:
            self.first_event_ns = t_ns
        obj = dify_event(data, name)
        if obj is None:
            return
        kind = obj.get("event")
        if self.nodes.take(kind, obj, t_ns):
            if self.first_token_ns is None:
                self.first_token_ns = t_ns
            if kind == "workflow_finished":
                self.done = True
                failed = self.nodes.workflow_failed
                if failed is not None:
                    raise StreamError("error_event", failed)
        elif kind == "text_chunk":
            chunk = obj.get("data")
            text = chunk.get("text") if isinstance(chunk, dict) else None
            if not isinstance(text, str) or not text:
                return
            self.chunks += 1
            if self.first_token_ns is None:
                self.first_token_ns = t_ns
            if self.answer_first_ns is None:
                self.answer_first_ns = t_ns
            self.answer_last_ns = t_ns
