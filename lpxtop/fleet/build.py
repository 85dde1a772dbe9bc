"""Turn the answers to the fleet's queries (promql.py) into a `Snapshot`, the same record the live
engine publishes: one EndpointView per host × endpoint, GPUs, ports, and alerts that say what is
missing. Pure functions of the answers, so they are tested on recorded answers too.

What a view holds here, and how it differs from the live engine's:
- latency percentiles are `histogram_quantile` over the window: within one bucket of the exact value;
  `mean` is exact (Δsum/Δcount); `max` is the upper edge of the bucket holding the largest observation;
- tokens/s percentiles are 1/TPOT percentiles (a monotone transform, so p50 maps to p50 exactly);
  its `mean` is the rate at the mean TPOT, its `max` the rate at the lower edge of the fastest bucket;
- probe counts are increases over the window; errors are counted by class (Prometheus keeps counts,
  never messages), so `last_error` names the most frequent class;
- `samples` is empty: the detail screen's charts come from `ranges` (query_range).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from lpxtop.engine.scrape import KINDS
from lpxtop.fleet.client import Answer
from lpxtop.http import is_loopback
from lpxtop.model.alerts import Alert
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.gpu import GpuDevice, GpuProcess, GpuSnapshot
from lpxtop.model.ports import PortStatus
from lpxtop.model.probe import Percentiles
from lpxtop.model.server import ServerLatency, ServerMetrics
from lpxtop.model.snapshot import EndpointView, RangeSeries

RowKey = tuple[str, str]  # (host, endpoint)
MAX_ALERTS = 40
MIB = 2**20
INT64_MAX = 2**63 - 1


def _whole(value: float | None) -> int | None:
    """A count or a byte size from Prometheus as an int; None when no int64 holds it (`1e308` MiB is
    `inf` bytes, and int(inf) raises): such a figure is "not known", as jsonout writes it."""
    if value is None or not math.isfinite(value) or abs(value) > INT64_MAX:
        return None
    return int(value)


def _count(value: float | None) -> int:
    """A count from Prometheus' increase()/value, rounded; 0 when none or beyond any int64."""
    if value is None or not math.isfinite(value) or abs(value) > INT64_MAX:
        return 0
    return round(value)


@dataclass
class Reading:
    """One refresh: every query's answer (or the one-line reason it has none)."""

    taken_at: float
    answers: dict[str, Answer] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    charts: dict[str, Answer] = field(default_factory=dict)
    # Answers already keyed by row or by instance: each is built once a refresh, so building the table is
    # linear in the series (looked up per row, it was quadratic: 51 s for 2,000 rows).
    _keyed: dict[tuple[str, str], dict] = field(default_factory=dict, repr=False, compare=False)

    def series(self, key: str):
        answer = self.answers.get(key)
        return answer.series if answer is not None else []


def per_row(reading: Reading, key: str) -> dict[RowKey, float]:
    """An answer keyed by (host, endpoint) (built once per reading and key)."""
    keyed = reading._keyed.get(("row", key))
    if keyed is None:
        keyed = {}
        for s in reading.series(key):
            value = s.value
            if value is not None:
                keyed[(s.labels.get("host", ""), s.labels.get("endpoint", ""))] = value
        reading._keyed[("row", key)] = keyed
    return keyed


def per_instance(reading: Reading, key: str) -> dict[str, float | None]:
    """An answer keyed by its `instance` label, the first series of each (built once per reading and key)."""
    keyed = reading._keyed.get(("instance", key))
    if keyed is None:
        keyed = {}
        for s in reading.series(key):
            keyed.setdefault(s.labels.get("instance"), s.value)
        reading._keyed[("instance", key)] = keyed
    return keyed


@dataclass
class _Row:
    host: str
    endpoint: str
    model: str = ""
    server_kind: str = "unknown"
    instance: str = ""

    def better(self, labels: Mapping[str, str]) -> None:
        """Rows come from a window that can hold an endpoint's earlier labels (before its model or
        server kind was known): keep the most informative."""
        if not self.model and labels.get("model"):
            self.model = labels["model"]
        if self.server_kind == "unknown" and labels.get("server_kind", "unknown") != "unknown":
            self.server_kind = labels["server_kind"]
        if not self.instance:
            self.instance = labels.get("instance", "")


