"""`lpxtop once` without --json: a plain table a person reads; and the exit status of `once`."""

from __future__ import annotations

from lpxtop.model.probe import Percentiles
from lpxtop.model.snapshot import Snapshot


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
    lines += _agent_table(snapshot)
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


def _agent_table(snapshot: Snapshot) -> list[str]:
    """The agent-step probe's figures (lpxtop/engine/agent), for the endpoints that have it."""
    headers = ["ENDPOINT", "API", "STEPS", "ERR", "TOOL NAME", "TOOL CALL", "TOOL", "ANSWER TTFT", "STEP p50/p95",
               "VALID", "CHAIN p50/p95"]
    rows = []
    for e in snapshot.endpoints:
        a = e.agent
        if a is None:
            continue
        chain = "--" if a.chain is None else f"{a.chain.steps}: {_ms_value(a.chain.p50_ms)}/{_ms_value(a.chain.p95_ms)}"
        rows.append([
            e.name, a.api, str(a.steps_sent), str(a.steps_sent - a.steps_ok), _ms(a.time_to_tool_name_ms),
            _ms(a.time_to_tool_call_ms), _ms(a.tool_ms), _ms(a.answer_ttft_ms),
            f"{_ms(a.step_ms)}/{_ms(a.step_ms, 'p95')}",
            "--" if a.tool_call_valid_pct is None else f"{a.tool_call_valid_pct:.0f}%", chain,
        ])
    if not rows:
        return []
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["", "agent steps (call 1: tool call, the tool, call 2: answer; p50 in ms unless marked):"]
    lines.append("  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    for e in snapshot.endpoints:
        if e.agent is not None and e.agent.last_error:
            lines.append(f"{e.name}: last agent error: {e.agent.last_error}")
    return lines


def _ms_value(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _gpu_line(snapshot: Snapshot) -> str:
    parts = []
    for d in snapshot.gpu.devices:
        mem = "--"
        if d.mem_used_bytes is not None and d.mem_total_bytes:
            mem = f"{d.mem_used_bytes / 2**30:.1f}/{d.mem_total_bytes / 2**30:.1f} GiB"
        parts.append(f"[{d.index}] {d.name} {_num(d.util_pct)}% {mem}")
    return "; ".join(parts)
