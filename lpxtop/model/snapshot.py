"""The immutable, timestamped picture the engine publishes and every reader renders."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lpxtop.model.alerts import Alert
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.gpu import GpuSnapshot
from lpxtop.model.host import HostSnapshot
from lpxtop.model.load import LoadState
from lpxtop.model.ports import LeftoverProcess, PortStatus
from lpxtop.model.probe import Percentiles, Sample
from lpxtop.model.server import ServerMetrics

SCHEMA = 1


@dataclass(frozen=True)
class ServerPoint:
    """One scrape's gauges, kept for sparklines and charts."""

    wall_time: float
    requests_waiting: float | None
    requests_running: float | None
    kv_cache_usage: float | None


@dataclass(frozen=True)
class EndpointView:
    """Everything known about one endpoint at snapshot time, already summarized over the window."""

    config: EndpointConfig
    status: str  # up | degraded | down | pending (no probe finished yet)
    model: str | None
    server_kind: str
    probes_sent: int
    probes_ok: int
    probes_failed: int
    errors: Mapping[str, int]
    ttft_ms: Percentiles | None
    itl_ms: Percentiles | None
    tpot_ms: Percentiles | None
    e2e_ms: Percentiles | None
    output_tokens_per_s: Percentiles | None
    output_tokens: Percentiles | None
    output_tokens_approx: bool
    last_error: str | None
    last_error_time: float | None
    samples: tuple[Sample, ...]  # the window, oldest first
    server: ServerMetrics | None = None
    server_history: tuple[ServerPoint, ...] = ()
    in_flight: bool = False

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def error_rate(self) -> float | None:
        """Failed share of the probes in the window."""
        if not self.samples:
            return None
        return sum(1 for s in self.samples if not s.ok) / len(self.samples)

    @property
    def recent_errors(self) -> tuple[Sample, ...]:
        return tuple(s for s in self.samples if not s.ok)[-20:]

    def to_json(self) -> dict:
        def p(x: Percentiles | None) -> dict | None:
            return x.to_json() if x is not None else None

        return {
            "name": self.config.name,
            "url": self.config.url,
            "model": self.model,
            "server_kind": self.server_kind,
            "status": "down" if self.status == "pending" else self.status,
            "discovered": self.config.discovered,
            "probes": {
                "sent": self.probes_sent,
                "ok": self.probes_ok,
                "failed": self.probes_failed,
                "errors": dict(sorted(self.errors.items())),
            },
            "latency_ms": {"ttft": p(self.ttft_ms), "itl": p(self.itl_ms), "tpot": p(self.tpot_ms), "e2e": p(self.e2e_ms)},
            "output_tokens_per_s": p(self.output_tokens_per_s),
            "output_tokens": p(self.output_tokens),
            "output_tokens_approximate": self.output_tokens_approx,
            "server": self.server.to_json() if self.server is not None else None,
            "last_error": self.last_error,
        }


@dataclass(frozen=True)
class Snapshot:
    """What lpxtop knows at `wall_time`. Never mutated: the engine swaps in a new one."""

    wall_time: float
    host_name: str
    version: str
    started_at: float
    paused: bool
    interval_s: float
    endpoints: tuple[EndpointView, ...] = ()
    gpu: GpuSnapshot = field(default_factory=lambda: GpuSnapshot(status="unavailable: not collected yet"))
    host: HostSnapshot | None = None
    ports: tuple[PortStatus, ...] = ()
    leftovers: tuple[LeftoverProcess, ...] = ()
    alerts: tuple[Alert, ...] = ()
    seq: int = 0  # increases with every publish; readers skip work when it has not changed
    load: LoadState | None = None  # `lpxtop load`: the load test under way (None otherwise)

    def to_json(self) -> dict:
        import datetime as _dt

        out = {
            "schema": SCHEMA,
            "lpxtop": self.version,
            "host": self.host_name,
            "time": _dt.datetime.fromtimestamp(self.wall_time, _dt.timezone.utc).isoformat().replace("+00:00", "Z"),
            "endpoints": [e.to_json() for e in self.endpoints],
            "gpus": [d.to_json() for d in self.gpu.devices],
            "gpu_status": self.gpu.status,
            "gpu_simulated": self.gpu.simulated,
            "host_metrics": self.host.to_json() if self.host is not None else None,
            "ports": [p.to_json() for p in self.ports],
            "leftovers": [p.to_json() for p in self.leftovers],
            "alerts": [a.to_json() for a in self.alerts],
        }
        if self.load is not None:
            out["load"] = self.load.to_json()
        return out
