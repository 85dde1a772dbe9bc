"""What a recording holds besides the engine's own events (lpxtop.model.events)."""

from __future__ import annotations

from dataclasses import dataclass, field

from lpxtop.model.agent import AgentStepEvent
from lpxtop.model.chain import ChainEvent
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.events import (
    AlertsEvent,
    ControlEvent,
    GpuEvent,
    SampleEvent,
    ScrapeEvent,
    SystemEvent,
)
from lpxtop.model.snapshot import Snapshot


@dataclass(frozen=True)
class EndpointInfo:
    """An endpoint as the engine showed it from this moment on: its settings (header values masked) and
    the model it probes. Written when an endpoint appears and when either changes."""

    config: EndpointConfig
    model: str | None = None


@dataclass(frozen=True)
class Mark:
    """A moment worth finding again: an alert that began, a server restart, a load-test step, a bookmark.

    `kind` is "alert", "restart", "load_step", "bookmark" or any other word a writer chooses; `payload`
    is free JSON (a bookmark's note, the alert's severity and message, the step's settings).
    """

    t: float
    kind: str
    payload: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        """One line for the time bar and the jump messages."""
        p = self.payload
        text = p.get("note") or p.get("message") or p.get("label") or p.get("name") or ""
        if not text and p:
            text = ", ".join(f"{k}={v}" for k, v in list(p.items())[:3])
        return f"{self.kind}: {text}" if text else self.kind


MARK_KINDS = ("alert", "restart", "load_step", "bookmark")

# The records a chunk of the event stream may hold, and the keyframe's. New event types are added here.
STREAM_TYPES: tuple[type, ...] = (
    SampleEvent,
    ScrapeEvent,
    GpuEvent,
    SystemEvent,
    AlertsEvent,
    ControlEvent,
    EndpointInfo,
    AgentStepEvent,
    ChainEvent,
)
KEYFRAME_TYPE = Snapshot