def _percentiles(reading: Reading, measure: str, key: RowKey, scale: float = 1000.0) -> Percentiles | None:
    values = {label: per_row(reading, f"{measure}_{label}").get(key) for label in ("p50", "p95", "p99", "max")}
    if any(v is None for v in values.values()):
        return None
    mean = per_row(reading, f"{measure}_mean").get(key)
    count = per_row(reading, f"{measure}_count").get(key)
    return Percentiles(p50=values["p50"] * scale, p95=values["p95"] * scale, p99=values["p99"] * scale,  # type: ignore[operator]
                       mean=(mean if mean is not None else values["p50"]) * scale,  # type: ignore[operator]
                       max=values["max"] * scale, count=_count(count))  # type: ignore[operator]


def _decode_rates(reading: Reading, key: RowKey) -> Percentiles | None:
    """Tokens/s of one stream from the TPOT histogram: rate percentiles are 1/TPOT percentiles."""
    q = {label: per_row(reading, f"tpot_{label}").get(key) for label in ("p50", "p05", "p01", "min", "mean")}
    if q["p50"] is None or q["p50"] <= 0:
        return None

    def inv(x: float | None, fallback: float) -> float:
        rate = 1.0 / x if x is not None and x > 0 else fallback
        return rate if math.isfinite(rate) else fallback  # 1 / 1e-320 is inf

    p50 = 1.0 / q["p50"]
    if not math.isfinite(p50):
        return None
    p95 = inv(q["p05"], p50)
    p99 = inv(q["p01"], p95)
    count = per_row(reading, "tpot_count").get(key)
    return Percentiles(p50=p50, p95=p95, p99=p99, mean=inv(q["mean"], p50), max=max(p99, inv(q["min"], p99)),
                       count=_count(count))


def _host_of(instance: str) -> tuple[str, int | None]:
    parts = urlsplit(f"//{instance}")
    try:
        return parts.hostname or instance, parts.port
    except ValueError:
        return instance, None




