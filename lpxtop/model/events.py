"""What the engine measured, one record per input, for readers that need every input and not only
the published summary: the recorder (lpxtop/record/) and the exporter's histograms (lpxtop/export/). An agent
step is an `AgentStepEvent` (lpxtop.model.agent); a listener passes over kinds it does not use.

The engine hands each record to its listeners on its own loop (`Engine.add_listener`). A listener
must return within microseconds (append to a deque, put on a `queue.SimpleQueue`) and never block;
a listener that raises is logged and dropped, so it cannot stop probing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lpxtop.model.alerts import Alert
from lpxtop.model.gpu import GpuSnapshot
from lpxtop.model.host import HostSnapshot
from lpxtop.model.ports import LeftoverProcess, PortStatus
from lpxtop.model.probe import Sample
from lpxtop.model.server import ServerMetrics
from lpxtop.model.snapshot import Snapshot


@dataclass(frozen=True)
class SampleEvent:
    """One finished probe of `endpoint` (also a failed one)."""

    endpoint: str
    sample: Sample


@dataclass(frozen=True)
class ScrapeEvent:
    """One scrape of `endpoint`'s server metrics, as normalized (also a failed one: see `metrics.status`)."""

    endpoint: str
    wall_time: float
    metrics: ServerMetrics


@dataclass(frozen=True)
class GpuEvent:
    wall_time: float
    gpu: GpuSnapshot


@dataclass(frozen=True)
class SystemEvent:
    """One reading of the host and the ports (they are collected together)."""

    wall_time: float
    host: HostSnapshot | None
    ports: tuple[PortStatus, ...]
    leftovers: tuple[LeftoverProcess, ...]


@dataclass(frozen=True)
class SnapshotEvent:
    """A published snapshot (it carries the alerts that were active then)."""

    snapshot: Snapshot


@dataclass(frozen=True)
class AlertsEvent:
    """The set of active alerts changed (published with the snapshot that changed it)."""

    wall_time: float
    alerts: tuple[Alert, ...]


@dataclass(frozen=True)
class ControlEvent:
    """A command changed what the engine measures: `command` is "reset" (every window emptied, value
    None), "paused" (value True/False) or "interval" (value: the probe interval now, seconds).
    A recording needs them to replay the windows as they were."""

    wall_time: float
    command: str
    value: float | bool | None = None


if TYPE_CHECKING:  # a type for annotations: the agent and chain records load only where they are made
    from lpxtop.model.agent import AgentStepEvent
    from lpxtop.model.chain import ChainEvent

    EngineEvent = (
        SampleEvent | ScrapeEvent | GpuEvent | SystemEvent | SnapshotEvent | AlertsEvent | ControlEvent
        | AgentStepEvent | ChainEvent
    )
