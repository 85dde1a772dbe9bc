"""The prometheus_client collector: the engine's newest snapshot and the accumulated histograms,
as metric families, built when Prometheus scrapes (on the exporter's HTTP thread)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from lpxtop import __version__
from lpxtop.export.families import (
    ENDPOINT_FIGURES,
    HISTOGRAM_HELP,
    LABELLED_FIGURES,
    WINDOW_MEASURES,
    WINDOW_PERCENTILES,
)
from lpxtop.export.state import (
    AGENT_ERROR_KINDS,
    AGENT_MEASURES,
    CHAIN_MEASURES,
    ENDPOINT_LABELS,
    MEASURES,
    ExportState,
    label_value,
)
from lpxtop.model.gpu import THROTTLE_WORDS, GpuSnapshot
from lpxtop.model.ports import PORT_STATES
from lpxtop.model.probe import ERROR_KINDS
from lpxtop.model.snapshot import Snapshot

ENDPOINT_STATES = ("up", "degraded", "down", "pending")
MAX_GPU_PROCESSES = 64  # per scrape, the largest first: a bound on the per-process series
MAX_ALERT_SERIES = 64
GPU_LABELS = ("host", "gpu", "uuid", "name")


class LpxtopCollector:
    """Collects lpxtop's families. `snapshot` returns the engine's newest Snapshot (an attribute read)."""

    def __init__(self, state: ExportState, snapshot: Callable[[], Snapshot], host: str) -> None:
        self.state = state
        self.snapshot = snapshot
        self.host = label_value(host)

    def describe(self) -> list[Metric]:
        return []  # nothing to check at registration; and collect() must not run before the engine does

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot()
        state = self.state
        with state.lock:
            state.drain()
            state.learn(snap.endpoints)
            families = list(self._endpoint_families(snap))
            families += self._alert_families(snap)
            dropped = state.dropped
        yield from families
        yield from self._gpu_families(snap.gpu)
        yield from self._system_families(snap)
        yield from self._self_families(snap, dropped)

    def _endpoint_families(self, snap: Snapshot) -> Iterator[Metric]:
        state, host = self.state, self.host
        endpoints = state.endpoints()
        views = {v.name: v for v in snap.endpoints}
        labels = list(ENDPOINT_LABELS)

        info = InfoMetricFamily("lpxtop_endpoint", "Every endpoint lpxtop probes; `url` is its API base.",
                                labels=labels)
        for ep, _ in endpoints:
            info.add_metric(ep.values(host), {"url": ep.url})
        yield info

        status = GaugeMetricFamily("lpxtop_endpoint_status", "1 for the endpoint's status (up: the last probes "
                                   "worked; degraded: one of the last 5 failed; down: the last 3 failed; "
                                   "pending: none finished yet), 0 for the others.", labels=[*labels, "status"])
        for ep, _ in endpoints:
            view = views.get(ep.endpoint)
            current = view.status if view is not None else "pending"
            for name in ENDPOINT_STATES:
                status.add_metric([*ep.values(host), name], 1.0 if name == current else 0.0)
        yield status

        for figure in ENDPOINT_FIGURES:
            family_class = CounterMetricFamily if figure.counter else GaugeMetricFamily
            family = family_class(figure.name, figure.help, labels=labels)
            for ep, _ in endpoints:
                view = views.get(ep.endpoint)
                value = figure.value(view) if view is not None else None
                if value is not None:
                    family.add_metric(ep.values(host), value)
            yield family

        for labelled in LABELLED_FIGURES:
            family = GaugeMetricFamily(labelled.name, labelled.help, labels=[*labels, labelled.label])
            for ep, _ in endpoints:
                view = views.get(ep.endpoint)
                for label, value in (labelled.values(view) if view is not None else ()):
                    if label in labelled.label_values:
                        family.add_metric([*ep.values(host), label], value)
            yield family

        success = GaugeMetricFamily("lpxtop_probe_success", "1 when the endpoint's last probe succeeded, else 0 "
                                    "(as blackbox_exporter's probe_success).", labels=labels)
        probes = CounterMetricFamily("lpxtop_probes", "Probes finished (successful or not).", labels=labels)
        errors = CounterMetricFamily("lpxtop_probe_errors", "Failed probes by error class (`kind`: refused, "
                                     "connect_timeout, first_token_timeout, http_5xx, stream_cut, ...; see docs/measurement.md).",
                                     labels=[*labels, "kind"])
        tokens = CounterMetricFamily("lpxtop_probe_output_tokens", "Output tokens streamed to successful probes "
                                     "(the server's usage count, else counted events).", labels=labels)
        limited = CounterMetricFamily("lpxtop_probes_client_limited", "Probes during which lpxtop itself was late "
                                      "(its event loop lagged, or its thread waited for a CPU): their times hold "
                                      "lpxtop's delay, and the dashboard leaves them out of its percentiles.",
                                      labels=labels)
        for ep, series in endpoints:
            if series is None or not series.probes:
                continue
            values = ep.values(host)
            if series.last_success is not None:
                success.add_metric(values, series.last_success)
            probes.add_metric(values, series.probes)
            for kind in ERROR_KINDS:
                errors.add_metric([*values, kind], series.errors[kind])
            tokens.add_metric(values, series.output_tokens)
            limited.add_metric(values, series.client_limited)
        yield from (success, probes, errors, tokens, limited)

        for measure in MEASURES:
            family = HistogramMetricFamily(f"lpxtop_probe_{measure}_seconds", HISTOGRAM_HELP[measure], labels=labels)
            for ep, series in endpoints:
                if series is None or not series.probes:
                    continue
                buckets, total = _histogram_values(series.histograms[measure])
                family.add_metric(list(ep.values(host)), buckets, total)
            yield family

        yield from self._agent_families(endpoints)
        yield from self._chain_families(endpoints)

        for measure, attr, what in WINDOW_MEASURES:
            family = GaugeMetricFamily(
                f"lpxtop_probe_window_{measure}_seconds",
                f"The {what} percentiles over lpxtop's rolling window, exactly as the dashboard shows them "
                "(one endpoint's figure: to aggregate endpoints use the histogram).",
                labels=[*labels, "percentile"],
            )
            for ep, _ in endpoints:
                view = views.get(ep.endpoint)
                p = getattr(view, attr, None) if view is not None else None
                if p is None:
                    continue
                for field in WINDOW_PERCENTILES:
                    family.add_metric([*ep.values(host), field], getattr(p, field) / 1000.0)
            yield family

    def _agent_families(self, endpoints) -> Iterator[Metric]:
        """The agent-step probe's histograms and counters, for endpoints that ran agent steps."""
        host, labels = self.host, list(ENDPOINT_LABELS)
        agents = [(ep, series.agent) for ep, series in endpoints if series is not None and series.agent is not None]
        steps = CounterMetricFamily("lpxtop_agent_steps", "Agent steps finished (--probe agent: tool call, tool, "
                                    "answer; successful or not).", labels=labels)
        errors = CounterMetricFamily("lpxtop_agent_errors", "Agent steps that went wrong, by class (`kind`: the "
                                     "chat probe's transport classes, or the model's no_tool_call, bad_tool_args, "
                                     "tool_args_schema, unknown_tool).", labels=[*labels, "kind"])
        for ep, agent in agents:
            values = ep.values(host)
            steps.add_metric(values, agent.steps)
            for kind in AGENT_ERROR_KINDS:
                errors.add_metric([*values, kind], agent.errors[kind])
        yield from (steps, errors)
        for key, name, _ in AGENT_MEASURES:
            family = HistogramMetricFamily(name, HISTOGRAM_HELP[key], labels=labels)
            for ep, agent in agents:
                buckets, total = _histogram_values(agent.histograms[key])
                family.add_metric(list(ep.values(host)), buckets, total)
            yield family

    def _chain_families(self, endpoints) -> Iterator[Metric]:
        """Each probe's queue, prefill and time outside the engine from its own server span (--traces-listen),
        for endpoints with a probe joined."""
        host, labels = self.host, list(ENDPOINT_LABELS)
        chains = [(ep, series.chain) for ep, series in endpoints if series is not None and series.chain is not None]
        for key, name, _ in CHAIN_MEASURES:
            family = HistogramMetricFamily(name, HISTOGRAM_HELP[key], labels=labels)
            for ep, chain in chains:
                buckets, total = _histogram_values(chain.histograms[key])
                family.add_metric(list(ep.values(host)), buckets, total)
            yield family

    def _alert_families(self, snap: Snapshot) -> list[Metric]:
        counts: dict[tuple[str, str], int] = {}
        for alert in snap.alerts:
            key = (label_value(alert.kind), alert.severity)
            counts[key] = counts.get(key, 0) + 1
            seen = self.state.alert_keys
            if key not in seen and len(seen) < MAX_ALERT_SERIES:
                seen.add(key)
        family = GaugeMetricFamily("lpxtop_alert", "Active lpxtop alerts of this kind and severity (the "
                                   "dashboard's alerts bar; 0 once they are over).", labels=["host", "kind", "severity"])
        for kind, severity in sorted(self.state.alert_keys):
            family.add_metric([self.host, kind, severity], counts.get((kind, severity), 0))
        return [family]

    def _gpu_families(self, gpu: GpuSnapshot) -> Iterator[Metric]:
        host = self.host
        available = GaugeMetricFamily("lpxtop_gpu_available", "1 when lpxtop can read the GPUs (NVML), else 0.",
                                      labels=["host"])
        available.add_metric([host], 1.0 if gpu.ok else 0.0)
        yield available
        used = GaugeMetricFamily("lpxtop_gpu_memory_used_bytes", "GPU memory in use.", labels=list(GPU_LABELS))
        total = GaugeMetricFamily("lpxtop_gpu_memory_total_bytes", "GPU memory in all.", labels=list(GPU_LABELS))
        util = GaugeMetricFamily("lpxtop_gpu_utilization_ratio", "Share of the last sample period a kernel ran, 0..1.",
                                 labels=list(GPU_LABELS))
        procs = GaugeMetricFamily(
            "lpxtop_gpu_process_memory_used_bytes",
            "GPU memory held by one process, with the endpoint it serves (`endpoint` is empty when it serves none "
            "lpxtop knows; `endpoints`: every endpoint it serves, comma-separated in port order, `endpoint` first; "
            f"at most {MAX_GPU_PROCESSES} processes, the largest).",
            labels=["host", "gpu", "pid", "process", "endpoint", "endpoints"],
        )
        for dev in gpu.all_devices():
            values = [host, dev.key, label_value(dev.uuid), label_value(dev.name)]
            if dev.mem_used_bytes is not None:
                used.add_metric(values, dev.mem_used_bytes)
            if dev.mem_total_bytes is not None:
                total.add_metric(values, dev.mem_total_bytes)
            if dev.util_pct is not None:
                util.add_metric(values, dev.util_pct / 100.0)
        held = sorted(((dev, p) for dev, p in gpu.all_processes() if p.used_bytes is not None),
                      key=lambda dp: -(dp[1].used_bytes or 0))
        for dev, proc in held[:MAX_GPU_PROCESSES]:
            procs.add_metric([host, dev.key, str(proc.pid), label_value(proc.name), label_value(proc.endpoint),
                              label_value(",".join(proc.served()))], proc.used_bytes or 0)
        yield from (used, total, util, procs)
        yield from self._accelerator_families(gpu)

    def _accelerator_families(self, gpu: GpuSnapshot) -> Iterator[Metric]:
        """Vendor, power against its limit, the energy counter and clock-throttle reasons, per GPU."""
        host, labels = self.host, list(GPU_LABELS)
        info = InfoMetricFamily("lpxtop_gpu", "Every GPU lpxtop reads, with its `vendor` (nvidia, amd, simulated).",
                                labels=labels)
        power = GaugeMetricFamily("lpxtop_gpu_power_watts", "GPU power draw (NVML power usage; amdgpu "
                                  "power1_average, else power1_input).", labels=labels)
        limit = GaugeMetricFamily("lpxtop_gpu_power_limit_watts", "The power limit the GPU is held to (NVML "
                                  "enforced limit; amdgpu power1_cap).", labels=labels)
        energy = CounterMetricFamily("lpxtop_gpu_energy_joules", "The driver's energy counter (NVML total energy "
                                     "since the driver loaded; amdgpu energy1_input where present): it resets "
                                     "when the driver reloads.", labels=labels)
        throttle = GaugeMetricFamily("lpxtop_gpu_clock_throttle", "1 for each reason the GPU holds its clocks "
                                     "down now (power_cap, hw_thermal, sw_thermal, hw_slowdown, power_brake, "
                                     "sync_boost, board_limit, reliability), 0 for the others; absent when the "
                                     "driver does not say.", labels=[*labels, "reason"])
        for dev in gpu.devices:
            values = [host, dev.key, label_value(dev.uuid), label_value(dev.name)]
            info.add_metric(values, {"vendor": dev.vendor or "unknown"})
            if dev.power_w is not None:
                power.add_metric(values, dev.power_w)
            if dev.power_limit_w is not None:
                limit.add_metric(values, dev.power_limit_w)
            if dev.energy_j is not None:
                energy.add_metric(values, dev.energy_j)
            if dev.throttle is not None:
                for reason in THROTTLE_WORDS:
                    throttle.add_metric([*values, reason], 1.0 if reason in dev.throttle else 0.0)
        yield from (info, power, limit, energy, throttle)

    def _system_families(self, snap: Snapshot) -> Iterator[Metric]:
        host = self.host
        ports = GaugeMetricFamily("lpxtop_port_state", "1 for the state of the endpoint's port on this host "
                                  "(ok, down, conflict, restarted, multiple, model_mismatch, unknown_owner), "
                                  "0 for the others.", labels=["host", "endpoint", "port", "state"])
        for port in snap.ports:
            endpoint = label_value(port.endpoint)
            for state in PORT_STATES:
                ports.add_metric([host, endpoint, str(port.port), state], 1.0 if port.status == state else 0.0)
        yield ports
        leftovers = GaugeMetricFamily("lpxtop_leftover_processes", "Inference-server processes that look "
                                      "abandoned (hold GPU memory without a port, or zombies).", labels=["host"])
        leftovers.add_metric([host], len(snap.leftovers))
        yield leftovers
        leftover_mem = GaugeMetricFamily("lpxtop_leftover_gpu_memory_bytes", "GPU memory those leftover "
                                         "processes hold.", labels=["host"])
        leftover_mem.add_metric([host], sum(p.gpu_used_bytes or 0 for p in snap.leftovers))
        yield leftover_mem
        if snap.host is not None:
            for name, value, what in (
                ("lpxtop_host_memory_used_bytes", snap.host.mem_used_bytes, "Host memory in use."),
                ("lpxtop_host_memory_available_bytes", snap.host.mem_available_bytes, "Host memory available "
                 "to new processes without swapping."),
                ("lpxtop_host_memory_total_bytes", snap.host.mem_total_bytes, "Host memory in all."),
            ):
                if value is not None:
                    family = GaugeMetricFamily(name, what, labels=["host"])
                    family.add_metric([host], value)
                    yield family

    def _self_families(self, snap: Snapshot, dropped: int) -> Iterator[Metric]:
        host = self.host
        build = InfoMetricFamily("lpxtop_build", "The lpxtop version.", labels=["host"])
        build.add_metric([host], {"version": __version__})
        yield build
        age = GaugeMetricFamily("lpxtop_exporter_snapshot_age_seconds", "How old the engine's newest snapshot "
                                "is (it publishes every 0.5-1 s; a large value means the engine is stuck).",
                                labels=["host"])
        age.add_metric([host], max(0.0, time.time() - snap.wall_time))
        yield age
        lost = CounterMetricFamily("lpxtop_exporter_dropped_samples", "Probe results that reached no histogram "
                                   "(the queue was full for want of scrapes, or too many endpoints).", labels=["host"])
        lost.add_metric([host], dropped)
        yield lost


def _histogram_values(histogram) -> tuple[list[tuple[str, float]], float]:
    """A prometheus_client Histogram's cumulative buckets (`le` as the library writes it) and its sum."""
    buckets: list[tuple[str, float]] = []
    total = 0.0
    for metric in histogram.collect():
        for sample in metric.samples:
            if sample.name.endswith("_bucket"):
                buckets.append((sample.labels["le"], sample.value))
            elif sample.name.endswith("_sum"):
                total = sample.value
    return buckets, total