def endpoint_views(reading: Reading, window: str) -> list[EndpointView]:
    """lpxtop exporters' endpoints, then servers that no exporter probes."""
    rows: dict[RowKey, _Row] = {}
    for s in reading.series("rows"):
        key = (s.labels.get("host", ""), s.labels.get("endpoint", ""))
        rows.setdefault(key, _Row(*key)).better(s.labels)
    up_now = per_row(reading, "up_now")
    statuses = {(s.labels.get("host", ""), s.labels.get("endpoint", "")): s.labels.get("status", "")
                for s in reading.series("status")}
    urls = {(s.labels.get("host", ""), s.labels.get("endpoint", "")): s.labels.get("url", "")
            for s in reading.series("urls")}
    exporters = {s.labels.get("instance", ""): s.value for s in reading.series("exporters_up")}
    probes = per_row(reading, "probes")
    errors: dict[RowKey, dict[str, int]] = {}
    for s in reading.series("errors"):
        if _count(s.value) > 0:
            key = (s.labels.get("host", ""), s.labels.get("endpoint", ""))
            errors.setdefault(key, {})[s.labels.get("kind", "other")] = _count(s.value)
    gauges = {name: per_row(reading, name) for name in (
        "requests_waiting", "requests_running", "kv_cache_usage", "server_metrics_up", "preemptions_total",
        "prompt_tokens_per_s", "generation_tokens_per_s", "server_ttft_p50_s", "server_ttft_p99_s")}
    gpu_mem = per_row(reading, "gpu_per_endpoint")
    charts = _chart_series(reading)

    views: list[EndpointView] = []
    for key, row in sorted(rows.items()):
        exporter_up = exporters.get(row.instance)
        status = statuses.get(key) or ("up" if up_now.get(key) == 1 else "down")
        last_error = None
        if exporter_up == 0:
            status = "down"
            last_error = f"exporter_down: the lpxtop exporter at {row.instance} does not answer Prometheus"
        elif key not in up_now:
            status = "down"
            last_error = f"gone: {row.instance or 'its exporter'} no longer reports this endpoint"
        kinds = errors.get(key, {})
        sent = _count(probes.get(key))
        failed = min(sent, sum(kinds.values())) if sent else sum(kinds.values())
        if last_error is None and kinds:
            worst = max(kinds.items(), key=lambda kv: (kv[1], kv[0]))
            last_error = (f"{worst[0]}: {worst[1]} in the last {window} "
                          "(Prometheus keeps counts by class, not messages)")

        def g(name: str, key: RowKey = key) -> float | None:
            return gauges[name].get(key)

        server = None
        if any(g(n) is not None for n in ("requests_waiting", "requests_running", "kv_cache_usage", "server_metrics_up")):
            p50 = g("server_ttft_p50_s")
            p99 = g("server_ttft_p99_s")
            server = ServerMetrics(
                kind=row.server_kind,
                status="ok" if g("server_metrics_up") != 0 else "no server metrics (see the host's lpxtop)",
                requests_waiting=g("requests_waiting"),
                requests_running=g("requests_running"),
                kv_cache_usage=g("kv_cache_usage"),
                preemptions_total=g("preemptions_total"),
                prompt_tokens_per_s=g("prompt_tokens_per_s"),
                generation_tokens_per_s=g("generation_tokens_per_s"),
                server_ttft_ms=ServerLatency(p50 * 1000.0, p99 * 1000.0 if p99 is not None else None, 0.0)
                if p50 is not None else None,
            )
        config = EndpointConfig(name=row.endpoint, url=urls.get(key, ""), model=row.model or None)
        views.append(EndpointView(
            config=config,
            status=status,
            model=row.model or None,
            server_kind=row.server_kind,
            probes_sent=sent,
            probes_ok=max(0, sent - failed),
            probes_failed=failed,
            errors=kinds,
            ttft_ms=_percentiles(reading, "ttft", key),
            itl_ms=_percentiles(reading, "itl", key),
            tpot_ms=_percentiles(reading, "tpot", key),
            e2e_ms=_percentiles(reading, "e2e", key),
            output_tokens_per_s=_decode_rates(reading, key),
            output_tokens=None,
            output_tokens_approx=False,
            last_error=last_error,
            last_error_time=None,
            samples=(),
            server=server,
            host=row.host,
            window_error_rate=(failed / sent) if sent else None,
            gpu_mem_bytes=gpu_mem.get(key),
            ranges=charts.get(key, ()),
        ))
    views += server_only_views(reading, rows.values(), urls)
    return views


def _chart_series(reading: Reading) -> dict[RowKey, tuple[RangeSeries, ...]]:
    out: dict[RowKey, list[RangeSeries]] = {}
    for name, answer in reading.charts.items():
        scale = 1000.0 if name.endswith("_ms") else 1.0
        for s in answer.series:
            key = (s.labels.get("host", ""), s.labels.get("endpoint", ""))
            points = tuple((t, v * scale) for t, v in s.points)
            out.setdefault(key, []).append(RangeSeries(name, points))
    return {k: tuple(sorted(v, key=lambda r: r.key)) for k, v in out.items()}


def _kind_of(metric: str) -> str:
    for kind in KINDS:
        if metric.startswith(kind.prefixes):
            return kind.kind
    return "unknown"


