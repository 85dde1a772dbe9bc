"""The agent-step probe on screen: the main table's `Step50/95` cell and the detail screen's Agent tab.

The tab shows where an agent step's milliseconds go: each measured time as p50/p95/p99 (an agent
platform's own figures beside the client's), the last step as a waterfall (waterfall.py: each node, or
tool decision, tool and answer, as a bar at its offset), a Dify workflow's nodes over the window, the
chain budget (N steps at today's p50 and p95, from the window's own samples), and a breakdown bar of the
mean step (queueing and prefill, decode, the tool, time outside the engine) so a user sees what to attack.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from lpxtop.humanize import UNKNOWN, fmt_ago, fmt_ms
from lpxtop.model.agent import SEGMENT_LABELS, SEGMENTS, SPAN_SEGMENT_LABELS, SPAN_SEGMENTS, AgentView
from lpxtop.model.endpoint import PLATFORM_APIS
from lpxtop.model.platform import NodeSummary
from lpxtop.model.probe import Percentiles
from lpxtop.model.snapshot import EndpointView
from lpxtop.ui.formatting import truncate
from lpxtop.ui.palette import Palette
from lpxtop.ui.widgets.waterfall import render_waterfall, shown_step

BAR_MIN_WIDTH = 20
HEADLINES = {
    "dify": "Dify app: one request per step",
    "dify-workflow": "Dify workflow: node by node",
    "coze": "Coze bot: one request per step",
}


def _with_unit(value: float) -> str:
    text = fmt_ms(value)
    return text if text.endswith("s") else f"{text} ms"


def _row(text: Text, label: str, p: Percentiles | None, palette: Palette, note: str = "") -> None:
    text.append(f"  {label:<22}")
    if p is None:
        text.append(f"{UNKNOWN:>7} {UNKNOWN:>7} {UNKNOWN:>7}", style=palette.muted)
    else:
        text.append(f"{fmt_ms(p.p50):>7} {fmt_ms(p.p95):>7} {fmt_ms(p.p99):>7}")
    if note:
        text.append(f"   {note}", style=palette.muted)
    text.append("\n")


def _segment_styles(palette: Palette) -> dict[str, str]:
    colors = [f"rgb({r},{g},{b})" for r, g, b in palette.chart]
    return {"prefill": colors[0], "decode": colors[2], "tool": colors[1], "outside": colors[4 % len(colors)],
            "queue": colors[3 % len(colors)]}


def breakdown_bar(breakdown: dict[str, float], width: int, palette: Palette,
                  segments: tuple[str, ...] = SEGMENTS, labels: dict[str, str] = SEGMENT_LABELS) -> Text:
    """One line of `width` cells split in proportion to the mean step's segments, then a legend line."""
    text = Text(no_wrap=True, overflow="ellipsis")
    total = sum(breakdown.get(s, 0.0) for s in segments)
    if total <= 0:
        text.append("  no fully measured step in the window yet", style=palette.muted)
        return text
    width = max(BAR_MIN_WIDTH, width)
    styles = _segment_styles(palette)
    cells = {s: breakdown.get(s, 0.0) / total * width for s in segments}
    # whole cells by largest remainder, so the bar is exactly `width` wide
    counts = {s: int(v) for s, v in cells.items()}
    for s in sorted(segments, key=lambda s: cells[s] - counts[s], reverse=True)[: width - sum(counts.values())]:
        counts[s] += 1
    text.append("  ")
    for s in segments:
        text.append("█" * counts[s], style=styles[s])
    text.append("\n  ")
    for s in segments:
        share = breakdown.get(s, 0.0) / total * 100
        text.append("■ ", style=styles[s])
        text.append(f"{labels[s]} {_with_unit(breakdown.get(s, 0.0))} ({share:.0f}%)   ")
    return text


