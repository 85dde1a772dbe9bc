"""`lpxtop once` without --json: a plain table a person reads; and the exit status of `once`.

Every piece of text that came from outside (model ids, server messages, process command lines, GPU
names) was made safe where it entered lpxtop's records (`lpxtop.textsafe.scrub`); the table passes it
through `printable` once more at its edge, so no escape sequence reaches the terminal even if a path
upstream forgot. Numbers that are not finite print as `--`.
"""

from __future__ import annotations

from lpxtop.model.agent import AgentView
from lpxtop.model.chain import ChainSummary
from lpxtop.model.endpoint import PLATFORM_APIS
from lpxtop.model.energy import EndpointEnergy
from lpxtop.model.probe import Percentiles
from lpxtop.model.snapshot import EndpointView, GaugeSummary, ServerSummary, Snapshot
from lpxtop.numbers import is_finite
from lpxtop.textsafe import printable


def _text(value: object) -> str:
    return printable(str(value))


def exit_status(snapshot: Snapshot) -> int:
    """0 when every endpoint answered, 1 when any endpoint is down."""
    return 1 if any(e.status in ("down", "pending") for e in snapshot.endpoints) else 0


def _ms(p: Percentiles | None, attr: str = "p50") -> str:
    if p is None:
        return "--"
    value = getattr(p, attr)
    if not is_finite(value):
        return "--"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _num(value: float | None, fmt: str = "{:.0f}") -> str:
    return fmt.format(value) if is_finite(value) else "--"


def _pct(value: float | None) -> str:
    return f"{value * 100:.0f}%" if is_finite(value) and is_finite(value * 100) else "--"


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
            _text(e.name),
            e.status,
            _text(e.model or "--")[:28],
            _text(e.server_kind),
            _ms(e.ttft_ms),
            _ms(e.ttft_ms, "p99"),
            _ms(e.itl_ms),
            _ms(e.tpot_ms),
            _ms(e.output_tokens_per_s),
            _ms(e.e2e_ms, "p99"),
            _pct(rate),
            queue,
            _pct(kv),
        ])
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    lines.append("latency in ms; TOK/S is the decode rate one stream sees, (N-1)/(E2E-TTFT); "
                 "QUEUE waiting/running and KV from the last scrape")
    lines += _agent_table(snapshot)
    for e in snapshot.endpoints:
        name = _text(e.name)
        if e.server_summary is not None:
            lines.append(f"{name}: {_server_line(e.server_summary)}")
        if e.probes_client_limited:
            # counted when asked (--include-client-limited), or when no other probe succeeded
            counted = "counted in the percentiles" if e.percentiles_with_client_limited else "left out of the percentiles"
            lines.append(f"{name}: {e.probes_client_limited} of {e.probes_sent} probes client-limited (lpxtop "
                         f"itself was late: its loop, or its wait for a CPU); {counted}")
        server_line = _server_latency_line(e)
        if server_line:
            lines.append(server_line)
        if e.chain is not None:
            lines.append(f"{name}: {_chain_line(e.chain)}")
        if e.last_error:
            lines.append(f"{name}: last error: {_text(e.last_error)}")
        if e.server is not None and e.server.status != "ok":
            lines.append(f"{name}: server metrics: {_text(e.server.status)}")
        if e.energy is not None:
            lines.append(f"{name}: {_energy_line(e.energy)}")
    lines.append(f"GPU: {_text(snapshot.gpu.status) if not snapshot.gpu.devices else _gpu_line(snapshot)}")
    for port in snapshot.ports:
        if port.status != "ok":
            lines.append(f"port {port.port}: {_text(port.status)}: {_text(port.detail)}")
    for alert in snapshot.alerts:
        lines.append(f"{_text(alert.severity).upper()}: {_text(alert.message)}")
    return "\n".join(lines)