def server_only_views(reading: Reading, rows: Iterable[_Row], urls: Mapping[RowKey, str]) -> list[EndpointView]:
    """Servers Prometheus scrapes directly (vLLM, SGLang, TGI ... names) that no lpxtop exporter probes."""
    covered: set[tuple[str, int | None]] = set()
    for row in rows:
        url = urls.get((row.host, row.endpoint), "")
        parts = urlsplit(url) if url else None
        port = parts.port if parts is not None else None
        url_host = parts.hostname if parts is not None else None
        if url_host:
            covered.add((url_host, port))
        covered.add((row.host, port))
        if url_host is None or is_loopback(url_host):
            covered.add((_host_of(row.instance)[0], port))
    found: dict[str, dict] = {}
    for role in ("waiting", "running", "kv_usage"):
        for s in reading.series(f"server_{role}"):
            instance = s.labels.get("instance", "")
            if not instance or s.value is None or _host_of(instance) in covered:
                continue
            item = found.setdefault(instance, {"kind": _kind_of(s.labels.get("__name__", "")), "models": []})
            model = s.labels.get("model_name") or s.labels.get("model")
            if model and model not in item["models"]:
                item["models"].append(model)
            if role == "kv_usage":
                item[role] = max(item.get(role, 0.0), s.value)
            else:
                item[role] = item.get(role, 0.0) + s.value
    up = {s.labels.get("instance", ""): s.value for s in reading.series("server_up")}
    views = []
    for instance, item in sorted(found.items()):
        kind = item["kind"]
        to_ms = next((k.ttft.to_ms for k in KINDS if k.kind == kind and k.ttft is not None), 1000.0)
        p50 = _instance_value(reading, f"server_ttft_p50:{kind}", instance)
        p99 = _instance_value(reading, f"server_ttft_p99:{kind}", instance)
        host, port = _host_of(instance)
        model = ", ".join(item["models"]) or None
        server = ServerMetrics(
            kind=kind, status="ok", requests_waiting=item.get("waiting"), requests_running=item.get("running"),
            kv_cache_usage=item.get("kv_usage"), models=tuple(item["models"]),
            server_ttft_ms=ServerLatency(p50 * to_ms, p99 * to_ms if p99 is not None else None, 0.0)
            if p50 is not None else None,
        )
        status = "down" if up.get(instance) == 0 else "up"
        views.append(EndpointView(
            config=EndpointConfig(name=instance, url=f"http://{instance}/v1", model=model),
            status=status, model=model, server_kind=kind, probes_sent=0, probes_ok=0, probes_failed=0,
            errors={}, ttft_ms=None, itl_ms=None, tpot_ms=None, e2e_ms=None, output_tokens_per_s=None,
            output_tokens=None, output_tokens_approx=False,
            last_error="exporter_down: Prometheus cannot scrape this server" if status == "down" else None,
            last_error_time=None, samples=(), server=server, host=host,
        ))
    return views


def _instance_value(reading: Reading, key: str, instance: str) -> float | None:
    return per_instance(reading, key).get(instance)


def gpus(reading: Reading) -> GpuSnapshot:
    """GPUs of every host: lpxtop's own series, then dcgm-exporter's and nvitop-exporter's for GPUs
    no lpxtop exporter reports (matched by UUID). Processes name their endpoint as host/endpoint."""
    devices: dict[tuple[str, str], dict] = {}
    for name, field_name in (("gpu_used", "used"), ("gpu_total", "total"), ("gpu_util", "util")):
        for s in reading.series(name):
            key = (s.labels.get("host", ""), s.labels.get("gpu", ""))
            item = devices.setdefault(key, {"uuid": s.labels.get("uuid", ""), "name": s.labels.get("name", "")})
            item[field_name] = s.value
    procs: dict[tuple[str, str], list[GpuProcess]] = {}
    for s in reading.series("gpu_processes"):
        key = (s.labels.get("host", ""), s.labels.get("gpu", ""))
        endpoint = s.labels.get("endpoint") or None
        try:
            pid = int(s.labels.get("pid", "0"))
        except ValueError:
            pid = 0
        served = tuple(f"{key[0]}/{e}" for e in (s.labels.get("endpoints") or "").split(",") if e)
        procs.setdefault(key, []).append(GpuProcess(
            pid=pid, name=s.labels.get("process") or None,
            used_bytes=_whole(s.value),
            endpoint=f"{key[0]}/{endpoint}" if endpoint else None, endpoints=served))
    known_uuids = {item["uuid"] for item in devices.values() if item.get("uuid")}
    for host_label, index_label, name_label, uuid_label, used_key, total_key, util_key, free_key in (
        ("Hostname", "gpu", "modelName", "UUID", "dcgm_used_mib", None, "dcgm_util_pct", "dcgm_free_mib"),
        ("hostname", "index", "devicename", "uuid", "nvitop_used_mib", "nvitop_total_mib", "nvitop_util_pct", None),
    ):
        other: dict[tuple[str, str], dict] = {}
        for key_name, field_name in ((used_key, "used"), (total_key, "total"), (util_key, "util"), (free_key, "free")):
            if key_name is None:
                continue
            for s in reading.series(key_name):
                uuid = s.labels.get(uuid_label, "")
                if uuid and uuid in known_uuids:
                    continue
                host = s.labels.get(host_label) or _host_of(s.labels.get("instance", ""))[0]
                key = (host, f"gpu{s.labels.get(index_label, '0')}")
                item = other.setdefault(key, {"uuid": uuid, "name": s.labels.get(name_label, "")})
                value = s.value
                if value is not None and field_name in ("used", "total", "free"):
                    value *= MIB
                elif value is not None and field_name == "util":
                    value /= 100.0
                item[field_name] = value
        for key, item in other.items():
            if "total" not in item and item.get("used") is not None and item.get("free") is not None:
                item["total"] = item["used"] + item["free"]
            devices.setdefault(key, item)
            if item.get("uuid"):
                known_uuids.add(item["uuid"])
    out: list[GpuDevice] = []
    for (host, gpu), item in sorted(devices.items()):
        index = _gpu_index(gpu)
        out.append(GpuDevice(
            index=index, name=f"{host} · {item.get('name') or 'GPU'}", uuid=item.get("uuid", ""),
            util_pct=item["util"] * 100.0 if item.get("util") is not None else None,
            mem_used_bytes=_whole(item.get("used")),
            mem_total_bytes=_whole(item.get("total")),
            processes=tuple(sorted(procs.get((host, gpu), ()), key=lambda p: -(p.used_bytes or 0))),
        ))
    if out:
        return GpuSnapshot(status="ok", devices=tuple(out), collected_at=reading.taken_at)
    return GpuSnapshot(status="unavailable: no GPU series in Prometheus (lpxtop exporters on hosts with NVML, "
                       "dcgm-exporter or nvitop-exporter put them there)")


