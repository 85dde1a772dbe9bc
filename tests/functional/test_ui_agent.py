"""The agent probe on screen: the main table's step column, the detail screen's Agent tab (SVG snapshots
from fixed data), and the bar's arithmetic."""

from __future__ import annotations

from dataclasses import replace

import pytest
from rich.style import Style

from lpxtop.humanize import fmt_pair_ms
from lpxtop.ui.palette import Palette
from lpxtop.ui.widgets.agent_panel import AgentPanel, breakdown_bar, render_agent
from lpxtop.ui.widgets.endpoints_table import EndpointsTable, columns_for_width, error_pct
from lpxtop.ui.widgets.waterfall import render_waterfall, rows_of, shown_step
from tests.support.agent_snapshot_data import agent_snapshot, platform_snapshot
from tests.support.snapshot_data import NOW
from tests.support.ui import make_app, screen_lines, text_of

PALETTE = Palette(ok=Style(), warning=Style(), critical=Style(), muted=Style(), accent=Style(),
                  chart=((1, 1, 1), (2, 2, 2), (3, 3, 3), (4, 4, 4), (5, 5, 5)))


def test_step_column_only_with_agent_endpoints():
    assert "step" not in [c.key for c in columns_for_width(200)]
    assert "step" in [c.key for c in columns_for_width(200, agent=True)]
    assert "step" in [c.key for c in columns_for_width(78, agent=True)]  # shown at 80 columns too


def test_err_column_of_an_agent_only_endpoint_counts_its_steps():
    dify = agent_snapshot().endpoints[-1]
    assert dify.samples == () and dify.error_rate is None
    assert error_pct(dify) == 0.0  # not "--": the steps are its probes
    failed = replace(dify.agent.samples[0], error_kind="http_5xx", error_message="503")
    assert not failed.ok
    steps = (failed, *dify.agent.samples[1:4])
    assert error_pct(replace(dify, agent=replace(dify.agent, samples=steps))) == 25.0


def test_pair_format_fits_nine_cells():
    assert fmt_pair_ms(142.4, 318.0) == "142/318"
    assert fmt_pair_ms(900.0, 2400.0) == "0.9/2.4s"
    assert fmt_pair_ms(12_000.0, 46_000.0) == "12/46s"
    times = (1.0, 9.99, 999.4, 999.6, 9949.0, 9999.0, 99_999.0, 5_000_000.0)
    assert all(len(fmt_pair_ms(a, b)) <= 9 for a in times for b in times if a <= b)


def test_bar_is_exactly_as_wide_as_asked_and_in_proportion():
    bar = breakdown_bar({"prefill": 100.0, "decode": 200.0, "tool": 50.0, "outside": 50.0}, 40, PALETTE)
    line = bar.plain.splitlines()[0].strip()
    assert len(line) == 40
    legend = bar.plain.splitlines()[1]
    assert "decode 200 ms (50%)" in legend and "tool 50 ms (12%)" in legend
    assert "no fully measured step" in breakdown_bar({}, 40, PALETTE).plain


def test_agent_text_says_what_was_measured():
    snap = agent_snapshot()
    llama, dify = snap.endpoints[0], snap.endpoints[-1]
    text = render_agent(llama.agent, NOW, PALETTE, 120).plain
    assert "time to tool call" in text and "chain of 5 steps: p50" in text and "5 × p95 would say" in text
    assert "bad_tool_args 1" in text and "valid arguments: 97%" in text  # 29 of the window's 30 calls
    dify_text = render_agent(dify.agent, NOW, PALETTE, 120).plain
    assert "platform (its own)" in dify_text and "network and gateway (client − platform, mean): +14.0 ms" in dify_text
    assert "client-limited" not in text
    limited = replace(llama.agent, steps_client_limited=2)
    assert "2 client-limited (left out of the times)" in render_agent(limited, NOW, PALETTE, 120).plain
    assert "--probe agent" in render_agent(None, NOW, PALETTE).plain


async def test_main_table_shows_step_p50_p95():
    snapshot = agent_snapshot()
    _, app = make_app(snapshot)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        table = app.screen.query_one(EndpointsTable)
        assert "Step50/95" in [c.label for c in table.columns]
        step = snapshot.endpoints[-1].agent.step_ms
        assert table.get_cell("dify-support-bot", "step").strip() == fmt_pair_ms(step.p50, step.p95) == "1.1/1.1s"
        assert table.get_cell("vllm-llama", "step").strip().count("/") == 1
        assert table.get_cell("sglang-qwen", "step").strip() == ""


async def test_detail_opens_on_the_agent_tab_of_an_agent_only_endpoint():
    _, app = make_app(agent_snapshot())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        table = app.screen.query_one(EndpointsTable)
        await pilot.press(*(["down"] * table.row_names.index("dify-support-bot")), "enter")
        await pilot.pause()
        panel = app.screen.query_one(AgentPanel)
        assert "Dify app" in text_of(panel)
        assert app.screen.query_one("#detail-tabs").active == "tab-agent"


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_main_screen_with_agent_endpoints(snap_compare, size):
    _, app = make_app(agent_snapshot())
    assert snap_compare(app, terminal_size=size)


