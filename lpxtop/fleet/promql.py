"""Every PromQL query the fleet view sends, in one place, so an operator can paste them into Grafana.

`lpxtop fleet --print-queries` prints them with the chosen selector and window (docs/prometheus/
README.md lists them with the defaults; a test keeps the two equal).

Rows are one per (`host`, `endpoint`) of lpxtop exporters; `--match` narrows the lpxtop series
(`{job="lpxtop"}`). Servers without an lpxtop exporter are found by their own metric names
(engine/scrape/metric_names.py, the table lpxtop reads /metrics with), GPUs of hosts without lpxtop by
dcgm-exporter's and nvitop-exporter's names; `--servers-match` narrows those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lpxtop.engine.scrape import KINDS, Ref

ROW = "host, endpoint"
MEASURES = ("ttft", "itl", "tpot", "e2e")
QUANTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0))
# TPOT's low quantiles are the decode rate's high ones (tokens/s = 1 / TPOT); "min" is the lower edge
# of the fastest non-empty bucket (histogram_quantile(0, ...) is always 0 or NaN).
TPOT_LOW_QUANTILES: tuple[tuple[str, float], ...] = (("p05", 0.05), ("p01", 0.01), ("min", 0.0001))
SERVER_ROLES = ("waiting", "running", "kv_usage")

_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)$")


class SelectorError(ValueError):
    """A --match value that is not a list of label matchers."""


def parse_matchers(text: str | None) -> str:
    """`{job="lpxtop"}` or `job="lpxtop", env=~"prod.*"` → the matchers inside the braces ('' for none)."""
    raw = (text or "").strip()
    if raw.startswith("{") and raw.endswith("}"):
        raw = raw[1:-1].strip()
    if not raw:
        return ""
    matchers: list[str] = []
    pos = 0
    while pos < len(raw):
        found = _MATCHER.match(raw, pos)
        if found is None:
            raise SelectorError(f"{text!r} is not a label selector: write it as {{job=\"lpxtop\"}} "
                                "(label=\"value\", !=, =~ or !~, separated by commas)")
        matchers.append(f'{found.group(1)}{found.group(2)}"{found.group(3)}"')
        pos = found.end()
    return ", ".join(matchers)


def check_duration(text: str) -> str:
    """A PromQL duration such as 30s, 5m, 1h."""
    if not _DURATION.match(text.strip()):
        raise SelectorError(f"{text!r} is not a duration such as 30s, 5m or 1h")
    return text.strip()


def duration_seconds(text: str) -> float:
    number, unit = _DURATION.match(text).groups()  # type: ignore[union-attr]
    return int(number) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[unit]


def selector(metric: str, matchers: str, *extra: str) -> str:
    """`metric{matchers, extra...}` (just `metric` without any)."""
    parts = [m for m in (matchers, *extra) if m]
    return f"{metric}{{{', '.join(parts)}}}" if parts else metric


@dataclass(frozen=True)
class FleetQueries:
    """The queries for one selector (`match`: lpxtop exporters; `servers`: other servers and GPU exporters)
    and one window (`window`: the table's figures; `chart_rate`: each chart point's rate window)."""

    match: str = ""
    servers: str = ""
    window: str = "5m"
    chart_rate: str = "1m"

    def _m(self, metric: str, *extra: str) -> str:
        return selector(metric, self.match, *extra)

    # ---- the rows (lpxtop exporters) ----

    def rows(self) -> str:
        """One series per endpoint seen in the window, with its labels (also exporters gone since)."""
        return (f"max by (host, endpoint, model, server_kind, instance) "
                f"(last_over_time({self._m('lpxtop_endpoint_up')}[{self.window}]))")

    def up_now(self) -> str:
        return f"max by ({ROW}) ({self._m('lpxtop_endpoint_up')})"

    def status(self) -> str:
        return f"max by ({ROW}, status) ({self._m('lpxtop_endpoint_status')}) == 1"

    def urls(self) -> str:
        return f"max by ({ROW}, url) ({self._m('lpxtop_endpoint_info')})"

    def exporters_up(self) -> str:
        """Prometheus' own `up` of the lpxtop scrape targets (0: the exporter does not answer)."""
        return f"max by (instance, job) ({self._m('up')})"

    def quantile(self, measure: str, q: float) -> str:
        """`histogram_quantile` over the window: like vllm bench serve's percentiles, within a bucket."""
        return (f"histogram_quantile({q:g}, sum by ({ROW}, le) "
                f"(rate({self._m(f'lpxtop_probe_{measure}_seconds_bucket')}[{self.window}])))")

    def mean(self, measure: str) -> str:
        name = f"lpxtop_probe_{measure}_seconds"
        return (f"sum by ({ROW}) (rate({self._m(name + '_sum')}[{self.window}])) / "
                f"sum by ({ROW}) (rate({self._m(name + '_count')}[{self.window}]))")

    def count(self, measure: str) -> str:
        return f"sum by ({ROW}) (increase({self._m(f'lpxtop_probe_{measure}_seconds_count')}[{self.window}]))"

    def probes(self) -> str:
        return f"sum by ({ROW}) (increase({self._m('lpxtop_probes_total')}[{self.window}]))"

    def errors(self) -> str:
        return f"sum by ({ROW}, kind) (increase({self._m('lpxtop_probe_errors_total')}[{self.window}])) > 0"

    def tokens(self) -> str:
        return f"sum by ({ROW}) (increase({self._m('lpxtop_probe_output_tokens_total')}[{self.window}]))"

    def gauge(self, metric: str) -> str:
        """An exporter's per-endpoint gauge (queue, KV, gap ...), now."""
        return f"max by ({ROW}) ({self._m(metric)})"

    def gpu_per_endpoint(self) -> str:
        held = self._m("lpxtop_gpu_process_memory_used_bytes", 'endpoint!=""')
        return f"sum by ({ROW}) ({held})"

    # ---- hosts: GPUs, ports, alerts ----

    def gpu(self, metric: str) -> str:
        return f"max by (host, gpu, uuid, name) ({self._m(metric)})"

    def gpu_processes(self) -> str:
        return (f"max by (host, gpu, pid, process, endpoint, endpoints) "
                f"({self._m('lpxtop_gpu_process_memory_used_bytes')})")

    def ports(self) -> str:
        return f"max by (host, endpoint, port, state) ({self._m('lpxtop_port_state')}) == 1"

    def alerts(self) -> str:
        return f"max by (host, kind, severity) ({self._m('lpxtop_alert')}) > 0"

    def leftovers(self) -> str:
        return f"max by (host) ({self._m('lpxtop_leftover_processes')}) > 0"

    # ---- servers and GPUs without an lpxtop exporter ----

    def server_role(self, role: str) -> str:
        """Every server kind's gauge for `role` (waiting, running, kv_usage), by lpxtop's name table."""
        plain: list[str] = []
        matched: list[str] = []
        for kind in KINDS:
            for ref in getattr(kind, role):
                if ref.match:
                    matched.append(_ref_selector(ref, self.servers))
                else:
                    plain.append(re.escape(ref.name))
        terms = []
        if plain:
            terms.append(selector("", self.servers, f'__name__=~"{"|".join(dict.fromkeys(plain))}"'))
        terms += matched
        return " or ".join(terms)

    def server_ttft(self, kind_name: str, q: float) -> str | None:
        """A server's own TTFT quantile (from its histogram) over the window, by instance."""
        kind = next(k for k in KINDS if k.kind == kind_name)
        if kind.ttft is None:
            return None
        name = kind.ttft.names[0].name
        return (f"histogram_quantile({q:g}, sum by (instance, le) "
                f"(rate({selector(name + '_bucket', self.servers)}[{self.window}])))")

    def server_up(self) -> str:
        return f"max by (instance, job) ({selector('up', self.servers)})"

    def dcgm(self, metric: str) -> str:
        return selector(metric, self.servers)

    # ---- charts (query_range) ----

    def chart_quantile(self, measure: str, q: float) -> str:
        return (f"histogram_quantile({q:g}, sum by ({ROW}, le) "
                f"(rate({self._m(f'lpxtop_probe_{measure}_seconds_bucket')}[{self.chart_rate}])))")

    def chart_decode_rate(self) -> str:
        """Tokens/s of one stream at the median: 1 / TPOT p50 (the two are one transform apart)."""
        return f"1 / {self.chart_quantile('tpot', 0.5)}"

    # ---- listing ----

    def instant(self) -> dict[str, str]:
        """Every instant query of one refresh, by the figure it gives."""
        queries = {
            "rows": self.rows(),
            "up_now": self.up_now(),
            "status": self.status(),
            "urls": self.urls(),
            "exporters_up": self.exporters_up(),
            "probes": self.probes(),
            "errors": self.errors(),
            "tokens": self.tokens(),
        }
        for measure in MEASURES:
            for label, q in QUANTILES + (TPOT_LOW_QUANTILES if measure == "tpot" else ()):
                queries[f"{measure}_{label}"] = self.quantile(measure, q)
            queries[f"{measure}_mean"] = self.mean(measure)
            queries[f"{measure}_count"] = self.count(measure)
        for key, metric in GAUGES.items():
            queries[key] = self.gauge(metric)
        queries["gpu_per_endpoint"] = self.gpu_per_endpoint()
        for key, metric in GPU_GAUGES.items():
            queries[key] = self.gpu(metric)
        queries["gpu_processes"] = self.gpu_processes()
        queries["ports"] = self.ports()
        queries["alerts"] = self.alerts()
        queries["leftovers"] = self.leftovers()
        for role in SERVER_ROLES:
            queries[f"server_{role}"] = self.server_role(role)
        for kind in KINDS:
            for label, q in (("p50", 0.5), ("p99", 0.99)):
                query = self.server_ttft(kind.kind, q)
                if query is not None:
                    queries[f"server_ttft_{label}:{kind.kind}"] = query
        queries["server_up"] = self.server_up()
        for key, metric in OTHER_GPU_SERIES.items():
            queries[key] = self.dcgm(metric)
        return queries

    def charts(self) -> dict[str, str]:
        """The detail screen's charts (query_range), by the RangeSeries key they fill."""
        return {
            "ttft_p50_ms": self.chart_quantile("ttft", 0.5),
            "ttft_p99_ms": self.chart_quantile("ttft", 0.99),
            "e2e_p50_ms": self.chart_quantile("e2e", 0.5),
            "e2e_p99_ms": self.chart_quantile("e2e", 0.99),
            "itl_p50_ms": self.chart_quantile("itl", 0.5),
            "itl_p99_ms": self.chart_quantile("itl", 0.99),
            "decode_tokens_per_s": self.chart_decode_rate(),
            "requests_waiting": self.gauge("lpxtop_server_requests_waiting"),
            "requests_running": self.gauge("lpxtop_server_requests_running"),
            "kv_cache_usage": self.gauge("lpxtop_server_kv_cache_usage_ratio"),
        }


