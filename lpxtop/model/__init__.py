"""Frozen records shared by the engine and every reader of its snapshots (UI, JSON, exporters).

Each domain keeps its records in its own module; this package re-exports them.
Nothing here imports Textual or Rich.
"""

from lpxtop.model.alerts import Alert
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.gpu import GpuDevice, GpuProcess, GpuSnapshot
from lpxtop.model.host import HostSnapshot
from lpxtop.model.ports import LeftoverProcess, PortStatus
from lpxtop.model.probe import Percentiles, Sample
from lpxtop.model.server import ServerMetrics
from lpxtop.model.snapshot import EndpointView, Snapshot

__all__ = [
    "Alert",
    "EndpointConfig",
    "EndpointView",
    "GpuDevice",
    "GpuProcess",
    "GpuSnapshot",
    "HostSnapshot",
    "LeftoverProcess",
    "Percentiles",
    "PortStatus",
    "Sample",
    "ServerMetrics",
    "Snapshot",
]
