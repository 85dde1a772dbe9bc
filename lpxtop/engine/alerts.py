"""Early warnings from a stream of snapshots: say what is about to break, and what to do.

`AlertRules.evaluate` is fed every published Snapshot and keeps a little bounded history per GPU
and per endpoint, which the trend rules need (memory growth, preemptions rising, a server
vanishing). Rules:

- gpu_memory             GPU memory use at or above the warning / critical share
- gpu_memory_projection  a least-squares line over the last `projection_fit_window_s` reaches the
                         GPU's total within `projection_horizon_s`, and memory is still growing
- kv_saturated           KV cache at or above `kv_saturation` while preemptions rise
- host_memory            host memory available below a share, or Linux memory pressure high
- server_exited          an endpoint's server process vanished while its GPU memory was high
- gpu_throttled          a GPU holds its clocks down (power cap, thermal, HW slowdown ...) while the
                         latency of an endpoint it serves rose: TPOT (else TTFT) p50 of the last
                         `throttle_recent_s` at least `throttle_latency_rise_pct` above the window's before

Level alerts clear only a `hysteresis_pct` below their threshold, and the projection must hold on
two consecutive readings to be raised (and fail on two to clear), so one noisy point neither
raises nor drops an alert.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lpxtop.durations import DurationError, parse_duration
from lpxtop.engine.gpu.accel.energy import gpus_of_endpoint
from lpxtop.model.alerts import Alert
from lpxtop.model.gpu import THROTTLE_TEXT, GpuDevice, GpuSnapshot
from lpxtop.model.snapshot import EndpointView, Snapshot

GIB = 2**30
_KIND_ORDER = ("server_exited", "gpu_memory", "gpu_memory_projection", "gpu_throttled", "kv_saturated",
               "host_memory")
_THROTTLE_ADVICE = {
    "power_cap": "it draws its power limit{power}: raise the limit (nvidia-smi -pl, rocm-smi --setpoweroverdrive) "
    "if the board allows it, or expect this speed at this load",
    "hw_thermal": "it is too hot{temp}: check the cooling and airflow",
    "sw_thermal": "it is running hot{temp}: check the cooling and airflow",
    "hw_slowdown": "check its temperature{temp} and the power supply (nvidia-smi -q -d PERFORMANCE)",
    "power_brake": "the system asserted the power brake: check the power supply and the chassis' power policy",
    "sync_boost": "it is held to the clocks of the slowest GPU in its sync-boost group",
}


@dataclass
class AlertThresholds:
    """When each early warning fires. Percentages are 0–100; `kv_saturation` is a 0–1 share."""

    gpu_mem_warning_pct: float = 90.0
    gpu_mem_critical_pct: float = 95.0
    projection_horizon_s: float = 60.0
    projection_fit_window_s: float = 30.0
    projection_min_points: int = 5
    kv_saturation: float = 0.90
    preemption_window_s: float = 30.0
    host_mem_available_min_pct: float = 5.0
    mem_pressure_avg10_max: float = 10.0
    gpu_mem_high_for_exit_pct: float = 80.0
    exit_alert_hold_s: float = 300.0
    hysteresis_pct: float = 2.0
    throttle_latency_rise_pct: float = 20.0
    throttle_recent_s: float = 30.0
    throttle_min_probes: int = 3

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> AlertThresholds:
        """Thresholds from the config file's [alerts] table; defaults for keys not given.

        Keys are the attribute names (dashes accepted for underscores). An unknown key, a
        non-number or an out-of-range value raises ValueError naming the key.
        """
        known = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for raw_key, value in data.items():
            key = str(raw_key).replace("-", "_")
            if key not in known:
                raise ValueError(f"unknown alert threshold {raw_key!r}; known: {', '.join(sorted(known))}")
            if key.endswith("_s") and isinstance(value, str):  # a duration: "60s", "5m"
                try:
                    value = parse_duration(value)
                except DurationError as exc:
                    raise ValueError(f"alert threshold {raw_key!r}: {exc}") from None
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"alert threshold {raw_key!r} must be a number, got {value!r}")
            if known[key].type in (int, "int"):
                if float(value) != int(value):
                    raise ValueError(f"alert threshold {raw_key!r} must be a whole number, got {value!r}")
                values[key] = int(value)
            else:
                values[key] = float(value)
        thresholds = cls(**values)
        thresholds.validate()
        return thresholds

    def validate(self) -> None:
        """Raise ValueError naming the first threshold that makes no sense."""
        for name in (
            "gpu_mem_warning_pct",
            "gpu_mem_critical_pct",
            "host_mem_available_min_pct",
            "mem_pressure_avg10_max",
            "gpu_mem_high_for_exit_pct",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 100.0:
                raise ValueError(f"alert threshold {name!r} must be between 0 and 100, got {value!r}")
        if not 0.0 <= self.kv_saturation <= 1.0:
            raise ValueError(
                f"alert threshold 'kv_saturation' must be between 0 and 1, got {self.kv_saturation!r}"
            )
        for name in ("projection_horizon_s", "projection_fit_window_s", "preemption_window_s",
                     "throttle_latency_rise_pct", "throttle_recent_s"):
            if getattr(self, name) <= 0:
                raise ValueError(
                    f"alert threshold {name!r} must be greater than 0, got {getattr(self, name)!r}"
                )
        if self.exit_alert_hold_s < 0 or self.hysteresis_pct < 0:
            raise ValueError("alert thresholds 'exit_alert_hold_s' and 'hysteresis_pct' must not be negative")
        if self.throttle_min_probes < 1:
            raise ValueError("alert threshold 'throttle_min_probes' must be at least 1")
        if self.projection_min_points < 2:
            raise ValueError("alert threshold 'projection_min_points' must be at least 2")
        if self.gpu_mem_warning_pct > self.gpu_mem_critical_pct:
            raise ValueError(
                f"alert threshold 'gpu_mem_warning_pct' ({self.gpu_mem_warning_pct:g}) must not exceed "
                f"'gpu_mem_critical_pct' ({self.gpu_mem_critical_pct:g})"
            )


# (command-line flag, AlertThresholds attribute, help) for the CLI to add generically; the type is
# that of the attribute's default.
THRESHOLD_FLAGS: tuple[tuple[str, str, str], ...] = (
    (
        "--gpu-mem-warning",
        "gpu_mem_warning_pct",
        "warn when GPU memory use reaches this percent (default 90)",
    ),
    ("--gpu-mem-critical", "gpu_mem_critical_pct", "critical alert at this GPU memory percent (default 95)"),
    (
        "--projection-horizon",
        "projection_horizon_s",
        "warn when GPU memory is projected to be full within this long (default 1m)",
    ),
    (
        "--projection-window",
        "projection_fit_window_s",
        "how much GPU memory history the projection fits a line to (default 30s)",
    ),
    (
        "--kv-saturation",
        "kv_saturation",
        "KV-cache usage share (0-1) that, with preemptions rising, counts as saturated (default 0.9)",
    ),
    (
        "--host-mem-min",
        "host_mem_available_min_pct",
        "critical alert when host memory available falls below this percent (default 5)",
    ),
    (
        "--mem-pressure-max",
        "mem_pressure_avg10_max",
        "warn when Linux memory pressure (some avg10) exceeds this percent (default 10)",
    ),
    (
        "--exit-high-mem",
        "gpu_mem_high_for_exit_pct",
        "a server that exits while its GPU memory is above this percent is reported as likely OOM (default 80)",
    ),
)


def fit_line(points: Iterable[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares (intercept, slope) of y over x; None with fewer than 2 distinct x."""
    pts = list(points)
    n = len(pts)
    if n < 2:
        return None
    mean_x = sum(x for x, _ in pts) / n
    mean_y = sum(y for _, y in pts) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in pts)
    if sxx <= 0:
        return None
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in pts)
    slope = sxy / sxx
    return mean_y - slope * mean_x, slope