def _ref_selector(ref: Ref, matchers: str) -> str:
    return selector(ref.name, matchers, *(f'{k}="{v}"' for k, v in ref.match))


# Per-endpoint gauges of the exporter that the table shows, by the key the snapshot builder reads.
GAUGES: dict[str, str] = {
    "requests_waiting": "lpxtop_server_requests_waiting",
    "requests_running": "lpxtop_server_requests_running",
    "kv_cache_usage": "lpxtop_server_kv_cache_usage_ratio",
    "server_metrics_up": "lpxtop_server_metrics_up",
    "preemptions_total": "lpxtop_server_preemptions_total",
    "prompt_tokens_per_s": "lpxtop_server_prompt_tokens_per_second",
    "generation_tokens_per_s": "lpxtop_server_generation_tokens_per_second",
    "server_ttft_p50_s": "lpxtop_server_ttft_p50_seconds",
    "server_ttft_p99_s": "lpxtop_server_ttft_p99_seconds",
}
GPU_GAUGES: dict[str, str] = {
    "gpu_used": "lpxtop_gpu_memory_used_bytes",
    "gpu_total": "lpxtop_gpu_memory_total_bytes",
    "gpu_util": "lpxtop_gpu_utilization_ratio",
}
# GPUs of hosts without lpxtop: dcgm-exporter (MiB, %; labels gpu, UUID, modelName, Hostname) and
# nvitop-exporter (MiB, %; labels hostname, index, devicename, uuid).
OTHER_GPU_SERIES: dict[str, str] = {
    "dcgm_used_mib": "DCGM_FI_DEV_FB_USED",
    "dcgm_free_mib": "DCGM_FI_DEV_FB_FREE",
    "dcgm_util_pct": "DCGM_FI_DEV_GPU_UTIL",
    "nvitop_used_mib": "gpu_memory_used_MiB",
    "nvitop_total_mib": "gpu_memory_total_MiB",
    "nvitop_util_pct": "gpu_utilization_Percentage",
}
