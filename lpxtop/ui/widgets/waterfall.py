"""One agent step as a waterfall: each part (a workflow's node, the tool decision, the tool, the answer) as a
bar at its offset from the request's send, with the client's time and the platform's own side by side.

The rows come from the step's own fields (lpxtop/model/agent.py, lpxtop/model/platform.py):

- an OpenAI-style step: call 1, the tool (lpxtop's), call 2;
- a Dify app or a Coze bot: the tool decision (send to the decision), the tool (decision to its result),
  the answer (`░` waiting for its first token, `█` from the first to the last), and the step to the end
  event; the platform's column holds what the platform itself reported (the model's own TTFT + generation
  time for a Dify app's answer; its whole time for the step, in whole seconds for Coze: `~`);
- a Dify workflow: one row per node run, the client's time between its events beside the platform's
  `elapsed_time`, the streamed answer, and the whole workflow.

Every line fits the width it is given (80 columns and up) without wrapping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rich.text import Text

from lpxtop.humanize import UNKNOWN, fmt_ago, fmt_ms
from lpxtop.model.agent import AgentStep
from lpxtop.model.endpoint import PLATFORM_APIS
from lpxtop.ui.formatting import truncate
from lpxtop.ui.palette import Palette

LABEL = 16
NUMBER = 7
MIN_BAR = 12
MAX_ROWS = 24  # a workflow's node runs shown; the rest are counted


@dataclass(frozen=True)
class Row:
    label: str
    start_ms: float  # from the request's send
    end_ms: float
    client_ms: float | None
    platform_ms: float | None = None
    platform_coarse: bool = False  # the platform's figure is in whole seconds
    wait_until_ms: float | None = None  # drawn light up to here (waiting for a first token), solid after
    failed: bool = False
    unfinished: bool = False


def rows_of(step: AgentStep) -> list[Row]:
    """The waterfall rows of one step (empty when nothing of it was measured)."""
    if step.api == "dify-workflow":
        return _workflow_rows(step)
    if step.api in PLATFORM_APIS:
        return _platform_rows(step)
    return _chat_rows(step)


def _chat_rows(step: AgentStep) -> list[Row]:
    rows = []
    if step.call1_e2e_ms is not None:
        rows.append(Row("call 1", 0.0, step.call1_e2e_ms, step.call1_e2e_ms, wait_until_ms=step.call1_ttft_ms))
    if step.tool_ms is not None and step.call2_start_ms is not None:
        rows.append(Row(f"tool {step.tool_name or ''}".strip(), step.call2_start_ms - step.tool_ms,
                        step.call2_start_ms, step.tool_ms))
    if step.call2_start_ms is not None and step.answer_e2e_ms is not None:
        start = step.call2_start_ms
        ttft = start + step.answer_ttft_ms if step.answer_ttft_ms is not None else None
        rows.append(Row("call 2", start, start + step.answer_e2e_ms, step.answer_e2e_ms, wait_until_ms=ttft))
    if rows and step.step_ms is not None:
        rows.append(Row("step", 0.0, step.step_ms, step.step_ms))
    return rows


def _platform_rows(step: AgentStep) -> list[Row]:
    rows = []
    decided, observed = step.time_to_tool_call_ms, step.time_to_observation_ms
    if decided is not None:
        rows.append(Row("tool decision", 0.0, decided, decided))
        if observed is not None:
            rows.append(Row(f"tool {step.tool_name or ''}".strip(), decided, observed, step.tool_ms))
    if step.answer_ttft_ms is not None and step.answer_e2e_ms is not None:
        begin = observed if observed is not None else 0.0
        own = None
        if step.app_ttft_ms is not None and step.app_generate_ms is not None:
            own = step.app_ttft_ms + step.app_generate_ms
        rows.append(Row("answer", begin, step.answer_e2e_ms, step.answer_e2e_ms - begin, own,
                        wait_until_ms=step.answer_ttft_ms))
    end = step.client_latency_ms if step.client_latency_ms is not None else step.step_ms
    if rows and end is not None:
        rows.append(Row("step (to end)", 0.0, end, end, step.app_latency_ms,
                        platform_coarse=step.app_latency_resolution_ms is not None))
    return rows


def _workflow_rows(step: AgentStep) -> list[Row]:
    rows = []
    last = max([step.client_latency_ms or 0.0, step.answer_e2e_ms or 0.0]
               + [(n.start_ms or 0.0) + (n.seen_ms or 0.0) for n in step.nodes])
    for node in step.nodes[:MAX_ROWS]:
        if node.start_ms is None:
            continue
        unfinished = node.seen_ms is None
        end = last if unfinished else node.start_ms + node.seen_ms  # type: ignore[operator]
        rows.append(Row(node.title, node.start_ms, end, node.seen_ms, node.elapsed_ms, failed=not node.ok,
                        unfinished=unfinished))
    if step.answer_ttft_ms is not None and step.answer_e2e_ms is not None:
        rows.append(Row("answer (text)", step.answer_ttft_ms, step.answer_e2e_ms,
                        step.answer_e2e_ms - step.answer_ttft_ms))
    if rows and step.client_latency_ms is not None:
        rows.append(Row("workflow", 0.0, step.client_latency_ms, step.client_latency_ms, step.app_latency_ms))
    return rows


def shown_step(steps: tuple[AgentStep, ...]) -> AgentStep | None:
    """The step to draw: the newest that succeeded, else the newest with anything measured."""
    for want_ok in (True, False):
        for step in reversed(steps):
            if (step.ok or not want_ok) and rows_of(step):
                return step
    return None


def _number(value: float | None, coarse: bool = False) -> str:
    if value is None:
        return UNKNOWN
    text = f"{value / 1000:.0f}s" if coarse else fmt_ms(value)
    return ("~" + text) if coarse else text


def render_waterfall(step: AgentStep, now: float, palette: Palette, width: int) -> Text:
    """The waterfall of `step` in lines of at most `width` cells."""
    text = Text(no_wrap=True, overflow="ellipsis")
    rows = rows_of(step)
    width = max(60, width)
    bar_width = max(MIN_BAR, width - 2 - LABEL - 1 - (NUMBER + 1) - (NUMBER + 2))
    total = max((r.end_ms for r in rows), default=0.0)
    what = "ok" if step.ok else step.error_kind or "failed"
    text.append(f"  the last step ({fmt_ago(step.wall_time, now)}, {what}): where its time went\n", style="bold")
    scale = f"0{fmt_ms(total) + ' ms' if total < 1000 else fmt_ms(total):>{bar_width - 1}}"
    head = f"  {'':<{LABEL}} {scale}{'client':>{NUMBER + 1}}{'platform':>{NUMBER + 2}}"
    text.append(head[:width] + "\n", style=palette.muted)
    chart = [f"rgb({r},{g},{b})" for r, g, b in palette.chart]
    for i, row in enumerate(rows):
        text.append(f"  {truncate(row.label, LABEL):<{LABEL}} ")
        a = _cell(row.start_ms, total, bar_width)
        b = max(a + 1, min(bar_width, math.ceil(row.end_ms / total * bar_width) if total > 0 else 1))
        light = b if row.unfinished else a
        if row.wait_until_ms is not None and not row.unfinished:
            light = min(b, max(a, _cell(row.wait_until_ms, total, bar_width)))
        style = palette.critical if row.failed else chart[i % len(chart)]
        text.append(" " * a)
        text.append("░" * (light - a), style=style)
        text.append("█" * (b - light), style=style)
        text.append(" " * (bar_width - b))
        client = "…" if row.unfinished else _number(row.client_ms)
        text.append(f"{client:>{NUMBER + 1}}")
        text.append(f"{_number(row.platform_ms, row.platform_coarse):>{NUMBER + 2}}\n",
                    style=palette.accent if row.platform_ms is not None else palette.muted)
    more = step.nodes_left_out + max(0, len(step.nodes) - MAX_ROWS)
    unstarted = sum(1 for n in step.nodes[:MAX_ROWS] if n.start_ms is None)
    if more:
        text.append(f"  … and {more} more node runs not shown\n", style=palette.muted)
    if unstarted:
        text.append(f"  {unstarted} node runs without a node_started event not drawn\n", style=palette.muted)
    notes = []
    if any(r.wait_until_ms is not None for r in rows):
        notes.append("░ waiting for the first token")
    if any(r.platform_coarse for r in rows):
        notes.append("~ the platform counts whole seconds")
    if any(r.unfinished for r in rows):
        notes.append("… never finished")
    if notes:
        text.append("  " + "; ".join(notes) + "\n", style=palette.muted)
    return text


def _cell(ms: float, total: float, bar_width: int) -> int:
    if total <= 0:
        return 0
    return max(0, min(bar_width - 1, int(ms / total * bar_width)))
