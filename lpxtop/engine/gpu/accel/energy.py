"""Energy per output token: the GPUs' energy counters against the server's generated-token counter.

Both are cumulative counters read at their own moments: the GPUs every second (NVML
`nvmlDeviceGetTotalEnergyConsumption`, amdgpu hwmon `energy1_input`), the server's
`vllm:generation_tokens_total` (or its kind's counterpart, engine/scrape/metric_names.py) at each scrape. Each
counter's value at any moment between two of its readings is interpolated linearly, so both are taken over
the same interval: from `window_s` before the newest moment every counter has reached, to that moment.
J/token = ΔE / Δtokens. A GPU without an energy counter has its power readings integrated (trapezoids,
`source` "power": an estimate, good to the power reading's own averaging).

A counter that goes down (a driver reload or GPU reset, a server restart, a wrap) starts its history
afresh, so the interval begins after it; nothing is counted across it. No counter, no tokens in the
interval, or too short an interval: the figure is None with a reason, shown as `--`, never 0.

Which GPUs serve an endpoint: those holding a process that the port check ties to the endpoint (its port's
process or a descendant: `GpuProcess.endpoint`, or a PID that holds the endpoint's port). On a host with one
endpoint and no such tie (the server in a container, another user's process), every GPU counts
(`basis` "only_endpoint"). GPUs that serve several endpoints give one figure for all of them together.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from lpxtop.model.energy import EndpointEnergy
from lpxtop.model.gpu import GpuDevice, GpuSnapshot
from lpxtop.model.server import ServerMetrics
from lpxtop.model.snapshot import EndpointView, Snapshot

WINDOW_S = 60.0
# How far before the energy window a replay that seeks starts feeding readings (record/replay.py), so that
# it has the readings the live meter interpolated its interval's start from (GPUs every second, scrapes at
# their own interval)
REPLAY_LOOKBACK_S = WINDOW_S + 30.0
MIN_SPAN_S = 1.0
STALE_S = 30.0  # no reading of some counter for this long: no figure
MAX_POWER_GAP_S = 10.0  # power readings further apart than this are not integrated across
MAX_POINTS = 4096


class Cumulative:
    """A cumulative counter's readings (t, value), oldest first; a fall starts the history afresh."""

    def __init__(self, keep_s: float) -> None:
        self.keep_s = keep_s
        self.points: deque[tuple[float, float]] = deque(maxlen=MAX_POINTS)
        self.resets = 0

    def add(self, t: float, value: float) -> None:
        points = self.points
        if points and t <= points[-1][0]:
            return
        if points and value < points[-1][1]:
            points.clear()  # reset or wrap: the growth across it is unknown
            self.resets += 1
        points.append((t, value))
        while len(points) > 2 and points[1][0] < t - self.keep_s:
            points.popleft()

    @property
    def first_t(self) -> float | None:
        return self.points[0][0] if self.points else None

    @property
    def last_t(self) -> float | None:
        return self.points[-1][0] if self.points else None

    def at(self, t: float) -> float | None:
        """The counter at `t`, interpolated between the readings around it; None outside them."""
        points = self.points
        if not points or t < points[0][0] or t > points[-1][0]:
            return None
        prev = points[0]
        for point in points:
            if point[0] >= t:
                if point[0] == prev[0]:
                    return point[1]
                return prev[1] + (point[1] - prev[1]) * (t - prev[0]) / (point[0] - prev[0])
            prev = point
        return points[-1][1]


class PowerIntegral(Cumulative):
    """Energy from power readings: trapezoids between readings, restarted across a long gap."""

    def __init__(self, keep_s: float) -> None:
        super().__init__(keep_s)
        self._last_w: float | None = None

    def add_power(self, t: float, watts: float) -> None:
        if self.points and t <= self.points[-1][0]:
            return
        if not self.points or self._last_w is None or t - self.points[-1][0] > MAX_POWER_GAP_S:
            self.points.clear()
            self.add(t, 0.0)
        else:
            last_t, last_j = self.points[-1]
            self.add(t, last_j + (self._last_w + watts) / 2.0 * (t - last_t))
        self._last_w = watts


class _Gpu:
    def __init__(self, uuid: str, keep_s: float) -> None:
        self.uuid = uuid
        self.counter = Cumulative(keep_s)
        self.power = PowerIntegral(keep_s)

    def series(self) -> tuple[Cumulative | None, str | None]:
        if len(self.counter.points) >= 2 or (self.counter.points and len(self.power.points) < 2):
            return self.counter, "counter"
        if self.power.points:
            return self.power, "power"
        return None, None


