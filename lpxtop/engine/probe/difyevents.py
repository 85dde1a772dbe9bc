"""What every Dify stream has in common: reading one event, its error forms, and the timeline of its
workflow's nodes. Used by the Dify app sink (difyapp.py: agent and chat apps, and chatflows, which
report the same node events) and the Dify workflow sink (difyworkflow.py).

Dify writes `data: {"event": ...}` objects (api/core/app/entities/task_entities.py in Dify's source):

- `workflow_started` / `workflow_finished` (`data.status`: `succeeded`, `partial-succeeded`, `failed`,
  `stopped`; `data.elapsed_time` in seconds; `data.total_tokens`; `data.error`);
- `node_started` / `node_finished` (`data.id` the node run's id, `data.node_id`, `data.node_type`,
  `data.title`, `data.index`; on finish `data.status`, `data.elapsed_time` in seconds, `data.error`);
- `error` (`status`, `code`, `message`): the app failed; an SSE `event: error` (a gateway in front of
  Dify) and an `error` object in any event fail the same way.

A node run is timed three ways (lpxtop/model/platform.py): its offset (node_started's arrival), the time
the client saw (node_finished's arrival minus node_started's) and the platform's own `elapsed_time`.
Events out of order are taken as they come: a node_finished with no node_started before it is a node
run without an offset or a client-seen time; a second node_started or node_finished of one run is
passed over; a node with no node_finished is "unfinished". At most MAX_NODES runs are kept per step.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from lpxtop.engine.probe.chunks import count
from lpxtop.engine.probe.errors import StreamError, error_text, short
from lpxtop.model.platform import MAX_NODES

MAX_FIELD_CHARS = 200  # a title, a node type, an error message kept from a node event
WORKFLOW_OK = ("succeeded", "partial-succeeded")
MAX_ELAPSED_S = 86400.0


def dify_event(data: str, name: str | None) -> dict | None:
    """One Dify SSE event as a JSON object; None for a keep-alive. Raises StreamError for an error event,
    an error object, or an event that is not a JSON object."""
    stripped = data.strip()
    if not stripped or name == "ping":
        return None
    try:
        obj = json.loads(stripped)
    except (ValueError, RecursionError) as exc:
        if name == "error":
            raise StreamError("error_event", short(stripped)) from None
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        raise StreamError("bad_json", f"unparseable event: {short(stripped)[:80]} ({reason})") from None
    if not isinstance(obj, dict):
        if name == "error":
            raise StreamError("error_event", short(stripped))
        raise StreamError("bad_json", f"event is not a JSON object: {short(stripped)[:80]}")
    if obj.get("event") == "error":
        raise StreamError("error_event", dify_error(obj))
    error = obj.get("error")
    if error or name == "error":
        raise StreamError("error_event", error_text(error or obj))
    return obj


def dify_error(obj: dict) -> str:
    """The message of Dify's error event or error body: `{"status", "code", "message"}`."""
    return short(f"{obj.get('status', '')} {obj.get('code', '')}: {obj.get('message', '')}".strip())


def is_dify_error_body(obj: dict) -> bool:
    """A whole body that is Dify's error (`{"code", "message", "status"}`), sent with HTTP 200 by a proxy."""
    return obj.get("event") == "error" or (isinstance(obj.get("code"), str) and "message" in obj)


def text_of(value: object, limit: int = MAX_FIELD_CHARS) -> str | None:
    """A non-empty string, cut to `limit` characters; None for anything else."""
    return value[:limit] if isinstance(value, str) and value else None


def seconds(value: object) -> float | None:
    """A duration in seconds as a platform sends it: a finite number in [0, a day); else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and 0.0 <= value < MAX_ELAPSED_S else None


@dataclass
class NodeRun:
    """One run of a node, as its events arrived (perf_counter_ns)."""

    title: str
    node_type: str
    node_id: str | None
    started_ns: int | None = None
    finished_ns: int | None = None
    status: str = "unfinished"
    elapsed_s: float | None = None
    error: str | None = None


class NodeTimeline:
    """The workflow and node events of one Dify stream, each with the arrival time of its read."""

    def __init__(self) -> None:
        self.runs: list[NodeRun] = []  # in the order their first event came, at most MAX_NODES
        self._by_id: dict[str, NodeRun] = {}
        self.left_out = 0  # node runs past MAX_NODES
        self.workflow_run_id: str | None = None
        self.workflow_started_ns: int | None = None
        self.workflow_finished_ns: int | None = None
        self.workflow_status: str | None = None
        self.workflow_elapsed_s: float | None = None
        self.workflow_error: str | None = None
        self.total_tokens: int | None = None

    def take(self, kind: object, obj: dict, t_ns: int) -> bool:
        """Read one event if it is a workflow or node event; True when it was one."""
        if kind not in ("workflow_started", "workflow_finished", "node_started", "node_finished"):
            return False
        data = obj.get("data") if isinstance(obj.get("data"), dict) else {}
        self.workflow_run_id = self.workflow_run_id or text_of(obj.get("workflow_run_id"))
        if kind == "workflow_started":
            if self.workflow_started_ns is None:
                self.workflow_started_ns = t_ns
        elif kind == "workflow_finished":
            if self.workflow_finished_ns is None:
                self.workflow_finished_ns = t_ns
                self.workflow_status = text_of(data.get("status"), 40) or "unknown"
                self.workflow_elapsed_s = seconds(data.get("elapsed_time"))
                self.workflow_error = text_of(data.get("error"))
                self.total_tokens = count(data.get("total_tokens"))
        else:
            self._node(kind, data, t_ns)
        return True

    def _node(self, kind: str, data: dict, t_ns: int) -> None:
        run_id = text_of(data.get("id")) or text_of(data.get("node_id"))
        run = self._by_id.get(run_id) if run_id else None
        if run is None:
            if len(self.runs) >= MAX_NODES:
                if kind == "node_started":
                    self.left_out += 1
                return
            run = NodeRun(title=text_of(data.get("title")) or text_of(data.get("node_id")) or "?",
                          node_type=text_of(data.get("node_type"), 40) or "?", node_id=text_of(data.get("node_id")))
            self.runs.append(run)
            if run_id:
                self._by_id[run_id] = run
        if kind == "node_started":
            if run.started_ns is None and run.finished_ns is None:
                run.started_ns = t_ns
        elif run.finished_ns is None:
            run.finished_ns = t_ns
            run.status = text_of(data.get("status"), 40) or "unknown"
            run.elapsed_s = seconds(data.get("elapsed_time"))
            run.error = text_of(data.get("error"))

    @property
    def workflow_failed(self) -> str | None:
        """Why the workflow failed (its workflow_finished said so), or None."""
        if self.workflow_status is None or self.workflow_status in WORKFLOW_OK:
            return None
        why = f": {short(self.workflow_error)}" if self.workflow_error else ""
        failed = next((r for r in self.runs if r.status == "failed"), None)
        where = f" at node {short(failed.title)!r}" if failed is not None else ""
        return f"the workflow {self.workflow_status}{where}{why}"