def render_agent(agent: AgentView | None, now: float, palette: Palette, width: int = 100) -> Text:
    """The Agent tab's text."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if agent is None:
        text.append("The agent-step probe is off for this endpoint: start lpxtop with --probe agent "
                    "(or probe = [\"chat\", \"agent\"] in the config file).", style=palette.muted)
        return text
    what = HEADLINES.get(agent.api, "call 1 (tool call) → tool → call 2 (answer)")
    text.append(f"agent steps  {what}  ", style="bold")
    text.append(f"{agent.steps_sent} sent, {agent.steps_ok} ok, {agent.steps_failed} not", style=palette.muted)
    if agent.steps_client_limited:  # lpxtop itself was late during these: left out of the times
        what = "counted in the times" if agent.percentiles_with_client_limited else "left out of the times"
        text.append(f", {agent.steps_client_limited} client-limited ({what})", style=palette.warning)
    if agent.in_flight:
        text.append("  (a step is running)", style=palette.muted)
    text.append("\n")
    valid = agent.tool_call_valid_pct
    if agent.api == "dify-workflow":  # a workflow's tools take no arguments lpxtop sees
        text.append(f"  {len(agent.nodes)} nodes, each timed by the platform and by lpxtop")
    else:
        text.append("  tool calls with valid arguments: ")
        text.append("--" if valid is None else f"{valid:.0f}%",
                    style=palette.muted if valid is None else (palette.ok if valid >= 99.5 else palette.warning))
    if agent.errors:
        text.append("   errors: ")
        text.append(", ".join(f"{k} {n}" for k, n in sorted(agent.errors.items())), style=palette.critical)
    text.append("\n\n")
    text.append(f"  {'ms':<22}{'p50':>7} {'p95':>7} {'p99':>7}\n", style=palette.muted)
    if agent.api in PLATFORM_APIS:
        _platform_rows(text, agent, palette)
    else:
        _row(text, "time to tool name", agent.time_to_tool_name_ms, palette, "first delta naming the function")
        _row(text, "time to tool call", agent.time_to_tool_call_ms, palette, "last argument fragment")
        _row(text, "call 1 E2E", agent.call1_e2e_ms, palette)
        _row(text, "tool", agent.tool_ms, palette, "lpxtop's simulated tool")
        _row(text, "answer TTFT", agent.answer_ttft_ms, palette, "call 2, from its send")
        _row(text, "answer E2E", agent.answer_e2e_ms, palette, "call 2, from its send")
        _row(text, "step", agent.step_ms, palette, "call 1's send to the answer's last token")
    text.append("\n")
    step = shown_step(agent.samples)
    if step is not None:
        text.append_text(render_waterfall(step, now, palette, width))
        text.append("\n")
    if agent.nodes:
        text.append_text(nodes_table(agent.nodes, palette, width))
        text.append("\n")
    chain = agent.chain
    text.append(f"  chain of {agent.chain_steps} steps: ", style="bold")
    if chain is None:
        text.append("no step measured yet", style=palette.muted)
    else:
        text.append(f"p50 {_with_unit(chain.p50_ms)}, p95 {_with_unit(chain.p95_ms)}", style="bold")
        method = "all chains enumerated" if chain.exact else f"{chain.draws} random chains, fixed seed"
        text.append(f"  (from {chain.samples} step samples, {method}", style=palette.muted)
        if agent.step_ms is not None:
            text.append(f"; {chain.steps} × p95 would say {_with_unit(chain.steps * agent.step_ms.p95)}",
                        style=palette.muted)
        text.append(")", style=palette.muted)
    text.append("\n\n  where a step's time goes (mean over the window):\n", style="bold")
    text.append_text(breakdown_bar(dict(agent.breakdown_ms), width - 6, palette))
    text.append("\n")
    if agent.span_breakdown_ms:  # --traces-listen: the calls' own server spans say where the TTFTs went
        text.append(f"\n  the same by the calls' own server spans ({agent.span_breakdown_steps} steps with both "
                    "calls joined):\n", style="bold")
        text.append_text(breakdown_bar(dict(agent.span_breakdown_ms), width - 6, palette, SPAN_SEGMENTS,
                                       SPAN_SEGMENT_LABELS))
        text.append("\n")
    errors = agent.recent_errors
    if errors:
        text.append("\n  last errors\n", style="bold")
        for step in reversed(errors[-5:]):
            text.append(f"  {fmt_ago(step.wall_time, now):>8}  ")
            text.append(f"{step.error_kind or '?':<17}", style=palette.critical)
            text.append(truncate(step.error_message or "", max(20, width - 32)) + "\n")
    return text


def _platform_rows(text: Text, agent: AgentView, palette: Palette) -> None:
    """An agent platform's figures: the client's, then the platform's own beside them."""
    workflow = agent.api == "dify-workflow"
    if not workflow:
        _row(text, "time to tool decision", agent.time_to_tool_call_ms, palette,
             "function_call message" if agent.api == "coze" else "agent_thought naming a tool")
        _row(text, "time to tool result", agent.time_to_observation_ms, palette,
             "tool_response message" if agent.api == "coze" else "agent_thought's observation")
        _row(text, "tool", agent.tool_ms, palette, "decision to result")
    elif agent.tool_ms is not None:
        _row(text, "tool node", agent.tool_ms, palette, "its first Tool node")
    _row(text, "answer TTFT", agent.answer_ttft_ms, palette, "first text_chunk" if workflow else "from the request")
    if agent.app_ttft_ms is not None:
        _row(text, "  model TTFT (its own)", agent.app_ttft_ms, palette, "usage.time_to_first_token")
    _row(text, "answer E2E", agent.answer_e2e_ms, palette, "from the request")
    end = {"coze": "chat.completed", "dify-workflow": "workflow_finished"}.get(agent.api, "message_end")
    own = {"coze": "completed_at − created_at", "dify-workflow": "its elapsed_time"}.get(
        agent.api, "message_end usage.latency")
    if workflow:
        _row(text, "step", agent.step_ms, palette, f"to {end}")
    _row(text, "platform (its own)", agent.app_latency_ms, palette, own)
    _row(text, "client", agent.client_latency_ms, palette, f"{end} arrived")
    resolution = agent.app_latency_resolution_ms
    if resolution is not None:
        text.append(f"  the platform's own time is in whole seconds: ±{resolution / 1000:g} s\n", style=palette.muted)
    elif agent.app_latency_ms is not None and agent.client_latency_ms is not None:
        gap = agent.client_latency_ms.mean - agent.app_latency_ms.mean
        text.append(f"  network and gateway (client − platform, mean): {gap:+.1f} ms\n", style=palette.accent)
    if not workflow:
        _row(text, "step", agent.step_ms, palette, "to the answer's last token")