def _gpu_index(gpu: str) -> int:
    digits = gpu.removeprefix("gpu").split("/")[0]
    return int(digits) if digits.isascii() and digits.isdigit() and len(digits) < 10 else 0


def ports(reading: Reading) -> tuple[PortStatus, ...]:
    out = []
    for s in reading.series("ports"):
        host, endpoint, state = s.labels.get("host", ""), s.labels.get("endpoint", ""), s.labels.get("state", "")
        try:
            port = int(s.labels.get("port", "0"))
        except ValueError:
            continue
        detail = f"{host}: port {port} is {state}" + ("" if state == "ok" else " (details in that host's lpxtop)")
        out.append(PortStatus(port=port, status=state, detail=detail, endpoint=f"{host}/{endpoint}", host=host))
    return tuple(sorted(out, key=lambda p: (p.status == "ok", p.host or "", p.port)))


def alerts(reading: Reading, status_lines: Iterable[Alert]) -> tuple[Alert, ...]:
    """The status of Prometheus first, then the exporters' own alerts by host, leftovers, dead exporters."""
    out = list(status_lines)
    for s in reading.series("exporters_up"):
        if s.value == 0:
            out.append(Alert("critical", "exporter_down",
                             f"lpxtop exporter {s.labels.get('instance', '?')} (job {s.labels.get('job', '?')}) does "
                             "not answer Prometheus: its endpoints show their last known state", s.labels.get("instance", "")))
    for s in reading.series("alerts"):
        host, kind, severity = s.labels.get("host", ""), s.labels.get("kind", ""), s.labels.get("severity", "info")
        count = _count(s.value)
        out.append(Alert(severity, kind, f"{host}: {count} active {kind} alert{'s' if count != 1 else ''} "
                         "(open lpxtop on that host for what to do)", host))
    for s in reading.series("leftovers"):
        host = s.labels.get("host", "")
        count = _count(s.value)
        out.append(Alert("warning", "leftovers", f"{host}: {count} leftover inference process"
                         f"{'es' if count != 1 else ''} (no port, or holding GPU memory): see lpxtop on {host}", host))
    out.sort(key=lambda a: -a.rank)
    return tuple(out[:MAX_ALERTS])