def _server_line(summary: ServerSummary) -> str:
    """What the server showed across the run: last, max and mean of each gauge over the scrapes."""

    def gauge(label: str, g: GaugeSummary | None, pct: bool = False) -> str | None:
        if g is None:
            return None
        show = _pct if pct else (lambda v: _num(v, "{:.1f}") if is_finite(v) and v != int(v) else _num(v))
        return f"{label} last {show(g.last)} max {show(g.max)} mean {_pct(g.mean) if pct else _num(g.mean, '{:.1f}')}"

    parts = [p for p in (gauge("running", summary.requests_running), gauge("waiting", summary.requests_waiting),
                         gauge("KV", summary.kv_cache_usage, pct=True)) if p]
    scrapes = f"{summary.scrapes} scrape{'s' if summary.scrapes != 1 else ''}"
    return f"server over {scrapes} while probing: " + ("; ".join(parts) if parts else "no queue or KV gauges")


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
    lines = ["", "agent steps (chat: call 1 tool call, the tool, call 2 answer; a platform: one request; p50 in ms "
             "unless marked):"]
    lines.append("  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    for e in snapshot.endpoints:
        if e.agent is not None and e.agent.api in PLATFORM_APIS:
            lines += _platform_lines(e.name, e.agent)
        if e.agent is not None and e.agent.last_error:
            lines.append(f"{e.name}: last agent error: {e.agent.last_error}")
    return lines


def _platform_lines(name: str, agent: AgentView) -> list[str]:
    """An agent platform's own figures beside the client's, and a workflow's nodes (p50, ms)."""
    lines = []
    if agent.app_latency_ms is not None:
        coarse = agent.app_latency_resolution_ms is not None
        own = f"{agent.app_latency_ms.p50 / 1000:.0f} s (whole seconds)" if coarse else f"{_ms(agent.app_latency_ms)} ms"
        extra = f", its model's TTFT {_ms(agent.app_ttft_ms)} ms" if agent.app_ttft_ms is not None else ""
        lines.append(f"{name}: the platform's own time p50 {own}{extra}; the client's to its end "
                     f"{_ms(agent.client_latency_ms)} ms")
    if agent.nodes:
        nodes = ", ".join(f"{printable(n.title)[:40]} {_ms(n.elapsed_ms)}/{_ms(n.seen_ms)}" for n in agent.nodes)
        lines.append(f"{name}: nodes (p50 ms, platform/client): {nodes}")
    return lines


def _ms_value(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _server_ms(value: float | None) -> str:
    if not is_finite(value):
        return "--"
    assert value is not None
    return f"{value:.0f}" if value >= 100 else f"{value:.2g}" if value < 1 else f"{value:.1f}"


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
    if is_finite(gap.value_ms):
        how = "estimate" if gap.estimate else "exact"
        parts.append(f"outside engine {'~' if gap.estimate else ''}{gap.value_ms:+.1f} ({how}, {gap.probes} probes)")
    elif parts:
        parts.append(f"outside engine --: {gap.reason}")
    return f"{_text(e.name)}: server {', '.join(parts)}" if parts else None


def _chain_line(chain: ChainSummary) -> str:
    """How many probes joined their server spans (--traces-listen), and what the spans said."""
    sent = chain.probes_joined + chain.probes_unjoined + chain.probes_pending
    text = f"server spans: {chain.probes_joined} of {sent} probes joined"
    if chain.unjoined_reasons:
        text += " (unjoined: " + ", ".join(f"{k} {n}" for k, n in sorted(chain.unjoined_reasons.items())) + ")"
    parts = [f"{label} p50 {_ms(p)}" for label, p in (("queue", chain.queue_ms), ("prefill", chain.prefill_ms),
                                                       ("server TTFT", chain.server_ttft_ms),
                                                       ("outside", chain.outside_ms)) if p is not None]
    return text + ("; " + ", ".join(parts) + " ms" if parts else "")


def _gpu_line(snapshot: Snapshot) -> str:
    parts = []
    for d in snapshot.gpu.devices:
        mem = "--"
        if is_finite(d.mem_used_bytes) and is_finite(d.mem_total_bytes) and d.mem_total_bytes:
            mem = f"{d.mem_used_bytes / 2**30:.1f}/{d.mem_total_bytes / 2**30:.1f} GiB"
        power = "--"
        if is_finite(d.power_w):
            power = f"{d.power_w:.0f}/{d.power_limit_w:.0f} W" if is_finite(d.power_limit_w) else f"{d.power_w:.0f} W"
        word = f" {d.throttle_word}" if d.throttle_word else ""
        parts.append(f"[{d.index}] {_text(d.name)} {_num(d.util_pct)}% {mem} {power}{word}")
    return "; ".join(parts)


def _energy_line(energy: EndpointEnergy) -> str:
    """J/token of the endpoint's GPUs, or why there is none."""
    gpus = ", ".join(energy.gpus) or "no GPU"
    if energy.joules_per_output_token is None:
        return f"energy per output token --: {_text(energy.reason or 'unknown')}"
    shared = f", shared with {', '.join(energy.shared_with)}" if energy.shared_with else ""
    basis = " (all GPUs: the only endpoint)" if energy.basis == "only_endpoint" else ""
    estimate = " (from power readings)" if energy.source == "power" else ""
    return (f"energy per output token {energy.joules_per_output_token:.3g} J{estimate} over {energy.span_s:.0f} s, "
            f"{gpus}{basis}{shared}, mean {energy.mean_power_w:.0f} W")
