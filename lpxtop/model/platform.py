"""What an agent platform reports about one step beyond the agent's own times: the nodes of a Dify workflow
or chatflow, one by one, and their summary over a window.

A node's three times (milliseconds):

- `start_ms`: when its `node_started` event arrived at lpxtop, from the step's request send (the node's
  offset in the step, as the client saw it);
- `seen_ms`: its `node_finished` event's arrival minus its `node_started` event's arrival: the node's time
  as the client saw it (the platform writes both events as the node starts and ends, so the difference is
  the node's time plus any change in how late the platform's events reach the client);
- `elapsed_ms`: `node_finished.data.elapsed_time` (seconds, the platform's own timer) × 1000: the node's
  time as the platform measured it.

Where `seen_ms` is well above `elapsed_ms`, the platform was slow to stream its events, not the node.
"""

from __future__ import annotations

from dataclasses import dataclass

from lpxtop.model.probe import Percentiles

MAX_NODES = 64  # node runs kept per step (a loop or an iteration can run a node many times)
MAX_NODE_SUMMARIES = 32  # nodes summarized per endpoint
# A node run that is not `succeeded`: "failed", "exception", "stopped", or "unfinished" (no node_finished came)
NODE_OK = ("succeeded",)


@dataclass(frozen=True)
class AgentNode:
    """One run of one node of a Dify workflow (or chatflow) in one step."""

    title: str
    node_type: str
    node_id: str | None = None
    status: str = "unfinished"  # node_finished's status; "unfinished" when none came
    start_ms: float | None = None
    seen_ms: float | None = None
    elapsed_ms: float | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status in NODE_OK

    @property
    def key(self) -> str:
        """What identifies the node across steps: its id in the workflow, else its title and type."""
        return self.node_id or f"{self.title}\x00{self.node_type}"


@dataclass(frozen=True)
class NodeSummary:
    """One node over the window's steps, in execution order (by its median offset)."""

    title: str
    node_type: str
    node_id: str | None
    runs: int
    errors: int  # runs that did not succeed (failed, stopped, never finished)
    offset_ms: Percentiles | None
    seen_ms: Percentiles | None
    elapsed_ms: Percentiles | None

    def to_json(self) -> dict:
        def p(x: Percentiles | None) -> dict | None:
            return x.to_json() if x is not None else None

        return {"title": self.title, "node_type": self.node_type, "node_id": self.node_id, "runs": self.runs,
                "errors": self.errors, "offset_ms": p(self.offset_ms), "elapsed_ms": p(self.elapsed_ms),
                "seen_ms": p(self.seen_ms)}
