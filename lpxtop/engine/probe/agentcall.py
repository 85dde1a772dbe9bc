"""The sink of an agent step's calls (engine/agent/step.py): the chunk rule, plus the answer's text and
its streamed tool calls reassembled (toolcalls.py) with the arrival time of each delta."""

from __future__ import annotations

from lpxtop.engine.probe.chunks import ChunkSink
from lpxtop.engine.probe.toolcalls import ToolCallAssembler

MAX_CONTENT_CHARS = 1 << 16  # the answer's text kept (for the record; timing never needs it)


class ToolCallSink(ChunkSink):
    """An OpenAI-compatible chat stream of call 1 (a tool call) or call 2 (the answer)."""

    takes_deltas = True

    def __init__(self) -> None:
        super().__init__()
        self.content: list[str] = []
        self.content_chars = 0
        self.tool_calls = ToolCallAssembler()

    @property
    def last_token_ns(self) -> int | None:
        return self.token_ns[-1] if self.token_ns else None

    @property
    def text(self) -> str:
        return "".join(self.content)

    def take_delta(self, choice: dict, t_ns: int) -> None:
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        self.tool_calls.feed(delta.get("tool_calls"), t_ns)
        text = delta.get("content")
        if isinstance(text, str) and text and self.content_chars < MAX_CONTENT_CHARS:
            self.content.append(text)
            self.content_chars += len(text)
