"""`lpxtop once` without --json: a plain table a person reads; and the exit status of `once`."""

from __future__ import annotations

from lpxtop.model.probe import Percentiles
from lpxtop.model.snapshot import EndpointView, Snapshot


def exit_status(snapshot: Snapshot) -> int:
    """0 when every endpoint answered, 1 when any endpoint is down."""
    return 1 if any(e.status in ("down", "pending") for e in snapshot.endpoints) else 0


def _ms(p: Percentiles | None, attr: str = "p50") -> str:
    if p is None:
        return "--"
    value = getattr(p, attr)
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _num(value: float | None, fmt: str = "{:.0f}") -> str:
    return "--" if value is None else fmt.format(value)


def render_table(snapshot: Snapshot) -> str:
    headers = ["ENDPOINT", "STATUS", "MODEL", "KIND", "TTFT p50", "TTFT p99", "ITL p50", "TPOT p50",
               "TOK/S", "E2E p99", "ERR", "QUEUE", "KV"]
    rows = []
    for e in snapshot.endpoints:
        server = e.server
        waiting = getattr(server, "requests_waiting", None) if server else None
        running = getattr(server, "requests_running", None) if server else None
        kv = getattr(server, "kv_cache_usage", None) if server else None
        queue = "--" if waiting is None and running is None else f"{_num(waiting)}/{_num(running)}"
        rate = e.error_rate
        rows.append([
            e.name,
            e.status,
            (e.model or "--")[:28],
            e.server_kind,
            _ms(e.ttft_ms),
            _ms(e.ttft_ms, "p99"),
            _ms(e.itl_ms),
            _ms(e.tpot_ms),
            _ms(e.output_tokens_per_s),
            _ms(e.e2e_ms, "p99"),
            "--" if rate is None else f"{rate * 100:.0f}%",
            queue,
            "--" if kv is None else f"{kv * 100:.0f}%",
        ])
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    lines.append("latency in ms; TOK/S is the decode rate one stream sees, (N-1)/(E2E-TTFT)")
    for e in snapshot.endpoints:
        server_line = _server_latency_line(e)
        if server_line:
            lines.append(server_line)
    for e in snapshot.endpoints:
        if e.last_error:
            lines.append(f"{e.name}: last error: {e.last_error}")
        if e.server is not None and e.server.status != "ok":
            lines.append(f"{e.name}: server metrics: {e.server.status}")
    lines.append(f"GPU: {snapshot.gpu.status if not snapshot.gpu.devices else _gpu_line(snapshot)}")
    for port in snapshot.ports:
        if port.status != "ok":
            lines.append(f"port {port.port}: {port.status}: {port.detail}")
    for alert in snapshot.alerts:
        lines.append(f"{alert.severity.upper()}: {alert.message}")
    return "\n".join(lines)


def _server_ms(value: float | None) -> str:
    return "--" if value is None else (f"{value:.0f}" if value >= 100 else f"{value:.2g}" if value < 1 else f"{value:.1f}")


def _server_latency_line(e: EndpointView) -> str | None:
    """The server's own TTFT and queue time (exact means, `~` estimated quantiles with their ranges) and
    the time outside the engine with its method, or why it is not shown."""
    server = e.server
    if server is None or not server.ok:
        return None
    parts = []
    for label, latency in (("TTFT", server.server_ttft_ms), ("queue", server.server_queue_ms)):
        if latency is None or not latency.count:
            continue
        text = f"{label} mean {_server_ms(latency.mean)}"
        if latency.p99 is not None:
            high = latency.p99_range[1] if latency.p99_range else None
            if high is not None and latency.p99 >= high:
                text += f" p99 <= {_server_ms(high)}"  # the estimate is the most it can be
            else:
                text += f" p99 ~{_server_ms(latency.p99)}" + (f" (<= {_server_ms(high)})" if high is not None else "")
        parts.append(text)
    gap = e.ttft_gap
    if gap.value_ms is not None:
        how = "estimate" if gap.estimate else "exact"
        parts.append(f"outside engine {'~' if gap.estimate else ''}{gap.value_ms:+.1f} ({how}, {gap.probes} probes)")
    elif parts:
        parts.append(f"outside engine --: {gap.reason}")
    return f"{e.name}: server {', '.join(parts)}" if parts else None


def _gpu_line(snapshot: Snapshot) -> str:
    parts = []
    for d in snapshot.gpu.devices:
        mem = "--"
        if d.mem_used_bytes is not None and d.mem_total_bytes:
            mem = f"{d.mem_used_bytes / 2**30:.1f}/{d.mem_total_bytes / 2**30:.1f} GiB"
        parts.append(f"[{d.index}] {d.name} {_num(d.util_pct)}% {mem}")
    return "; ".join(parts)
