"""The immutable, timestamped picture the engine publishes and every reader renders."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from lpxtop.lazy import lazy_exports
from lpxtop.model.alerts import Alert
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.energy import EndpointEnergy
from lpxtop.model.gpu import GpuSnapshot
from lpxtop.model.host import HostSnapshot
from lpxtop.model.ports import LeftoverProcess, PortStatus
from lpxtop.model.probe import Percentiles, Sample
from lpxtop.model.server import ServerMetrics
from lpxtop.model.server_gap import TtftGap, ttft_gap

if TYPE_CHECKING:
    from lpxtop.model.agent import AgentView
    from lpxtop.model.chain import ChainSummary
    from lpxtop.model.load import LoadState

# The records of the agent probe, the latency chain and the load test, which only some snapshots carry, load
# when first asked for (the dashboard's first frame does not wait for them); their names still resolve here
# on demand, for the recordings' codec that reads this module's annotations (lpxtop/record/codec.py).
__getattr__, __dir__ = lazy_exports(__name__, {
    "lpxtop.model.agent": ("AgentView",),
    "lpxtop.model.chain": ("ChainSummary",),
    "lpxtop.model.load": ("LoadState",),
})

SCHEMA = 1


@dataclass(frozen=True)
class ServerPoint:
    """One scrape's gauges, kept for sparklines and charts."""

    wall_time: float
    requests_waiting: float | None
    requests_running: float | None
    kv_cache_usage: float | None


@dataclass(frozen=True)
class RangeSeries:
    """One figure over time, read from a store rather than from samples (the fleet view's Prometheus
    `query_range`): `key` names the figure ("ttft_p50_ms", "requests_waiting", ...)."""

    key: str
    points: tuple[tuple[float, float], ...]  # (wall time, value), oldest first


@dataclass(frozen=True)
class GaugeSummary:
    """One server gauge over several scrapes: the last value, the largest and the mean."""

    last: float
    max: float
    mean: float
    count: int

    def to_json(self, digits: int = 4) -> dict:
        return {"last": round(self.last, digits), "max": round(self.max, digits), "mean": round(self.mean, digits)}


@dataclass(frozen=True)
class ServerSummary:
    """What the server showed across the probes' span (for `once`: the scrapes taken while probing),
    scraped on a schedule of its own, so not only right after lpxtop's own probe ended."""

    scrapes: int
    since: float  # wall clock of the first and last scrape counted
    until: float
    requests_running: GaugeSummary | None
    requests_waiting: GaugeSummary | None
    kv_cache_usage: GaugeSummary | None  # 0..1

    def to_json(self) -> dict:
        def g(x: GaugeSummary | None) -> dict | None:
            return x.to_json() if x is not None else None

        return {
            "scrapes": self.scrapes,
            "span_s": round(self.until - self.since, 3),
            "requests_running": g(self.requests_running),
            "requests_waiting": g(self.requests_waiting),
            "kv_cache_usage": g(self.kv_cache_usage),
        }


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
    # Set by sources that span hosts or hold no samples (the fleet view reads Prometheus):
    host: str | None = None  # the host the endpoint's lpxtop (or server) runs on
    window_error_rate: float | None = None  # failed share over the window, when `samples` is empty
    gpu_mem_bytes: float | None = None  # GPU memory held by the processes serving this endpoint
    ranges: tuple[RangeSeries, ...] = ()  # charts' data when there are no samples
    probes_client_limited: int = 0  # probes during which lpxtop itself was late (left out of percentiles by default)
    # the percentiles count client-limited probes (asked for, or no other probe was in the window)
    percentiles_with_client_limited: bool = False
    server_summary: ServerSummary | None = None  # the server's gauges across the probes' span
    agent: AgentView | None = None  # the agent-step probe's window (engine/agent), when it is on
    energy: EndpointEnergy | None = None  # joules per output token of its GPUs (engine/gpu/accel/energy.py)
    # the probes joined to the server's own spans (engine/traces); None: no receiver (--traces-listen)
    chain: ChainSummary | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def key(self) -> str:
        """What tells rows apart: the name, prefixed with the host when views span hosts."""
        return self.name if self.host is None else f"{self.host}/{self.name}"

    @property
    def error_rate(self) -> float | None:
        """Failed share of the probes in the window."""
        if not self.samples:
            return self.window_error_rate
        return sum(1 for s in self.samples if not s.ok) / len(self.samples)

    @cached_property
    def ttft_gap(self) -> TtftGap:
        """Time outside the engine: the probes' TTFT minus the server's own, where they compare (server_gap)."""
        return ttft_gap(self.samples, self.server, self.chain)

    @property
    def recent_errors(self) -> tuple[Sample, ...]:
        return tuple(s for s in self.samples if not s.ok)[-20:]

    @cached_property
    def pool_wait_ms(self) -> Percentiles | None:
        """lpxtop's own wait for a free connection of its pool before each probe in the window: kept out of
        TTFT, shown so that a busy pool (many endpoints on one origin) is seen rather than guessed."""
        return Percentiles.of([s.pool_wait_ms for s in self.samples if s.pool_wait_ms is not None])

    @property
    def redirected_to(self) -> str | None:
        """Where the server sent the newest redirected probe in the window (None: no probe was redirected)."""
        return next((s.redirected_to for s in reversed(self.samples) if s.redirected_to), None)

    def to_json(self) -> dict:
        def p(x: Percentiles | None) -> dict | None:
            return x.to_json() if x is not None else None

        data = {
            "name": self.config.name,
            "url": self.config.display_url,
            "model": self.model,
            "server_kind": self.server_kind,
            "status": "down" if self.status == "pending" else self.status,
            "discovered": self.config.discovered,
            "probes": {
                "sent": self.probes_sent,
                "ok": self.probes_ok,
                "failed": self.probes_failed,
                "errors": dict(sorted(self.errors.items())),
                "client_limited": self.probes_client_limited,
                "pool_wait_ms": p(self.pool_wait_ms),
                "redirected_to": self.redirected_to,
            },
            "latency_ms": {"ttft": p(self.ttft_ms), "itl": p(self.itl_ms), "tpot": p(self.tpot_ms), "e2e": p(self.e2e_ms)},
            "output_tokens_per_s": p(self.output_tokens_per_s),
            "output_tokens": p(self.output_tokens),
            "output_tokens_approximate": self.output_tokens_approx,
            "latency_includes_client_limited": self.percentiles_with_client_limited,
            "server": self.server.to_json(ttft_gap=self.ttft_gap.to_json()) if self.server is not None else None,
            "server_while_probing": self.server_summary.to_json() if self.server_summary is not None else None,
            "last_error": self.last_error,
            "agent": self.agent.to_json() if self.agent is not None else None,
            "energy": self.energy.to_json() if self.energy is not None else None,
            "chain": self.chain.to_json() if self.chain is not None else None,
        }
        if self.host is not None:
            data["host"] = self.host
            data["gpu_mem_bytes"] = self.gpu_mem_bytes
        return data


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