class EnergyMeter:
    """Fed the GPU readings and scrapes as they come (`add_gpu`, `add_scrape`) and every published snapshot
    in time order (`apply`, which also takes in the snapshot's own readings); puts each endpoint's
    `EndpointEnergy` into the snapshot."""

    def __init__(self, window_s: float = WINDOW_S, min_span_s: float = MIN_SPAN_S) -> None:
        self.window_s = window_s
        self.min_span_s = min_span_s
        keep = window_s + 30.0
        self._keep = keep
        self._gpus: dict[str, _Gpu] = {}
        self._tokens: dict[str, Cumulative] = {}
        self._gpu_at: float | None = None
        self._scraped_at: dict[str, float] = {}

    def apply(self, snapshot: Snapshot) -> Snapshot:
        """`snapshot` with each endpoint's energy figure (unchanged when the host has no GPU)."""
        figures = self.observe(snapshot)
        if not figures:
            return snapshot
        views = tuple(replace(v, energy=figures.get(v.name)) for v in snapshot.endpoints)
        return replace(snapshot, endpoints=views)

    def observe(self, snapshot: Snapshot) -> dict[str, EndpointEnergy]:
        """Take in the snapshot's new readings; every endpoint's figure (empty without GPU devices)."""
        self._feed(snapshot)
        devices = snapshot.gpu.devices
        if not devices or not snapshot.endpoints:
            return {}
        now = snapshot.wall_time
        ties = {v.name: gpus_of_endpoint(v, snapshot) for v in snapshot.endpoints}
        basis = {name: "processes" for name, keys in ties.items() if keys}
        if len(snapshot.endpoints) == 1 and not ties[snapshot.endpoints[0].name]:
            only = snapshot.endpoints[0].name
            ties[only] = {d.key for d in devices}
            basis[only] = "only_endpoint"
        out: dict[str, EndpointEnergy] = {}
        for group_endpoints, group_gpus in _groups(ties):
            figure = self._figure(group_endpoints, group_gpus, now, snapshot)
            for name in group_endpoints:
                shared = tuple(sorted(e for e in group_endpoints if e != name))
                out[name] = replace(figure, gpus=tuple(sorted(group_gpus, key=_key_order)), basis=basis[name],
                                    shared_with=shared)
        for name, keys in ties.items():
            if not keys:
                out[name] = EndpointEnergy(reason="no GPU is tied to this endpoint: none of its GPUs' processes "
                                           "is its server's (the port check must see the server's PID: run as its user or root)")
        return out

    def add_gpu(self, gpu: GpuSnapshot) -> None:
        """One GPU reading (the engine calls this as it reads, so no reading is missed between snapshots)."""
        t = gpu.collected_at
        if not gpu.ok or t is None or t == self._gpu_at:
            return
        self._gpu_at = t
        for dev in gpu.devices:
            state = self._gpus.get(dev.key)
            if state is None or state.uuid != dev.uuid:
                state = self._gpus[dev.key] = _Gpu(dev.uuid, self._keep)
            if dev.energy_j is not None:
                state.counter.add(t, dev.energy_j)
            if dev.power_w is not None:
                state.power.add_power(t, dev.power_w)

    def add_scrape(self, endpoint: str, server: ServerMetrics | None) -> None:
        """One scrape of an endpoint's server: its generated-token counter at the scrape's time."""
        if server is None or not server.ok or server.scraped_at is None or server.generation_tokens_total is None:
            return
        if self._scraped_at.get(endpoint) == server.scraped_at:
            return
        self._scraped_at[endpoint] = server.scraped_at
        self._tokens.setdefault(endpoint, Cumulative(self._keep)).add(server.scraped_at, server.generation_tokens_total)

    def _feed(self, snapshot: Snapshot) -> None:
        self.add_gpu(snapshot.gpu)
        for view in snapshot.endpoints:
            self.add_scrape(view.name, view.server)
        names = {v.name for v in snapshot.endpoints}
        for gone in [n for n in self._tokens if n not in names]:
            del self._tokens[gone]
            self._scraped_at.pop(gone, None)

    def _figure(self, endpoints: list[str], gpus: set[str], now: float, snapshot: Snapshot) -> EndpointEnergy:
        token_series = []
        for name in endpoints:
            series = self._tokens.get(name)
            if series is None or not series.points:
                return EndpointEnergy(reason=_no_tokens(name, snapshot))
            token_series.append(series)
        energy_series: list[Cumulative] = []
        sources: set[str] = set()
        for key in gpus:
            state = self._gpus.get(key)
            series, source = state.series() if state is not None else (None, None)
            if series is None or source is None:
                return EndpointEnergy(reason=f"{key} reports neither an energy counter nor its power draw")
            energy_series.append(series)
            sources.add(source)
        source = "counter+power" if len(sources) > 1 else next(iter(sources), None)
        everything = [*token_series, *energy_series]
        t1 = min(s.last_t for s in everything if s.last_t is not None)
        t0 = max(max(s.first_t for s in everything if s.first_t is not None), t1 - self.window_s)
        if now - t1 > STALE_S:
            return EndpointEnergy(source=source, reason=f"no fresh reading for {now - t1:.0f} s")
        span = t1 - t0
        if span < self.min_span_s:
            return EndpointEnergy(source=source, reason="measuring: the counters need a few seconds of readings")
        energy = sum(_growth(s, t0, t1) for s in energy_series)
        tokens = sum(_growth(s, t0, t1) for s in token_series)
        power = energy / span
        if tokens <= 0:
            return EndpointEnergy(energy_j=energy, output_tokens=tokens, span_s=span, mean_power_w=power,
                                  source=source, reason=f"no output tokens in the last {span:.0f} s")
        return EndpointEnergy(joules_per_output_token=energy / tokens, energy_j=energy, output_tokens=tokens,
                              span_s=span, mean_power_w=power, source=source)