def nodes_table(nodes: tuple[NodeSummary, ...], palette: Palette, width: int) -> Text:
    """A workflow's nodes over the window, in execution order: p50 offset, the platform's time and the
    client's, and the runs that did not succeed."""
    text = Text(no_wrap=True, overflow="ellipsis")
    title = max(10, min(24, width - 50))
    text.append("  nodes over the window (p50 ms)\n", style="bold")
    text.append(f"  {'node':<{title}} {'type':<10}{'at':>7}{'platform':>9}{'client':>8}  runs err\n",
                style=palette.muted)
    for node in nodes:
        def p50(p: Percentiles | None) -> str:
            return fmt_ms(p.p50) if p is not None else UNKNOWN

        text.append(f"  {truncate(node.title, title):<{title}} {truncate(node.node_type, 9):<10}"
                    f"{p50(node.offset_ms):>7}")
        text.append(f"{p50(node.elapsed_ms):>9}", style=palette.accent)
        text.append(f"{p50(node.seen_ms):>8}  {node.runs:>4} ")
        text.append(f"{node.errors:>3}\n", style=palette.critical if node.errors else palette.muted)
    return text


class AgentPanel(Static):
    """The detail screen's Agent tab: re-rendered with each snapshot of its endpoint."""

    DEFAULT_CSS = """
    AgentPanel {
        padding: 1 1;
        height: auto;
    }
    """

    _shown: tuple[EndpointView, float, Palette] | None = None

    def show(self, view: EndpointView, now: float, palette: Palette) -> None:
        self._shown = (view, now, palette)
        # before its first layout the panel has no size: the app's width less the tab's margins and scrollbar;
        # on_resize draws it again at its real width
        width = self.content_size.width or self.app.size.width - 6
        self.update(render_agent(view.agent, now, palette, width))

    def on_resize(self) -> None:
        if self._shown is not None:
            self.show(*self._shown)