def _gib(n: float) -> str:
    return f"{n / GIB:.1f}"


def _level(pct: float, previous: str, warn: float, crit: float, hyst: float) -> str:
    if pct >= crit or (previous == "critical" and pct >= crit - hyst):
        return "critical"
    if pct >= warn or (previous in ("warning", "critical") and pct >= warn - hyst):
        return "warning"
    return "ok"


@dataclass
class _GpuState:
    points: deque = field(default_factory=lambda: deque(maxlen=512))  # (t, used, total)
    level: str = "ok"
    proj_on: int = 0  # consecutive readings where the projection held
    proj_off: int = 0
    proj_active: bool = False
    proj_message: str = ""
    proj_severity: str = "warning"
    last_seen: float = 0.0


@dataclass
class _EndpointState:
    kv: deque = field(default_factory=lambda: deque(maxlen=512))  # (t, kv_usage | None, preemptions | None)
    port_pid: int | None = None
    gpu_pids: frozenset[int] = frozenset()
    high: deque = field(default_factory=lambda: deque(maxlen=512))  # (t, pct, label) while the server lived
    exit_alert: Alert | None = None
    exit_until: float = 0.0


class AlertRules:
    """Stateful evaluator: feed it every snapshot, in time order, and show what it returns."""

    def __init__(self, thresholds: AlertThresholds | None = None) -> None:
        self.thresholds = thresholds if thresholds is not None else AlertThresholds()
        self.thresholds.validate()
        self._gpus: dict[str, _GpuState] = {}
        self._endpoints: dict[str, _EndpointState] = {}
        self._host_mem_active = False
        self._pressure_active = False

    def evaluate(self, snapshot: Snapshot, now: float | None = None) -> tuple[Alert, ...]:
        """Alerts for this snapshot, worst first. `now` defaults to the snapshot's wall time."""
        t = snapshot.wall_time if now is None else now
        alerts: list[Alert] = []
        alerts += self._gpu_alerts(snapshot.gpu, t)
        for ep in snapshot.endpoints:
            state = self._endpoints.setdefault(ep.name, _EndpointState())
            alerts += self._kv_alerts(ep, state, t)
            alerts += self._exit_alerts(ep, state, snapshot, t)
        for gone in set(self._endpoints) - {ep.name for ep in snapshot.endpoints}:
            del self._endpoints[gone]
        alerts += self._host_alerts(snapshot, t)
        alerts += self._throttle_alerts(snapshot, t)
        alerts.sort(
            key=lambda a: (-a.rank, _KIND_ORDER.index(a.kind) if a.kind in _KIND_ORDER else 99, a.subject)
        )
        return tuple(alerts)

    def _gpu_alerts(self, gpu: GpuSnapshot, now: float) -> list[Alert]:
        th = self.thresholds
        alerts: list[Alert] = []
        if not gpu.ok:
            return alerts
        t = gpu.collected_at if gpu.collected_at is not None else now
        for dev in gpu.all_devices():
            pct = dev.mem_used_pct
            if pct is None or dev.mem_used_bytes is None or dev.mem_total_bytes is None:
                continue
            state = self._gpus.setdefault(dev.key, _GpuState())
            state.last_seen = now
            state.level = _level(
                pct, state.level, th.gpu_mem_warning_pct, th.gpu_mem_critical_pct, th.hysteresis_pct
            )
            if state.level != "ok":
                alerts.append(self._level_alert(dev, pct, state.level))
            if not state.points or t > state.points[-1][0]:  # one point per reading, however often we are fed
                state.points.append((t, float(dev.mem_used_bytes), float(dev.mem_total_bytes)))
                self._update_projection(dev, state, t)
            if state.proj_active:
                alerts.append(
                    Alert(state.proj_severity, "gpu_memory_projection", state.proj_message, dev.key)
                )
        # forget GPUs unseen for a while (MIG reconfigured, GPU removed)
        for key in [k for k, s in self._gpus.items() if now - s.last_seen > 2 * th.projection_fit_window_s]:
            del self._gpus[key]
        return alerts

    def _level_alert(self, dev: GpuDevice, pct: float, level: str) -> Alert:
        holder = max(
            (p for p in dev.processes if p.used_bytes is not None),
            key=lambda p: p.used_bytes or 0,
            default=None,
        )
        held = ""
        if holder is not None and holder.used_bytes:
            who = holder.name or "unknown process"
            held = f"; most held by PID {holder.pid} ({who}, {_gib(holder.used_bytes)} GiB)"
        size = f"{_gib(dev.mem_used_bytes or 0)} of {_gib(dev.mem_total_bytes or 0)} GiB{held}"
        if level == "critical":
            advice = (
                "about to run out of memory: stop other GPU processes, or restart the server with a lower "
                "--gpu-memory-utilization or --max-num-seqs"
            )
        else:
            advice = (
                "little headroom left (a vLLM server at the default --gpu-memory-utilization 0.9 sits here): "
                "anything else starting on this GPU may run out of memory"
            )
        return Alert(level, "gpu_memory", f"{dev.label} memory at {pct:.0f} % ({size}): {advice}", dev.key)

    def _update_projection(self, dev: GpuDevice, state: _GpuState, t: float) -> None:
        th = self.thresholds
        window = [(pt, used) for pt, used, _ in state.points if pt >= t - th.projection_fit_window_s]
        holds = False
        if len(window) >= th.projection_min_points:
            # fit relative to the newest reading: epoch seconds squared lose precision
            fit = fit_line((pt - t, used) for pt, used in window)
            recent = [used for pt, used in window if pt >= t - 5.0]
            # still growing now: a ramp that has flattened (vLLM after start-up) is not a threat
            growing = len(recent) >= 2 and recent[-1] > min(recent[:-1])
            if fit is not None and fit[1] > 0 and growing:
                intercept, slope = fit
                total = float(dev.mem_total_bytes or 0)
                seconds = max(0.0, (total - intercept) / slope)
                if seconds < th.projection_horizon_s:
                    holds = True
                    pct = dev.mem_used_pct or 0.0
                    state.proj_message = (
                        f"{dev.label} memory full in ~{seconds:.0f} s at +{slope / GIB:.1f} GiB/s "
                        f"({pct:.0f} % now): reduce --gpu-memory-utilization or load"
                    )
                    state.proj_severity = "critical" if seconds <= th.projection_horizon_s / 4 else "warning"
        if holds:
            state.proj_on += 1
            state.proj_off = 0
            if state.proj_on >= 2:
                state.proj_active = True
        else:
            state.proj_off += 1
            state.proj_on = 0
            if state.proj_off >= 2:
                state.proj_active = False

    def _kv_alerts(self, ep: EndpointView, state: _EndpointState, t: float) -> list[Alert]:
        th = self.thresholds
        server = ep.server
        if server is None:
            return []
        preempt = server.preemptions_total
        if state.kv and preempt is not None:
            last = next((p for _, _, p in reversed(state.kv) if p is not None), None)
            if last is not None and preempt < last:
                state.kv.clear()  # the counter went down: the server restarted
        state.kv.append((t, server.kv_cache_usage, preempt))
        while state.kv and state.kv[0][0] < t - th.preemption_window_s:
            state.kv.popleft()
        counts = [p for _, _, p in state.kv if p is not None]
        kvs = [k for _, k, _ in state.kv if k is not None]
        if len(counts) < 2 or not kvs:
            return []
        rise = counts[-1] - counts[0]
        peak = max(kvs)
        # preemptions free KV blocks, so the current reading may already be below the line: use the peak
        if rise <= 0 or peak < th.kv_saturation:
            return []
        message = (
            f"{ep.name}: requests are being preempted: the KV cache is saturated ({peak * 100:.0f} % used, "
            f"+{rise:g} preemptions in {th.preemption_window_s:.0f} s): lower --max-num-seqs or the request "
            "rate, shorten --max-model-len, or give the server more GPU memory"
        )
        return [Alert("warning", "kv_saturated", message, ep.name)]

    def _exit_alerts(
        self, ep: EndpointView, state: _EndpointState, snapshot: Snapshot, t: float
    ) -> list[Alert]:
        th = self.thresholds
        port_known, port_pid = _port_pid(ep, snapshot)
        gpu = snapshot.gpu
        gpu_pids = (
            frozenset(p.pid for _, p in gpu.all_processes() if p.endpoint == ep.name) if gpu.ok else None
        )

        exited: int | None = None
        if port_known and state.port_pid is not None and port_pid != state.port_pid:
            exited = state.port_pid
        elif gpu_pids is not None and state.gpu_pids and not (state.gpu_pids & gpu_pids):
            exited = min(state.gpu_pids)
        while state.high and state.high[0][0] < t - th.projection_fit_window_s:
            state.high.popleft()
        if exited is not None and state.high:
            pct, label = max(((p, lbl) for _, p, lbl in state.high), key=lambda x: x[0])
            if pct >= th.gpu_mem_high_for_exit_pct:
                state.exit_alert = Alert(
                    "critical",
                    "server_exited",
                    f"{ep.name}: server exited (PID {exited}) while {label} memory was at {pct:.0f} % "
                    "— if you did not stop it, likely out of memory: check its log for 'CUDA out of memory', then restart it with a lower "
                    "--gpu-memory-utilization, --max-model-len or --max-num-seqs",
                    ep.name,
                )
                state.exit_until = t + th.exit_alert_hold_s
        if exited is not None:
            state.high.clear()  # that process's memory history ends with it
        if port_known:
            state.port_pid = port_pid
        if gpu_pids is not None:
            state.gpu_pids = gpu_pids
        if state.port_pid is not None or state.gpu_pids:
            peak = _server_gpu_peak(gpu, state.gpu_pids)
            if peak is not None:
                state.high.append((t, peak[0], peak[1]))
        if state.exit_alert is not None and t > state.exit_until:
            state.exit_alert = None
        return [state.exit_alert] if state.exit_alert is not None else []

    def _host_alerts(self, snapshot: Snapshot, t: float) -> list[Alert]:
        th = self.thresholds
        host = snapshot.host
        alerts: list[Alert] = []
        if host is None:
            return alerts
        avail = host.mem_available_pct
        if avail is not None:
            limit = th.host_mem_available_min_pct + (th.hysteresis_pct if self._host_mem_active else 0.0)
            self._host_mem_active = avail < limit
            if self._host_mem_active:
                alerts.append(
                    Alert(
                        "critical",
                        "host_memory",
                        f"host memory nearly exhausted: {avail:.1f} % available "
                        f"({_gib(host.mem_available_bytes or 0)} of {_gib(host.mem_total_bytes or 0)} GiB) — the "
                        "kernel OOM killer may end a server: stop other programs, or lower --swap-space / "
                        "--cpu-offload-gb",
                        "host",
                    )
                )
        pressure = host.mem_pressure_avg10
        if pressure is not None:
            limit = th.mem_pressure_avg10_max - (th.hysteresis_pct if self._pressure_active else 0.0)
            self._pressure_active = pressure > limit
            if self._pressure_active:
                alerts.append(
                    Alert(
                        "warning",
                        "host_memory",
                        f"host memory pressure: tasks stalled on memory {pressure:.0f} % of the last 10 s — the "
                        "host is reclaiming or swapping, which slows every server: free memory or stop other programs",
                        "host",
                    )
                )
        return alerts


    def _throttle_alerts(self, snapshot: Snapshot, t: float) -> list[Alert]:
        gpu = snapshot.gpu
        throttled = [d for d in gpu.devices if d.throttle] if gpu.ok else []
        if not throttled or not snapshot.endpoints:
            return []
        ties = {ep.name: gpus_of_endpoint(ep, snapshot) for ep in snapshot.endpoints}
        if len(ties) == 1 and not next(iter(ties.values())):
            ties = {name: {d.key for d in gpu.devices} for name in ties}  # the host's only endpoint
        alerts = []
        for dev in throttled:
            rises = [(ep, rise) for ep in snapshot.endpoints if dev.key in ties[ep.name]
                     and (rise := self._latency_rise(ep, t)) is not None]
            if not rises:
                continue
            reason = (dev.throttle or ("",))[0]
            power = f" ({dev.power_w:.0f} of {dev.power_limit_w:.0f} W)" if dev.power_w and dev.power_limit_w else ""
            temp = f" ({dev.temp_c:.0f} °C)" if dev.temp_c is not None else ""
            advice = _THROTTLE_ADVICE.get(reason, "see the driver's clock-event reasons").format(power=power, temp=temp)
            said = "; ".join(f"{ep.name}'s {what} p50 rose from {before:.0f} to {now:.0f} ms" for ep, (what, before, now)
                             in rises)
            text = THROTTLE_TEXT.get(reason, reason)
            alerts.append(Alert("warning", "gpu_throttled",
                                f"{dev.label} is throttling ({text}) while {said} in the last "
                                f"{self.thresholds.throttle_recent_s:.0f} s: {advice}", dev.key))
        return alerts

    def _latency_rise(self, ep: EndpointView, t: float) -> tuple[str, float, float] | None:
        """(figure, p50 before, p50 over the last throttle_recent_s) when the endpoint's latency rose."""
        th = self.thresholds
        since = t - th.throttle_recent_s
        ok = [s for s in ep.samples if s.ok]
        for what, value in (("TPOT", lambda s: s.tpot_ms), ("TTFT", lambda s: s.ttft_ms)):
            recent = [v for s in ok if s.wall_time >= since and (v := value(s)) is not None]
            before = [v for s in ok if s.wall_time < since and (v := value(s)) is not None]
            if len(recent) < th.throttle_min_probes or len(before) < th.throttle_min_probes:
                continue
            a, b = _median(before), _median(recent)
            if a > 0 and b >= a * (1.0 + th.throttle_latency_rise_pct / 100.0):
                return what, a, b
            return None
        return None


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def _port_pid(ep: EndpointView, snapshot: Snapshot) -> tuple[bool, int | None]:
    """(known, pid) of the process holding the endpoint's port. Not known when the port's owner
    could not be read (the port is held, we just cannot see by whom)."""
    matches = [p for p in snapshot.ports if p.endpoint == ep.name]
    if not matches:
        matches = [p for p in snapshot.ports if p.endpoint is None and p.port == ep.config.port]
    if not matches:
        return False, None
    port = matches[0]
    if port.pid is not None:
        return True, port.pid
    if port.status == "down":
        return True, None
    return False, None


def _server_gpu_peak(gpu: GpuSnapshot, pids: frozenset[int]) -> tuple[float, str] | None:
    """Memory use of the GPU(s) holding the server's processes; of every GPU when we cannot tell
    which (process info hidden, e.g. another PID namespace)."""
    if not gpu.ok:
        return None
    devices = [d for d in gpu.all_devices() if pids and any(p.pid in pids for p in d.processes)]
    if not devices:
        devices = [d for d in gpu.all_devices() if not d.mig_devices]
    best: tuple[float, str] | None = None
    for dev in devices:
        pct = dev.mem_used_pct
        if pct is not None and (best is None or pct > best[0]):
            best = (pct, dev.label)
    return best