def _growth(series: Cumulative, t0: float, t1: float) -> float:
    a, b = series.at(t0), series.at(t1)
    return 0.0 if a is None or b is None else max(0.0, b - a)


def _no_tokens(name: str, snapshot: Snapshot) -> str:
    view = next((v for v in snapshot.endpoints if v.name == name), None)
    server = view.server if view is not None else None
    if server is None:
        return f"{name}: no /metrics scrape yet"
    if not server.ok:
        return f"{name}: {server.status}"
    return f"{name}: its server has no generated-token counter on /metrics"


def gpus_of_endpoint(view: EndpointView, snapshot: Snapshot) -> set[str]:
    """Keys of the (physical) GPUs holding a process of this endpoint's server: a process the port check
    tied to it (`GpuProcess.endpoint`: its port's process or a descendant) or the PID holding its port."""
    pids = {p.pid for p in snapshot.ports if p.endpoint == view.name and p.pid is not None}
    keys: set[str] = set()
    for dev in snapshot.gpu.devices:
        members: list[GpuDevice] = [dev, *dev.mig_devices]  # a MIG slice's energy is its GPU's
        if any(p.endpoint == view.name or p.pid in pids for m in members for p in m.processes):
            keys.add(dev.key)
    return keys


def _groups(ties: dict[str, set[str]]) -> list[tuple[list[str], set[str]]]:
    """Endpoints joined by shared GPUs (transitively), each group with all its GPUs."""
    groups: list[tuple[list[str], set[str]]] = []
    for name, keys in ties.items():
        if keys:
            groups.append(([name], set(keys)))
    merged = True
    while merged:
        merged = False
        for i in range(len(groups)):
            for j in range(i + 1, len(groups)):
                if groups[i][1] & groups[j][1]:
                    groups[i] = (groups[i][0] + groups[j][0], groups[i][1] | groups[j][1])
                    del groups[j]
                    merged = True
                    break
            if merged:
                break
    return groups


def _key_order(key: str) -> tuple[int, str]:
    digits = "".join(c for c in key if c.isdigit())
    return (int(digits) if digits else 0, key)


def energy_between(readings: list[GpuSnapshot], t0: float, t1: float, endpoint: str
                   ) -> tuple[float | None, tuple[str, ...], str | None, str | None, str | None]:
    """(joules, GPU keys, basis, source, reason) the GPUs serving `endpoint` used from `t0` to `t1` (wall
    clock), from GPU readings in time order (a load step's window: `lpxtop load` has one endpoint, so
    without a tie every GPU counts). None joules come with the reason."""
    ok = [g for g in readings if g.ok and g.collected_at is not None and g.devices]
    if not ok:
        return None, (), None, None, "no GPU readings"
    latest = ok[-1]
    keys = {d.key for d in latest.devices
            if any(p.endpoint == endpoint for m in (d, *d.mig_devices) for p in m.processes)}
    basis = "processes"
    if not keys:
        keys, basis = {d.key for d in latest.devices}, "only_endpoint"
    gpus: dict[str, _Gpu] = {}
    for g in ok:
        for dev in g.devices:
            if dev.key not in keys:
                continue
            state = gpus.get(dev.key)
            if state is None or state.uuid != dev.uuid:
                state = gpus[dev.key] = _Gpu(dev.uuid, keep_s=float("inf"))
            if dev.energy_j is not None:
                state.counter.add(g.collected_at, dev.energy_j)
            if dev.power_w is not None:
                state.power.add_power(g.collected_at, dev.power_w)
    names = tuple(sorted(keys, key=_key_order))
    total, sources = 0.0, set()
    for key in names:
        series, source = gpus[key].series() if key in gpus else (None, None)
        if series is None or source is None:
            return None, names, basis, None, f"{key} reports neither an energy counter nor its power draw"
        a, b = series.at(t0), series.at(t1)
        if a is None or b is None:
            return None, names, basis, source, f"{key}: no reading before and after the window (or its counter reset)"
        total += max(0.0, b - a)
        sources.add(source)
    return total, names, basis, "counter+power" if len(sources) > 1 else next(iter(sources), None), None