def test_agent_tab(snap_compare):
    _, app = make_app(agent_snapshot())
    # sorted by name: dify-support-bot, llamacpp-local, sglang-qwen, vllm-llama; the chat+agent one, then its tab
    assert snap_compare(app, press=["down", "down", "down", "enter", "right"], terminal_size=(160, 48))


def test_platform_tabs_say_where_each_figure_comes_from():
    *_, coze, flow = platform_snapshot().endpoints
    coze_text = render_agent(coze.agent, NOW, PALETTE, 78).plain
    assert "Coze bot: one request per step" in coze_text and "function_call message" in coze_text
    assert "completed_at − created_at" in coze_text and "whole seconds: ±1 s" in coze_text
    assert "network and gateway" not in coze_text  # no millisecond gap from a figure in whole seconds
    assert "~1s" in coze_text and "~ the platform counts whole seconds" in coze_text
    flow_text = render_agent(flow.agent, NOW, PALETTE, 78).plain
    assert "Dify workflow: node by node" in flow_text and "nodes over the window (p50 ms)" in flow_text
    assert "valid arguments" not in flow_text and "5 nodes, each timed" in flow_text
    table = flow_text[flow_text.index("nodes over the window"):].splitlines()
    assert [line.split()[0] for line in table[2:7]] == ["Start", "Decide", "Weather", "Answer", "End"]


def test_the_waterfall_puts_each_part_at_its_offset():
    *_, coze, flow = platform_snapshot().endpoints
    step = shown_step(flow.agent.samples)
    assert step is flow.agent.samples[-1]
    rows = rows_of(step)
    assert [r.label for r in rows] == ["Start", "Decide", "Weather API", "Answer", "End", "answer (text)", "workflow"]
    assert [(r.client_ms, r.platform_ms) for r in rows[:5]] == [(n.seen_ms, n.elapsed_ms) for n in step.nodes]
    lines = render_waterfall(step, NOW, PALETTE, 78).plain.splitlines()
    assert all(len(line) <= 78 for line in lines)
    bars = {line.split()[0]: line for line in lines[2:9]}
    # each bar begins at its offset: later nodes begin further right, the workflow from 0
    starts = [bars[name].index("█") for name in ("Start", "Decide", "Weather", "Answer", "End")]
    assert starts == sorted(starts) and starts[0] == bars["workflow"].index("█")
    coze_lines = render_waterfall(shown_step(coze.agent.samples), NOW, PALETTE, 78).plain
    assert "tool decision" in coze_lines and "░" in coze_lines  # the answer's wait for its first token


def test_an_unfinished_node_is_drawn_to_the_end_and_said():
    *_, flow = platform_snapshot().endpoints
    last = flow.agent.samples[-1]
    stalled = replace(last, error_kind="read_timeout", error_message="stalled", nodes=(
        *last.nodes[:3], replace(last.nodes[3], seen_ms=None, elapsed_ms=None, status="unfinished")), step_ms=None,
        client_latency_ms=None, answer_e2e_ms=None)
    text = render_waterfall(stalled, NOW, PALETTE, 78).plain
    assert "read_timeout" in text and "… never finished" in text
    answer = next(line for line in text.splitlines() if line.strip().startswith("Answer"))
    assert "░" in answer and answer.rstrip().endswith("--") and "…" in answer


@pytest.mark.parametrize("name", ["coze-weather-bot", "dify-weather-flow"])
async def test_platform_agent_tabs_read_at_80x24(name):
    _, app = make_app(platform_snapshot())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        table = app.screen.query_one(EndpointsTable)
        await pilot.press(*(["down"] * table.row_names.index(name)), "enter")
        await pilot.pause()
        assert app.screen.query_one("#detail-tabs").active == "tab-agent"
        panel = app.screen.query_one(AgentPanel)
        lines = text_of(panel).splitlines()
        # every line of the tab's own figures and the waterfall fits the panel: nothing cut
        width = panel.content_size.width
        start = next(i for i, line in enumerate(lines) if "the last step" in line)
        end = next(i for i, line in enumerate(lines) if "chain of" in line)
        assert all(len(line) <= width for line in lines[:end]), [line for line in lines[:end] if len(line) > width]
        assert any("platform" in line for line in lines[start:end])
        screen = "\n".join(screen_lines(app))
        assert "p50" in screen and "(its own)" in screen


def test_platform_agent_tab(snap_compare):
    _, app = make_app(platform_snapshot())
    # sorted by name: coze-weather-bot first; then the workflow, down the list
    assert snap_compare(app, press=["enter"], terminal_size=(80, 24))
