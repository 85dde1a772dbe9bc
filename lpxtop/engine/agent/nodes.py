"""A Dify workflow's (or chatflow's) nodes over the window's steps: one summary per node, in execution order.

A node is known across steps by its `node_id` (its id in the workflow), else its title and type. Each
node's offset, client-seen time and platform time are summarized as p50/p95/p99 over its runs; the
nodes come in the order of their median offset (the order they usually run in), at most
MAX_NODE_SUMMARIES of them (the ones that ran most often).
"""

from __future__ import annotations

from collections.abc import Iterable

from lpxtop.model.agent import AgentStep
from lpxtop.model.platform import MAX_NODE_SUMMARIES, AgentNode, NodeSummary
from lpxtop.model.probe import Percentiles


class _Node:
    __slots__ = ("first", "runs", "errors", "offsets", "seen", "elapsed")

    def __init__(self, first: AgentNode) -> None:
        self.first = first
        self.runs = 0
        self.errors = 0
        self.offsets: list[float] = []
        self.seen: list[float] = []
        self.elapsed: list[float] = []

    def add(self, node: AgentNode) -> None:
        self.runs += 1
        self.errors += not node.ok
        for values, value in ((self.offsets, node.start_ms), (self.seen, node.seen_ms),
                              (self.elapsed, node.elapsed_ms)):
            if value is not None and value == value:
                values.append(value)


def summarize_nodes(steps: Iterable[AgentStep]) -> tuple[NodeSummary, ...]:
    """The nodes of `steps`, one summary each, in execution order."""
    nodes: dict[str, _Node] = {}
    for step in steps:
        for node in step.nodes:
            entry = nodes.get(node.key)
            if entry is None:
                entry = nodes[node.key] = _Node(node)
            entry.add(node)
    if not nodes:
        return ()
    kept = sorted(nodes.values(), key=lambda n: -n.runs)[:MAX_NODE_SUMMARIES]
    summaries = [NodeSummary(title=n.first.title, node_type=n.first.node_type, node_id=n.first.node_id,
                             runs=n.runs, errors=n.errors, offset_ms=Percentiles.of(n.offsets),
                             seen_ms=Percentiles.of(n.seen), elapsed_ms=Percentiles.of(n.elapsed))
                 for n in kept]
    inf = float("inf")
    summaries.sort(key=lambda s: s.offset_ms.p50 if s.offset_ms is not None else inf)
    return tuple(summaries)
