"""What a new user meets first, driven through the real app with its pilot at 80×24 and wider: Ctrl+C,
columns kept by priority, help and alerts that wrap instead of being cut, the detail summary's figures
whole, the ports panel's command, no GPU, NO_COLOR, charts that read like numbers, the sort's direction,
and ← → on the detail tabs whatever has the focus."""

from __future__ import annotations

from dataclasses import replace

import pytest
from rich.style import Style
from textual.widgets import DataTable, Input, Static, TabbedContent

from lpxtop.model.alerts import Alert
from lpxtop.model.gpu import GpuSnapshot
from lpxtop.model.ports import PortStatus
from lpxtop.record.replay import ReplaySource
from lpxtop.ui.app import create_app
from lpxtop.ui.screens.detail import DetailScreen
from lpxtop.ui.screens.help import HelpScreen
from lpxtop.ui.screens.main import MainScreen
from lpxtop.ui.widgets.charts import ChartSpec, Series, build_chart, nice_ticks, tick_text
from lpxtop.ui.widgets.endpoints_table import EndpointsTable
from lpxtop.ui.widgets.ports_panel import PortsPanel, rows_from
from tests.support.paths import FIXTURES
from tests.support.snapshot_data import empty_snapshot, fixed_snapshot
from tests.support.ui import make_app, screen_lines, text_of

SIZES = [(80, 24), (120, 40), (200, 60)]
size_ids = [f"{w}x{h}" for w, h in SIZES]
ANSI = __import__("re").compile(r"\x1b\[[0-9;]*m")


# Ctrl+C


@pytest.mark.parametrize("keys", [(), ("enter",), ("question_mark",), ("slash", "x")],
                         ids=["main", "detail", "help", "filter-field"])
async def test_ctrl_c_quits_as_q_does(keys):
    _, app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        for key in keys:
            await pilot.press(key)
        await pilot.pause()
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert not app.is_running
    assert app.return_code == 0  # as q: a clean exit, not Textual's "press ctrl+q" notice


async def test_ctrl_c_quits_a_replay():
    source = ReplaySource(FIXTURES / "recordings" / "v1-sim.lpxrec", playing=False)
    app = create_app(source, poll=False, ssh=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert not app.is_running


# The endpoints table at 80 columns


def _agent_snapshot():
    from tests.support.agent_snapshot_data import agent_snapshot

    return agent_snapshot()


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
async def test_queue_and_kv_are_kept_before_agent_columns(size):
    _, app = make_app()
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        table = app.screen.query_one(EndpointsTable)
        keys = [c.key for c in table.columns]
        assert {"status", "name", "ttft50", "ttft99", "tps", "err", "queue", "kv"} <= set(keys)
        assert "step" not in keys  # no endpoint runs agent steps: no agent column
        width = sum(c.width + 2 for c in table.columns)
        assert width <= table.size.width, (width, table.size.width)  # nothing cut at the right edge
        lines = screen_lines(app)
        header = next(line for line in lines if "TTFT50" in line)
        assert "Q w/r" in header and header.rstrip().endswith("│")
        assert "KV" in header


async def test_agent_columns_come_with_an_agent_endpoint_and_after_queue_and_kv():
    _, app = make_app(_agent_snapshot())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        keys = [c.key for c in app.screen.query_one(EndpointsTable).columns]
        assert "queue" in keys and "kv" in keys
        assert "step" in keys  # 80 columns hold both


# Help, alerts, the detail summary: wrapped, never cut


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
async def test_help_wraps_and_scrolls_never_cut(size):
    _, app = make_app()
    async with app.run_test(size=size) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        body = app.screen.query_one("#help-body").region
        assert body.right <= size[0] and body.bottom <= size[1]
        box = [line[body.x:body.right] for line in screen_lines(app)[body.y:body.bottom]]
        for line in box[1:-1]:  # every row ends at the box's own border: nothing runs past it
            assert line.startswith("│") and line.endswith("│"), line
        assert not any(line[:-1].rstrip().endswith("…") for line in box)  # no description cut with an ellipsis
        # everything is reachable: scroll to the end and the last row is there
        for _ in range(20):
            await pilot.press("pagedown")
        await pilot.pause()
        assert "bookmark this moment" in "\n".join(screen_lines(app))


async def test_each_screen_has_its_own_help():
    _, app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        main_rows = dict(app.screen.page.rows)
        assert "s" in main_rows and "I" in main_rows and "1 2 3 4" in main_rows
        await pilot.press("escape", "enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        await pilot.press("question_mark")
        await pilot.pause()
        detail_rows = dict(app.screen.page.rows)
        assert "← →" in detail_rows and "tab" in detail_rows["← →"]
        assert "s" not in detail_rows and "1 2 3 4" not in detail_rows  # the main screen's keys, not here
        assert app.screen.page.title == "endpoint detail keys"


async def test_alerts_wrap_whole_and_count_what_does_not_fit():
    long = ("GPU 0 memory 98% used (78.1 of 80.0 GiB): stop PID 3999 to free 8.0 GiB, or lower "
            "--gpu-memory-utilization of the server that holds it")
    alerts = (Alert("critical", "gpu_memory", long, "gpu0"), Alert("warning", "kv", "KV cache 91% full", "x"),
              Alert("info", "port", "nothing listens on 8080", "y"))
    _, app = make_app(replace(fixed_snapshot(), alerts=alerts))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        shown = text_of(app.screen.query_one("#alerts", Static))
        assert "that holds it" in shown.replace("\n", " ").replace("  ", " ")  # the end of the long alert
        assert "more" in shown  # the others are counted, not cut
        lines = [line for line in screen_lines(app)[1:4]]
        assert not any(line.rstrip().endswith("…") for line in lines), lines


def _error_block(lines: list[str]) -> str:
    """The endpoints panel's last-error lines, from `last error:` to the panel's bottom border, joined."""
    start = next(i for i, line in enumerate(lines) if "│ last error: " in line)
    block = []
    for line in lines[start:]:
        if line.lstrip().startswith("╰"):
            break
        block.append(line.strip().strip("│").strip())
    return " ".join(block)


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
async def test_the_last_error_wraps_whole_never_cut(size):
    """What to do is the end of the message: at 80 columns it takes a second line, never an ellipsis."""
    advice = ("http_401: the server wants an API key: pass --api-key-env NAME, the environment variable that "
              "holds it (or api_key_env in the config file) (the server said: Unauthorized)")
    snap = fixed_snapshot()
    endpoints = tuple(replace(e, last_error=advice) if e.name == "llamacpp-local" else e for e in snap.endpoints)
    _, app = make_app(replace(snap, endpoints=endpoints))  # llamacpp-local, first by name: the selected row
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        lines = screen_lines(app)
        block = _error_block(lines)
        assert block.startswith(f"last error: {advice} (") and block.endswith(" ago)"), block
        assert not any(line.rstrip().rstrip("│").rstrip().endswith("…") for line in lines if "error" in line)
        # the table's rows are still there above it
        assert any("vllm-llama" in line for line in lines)


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
async def test_detail_summary_keeps_its_figures_whole(size):
    _, app = make_app()
    async with app.run_test(size=size) as pilot:
        await pilot.press("down", "enter")  # sglang-qwen: TTFT p50 720 p99 1.52 s, errors by class
        await pilot.pause()
        summary = text_of(app.screen.query_one("#detail-summary", Static))
        assert "TTFT p50 720 ms p99 1.52s" in summary
        assert "(http_5xx 2, stream_cut 1)" in summary and "probes 25 sent, 22 ok, 3 failed" in summary
        assert not any(line.endswith("…") for line in summary.splitlines())
        assert all(len(line) <= size[0] - 2 for line in summary.splitlines())


# The ports panel: what runs, one row per process


def test_command_shows_what_runs_not_the_interpreter():
    from lpxtop.engine.system.shown import display_command

    venv = "/home/ann/work/lpxtop/.venv"
    assert display_command(f"{venv}/bin/python3 {venv}/bin/lpxtop sim --port 18000") == "lpxtop sim --port 18000"
    assert display_command(f"{venv}/bin/python3 {venv}/bin/vllm serve Qwen/Qwen2.5-0.5B --port 8000") == (
        "vllm serve Qwen/Qwen2.5-0.5B --port 8000")
    assert display_command("/opt/conda/bin/python3.11 -m sglang.launch_server --model-path m --port 30000") == (
        "python -m sglang.launch_server --model-path m --port 30000")
    assert display_command("/usr/local/bin/llama-server -m /models/q.gguf --port 8080") == (
        "llama-server -m /models/q.gguf --port 8080")  # a model's path stays


def _port(port: int, pid: int | None, endpoint: str, status: str = "ok") -> PortStatus:
    return PortStatus(port, status, f"PID {pid} listens on port {port}", pid=pid, endpoint=endpoint,
                      cmdline="/srv/.venv/bin/python3 /srv/.venv/bin/lpxtop demo" if pid else None)


def test_a_process_serving_several_endpoints_is_one_row_naming_them_all():
    ports = (_port(34097, 7155, "vllm-sim-a"), _port(37751, 7155, "vllm-sim-b"), _port(36749, 7155, "dify-app"),
             _port(8080, None, "llamacpp", "down"))
    rows = rows_from(ports, ())
    assert [r.port for r in rows] == ["34097+2", "8080"]
    assert rows[0].command == "lpxtop demo"
    assert "serves 3 endpoints: vllm-sim-a :34097, vllm-sim-b :37751, dify-app :36749" in rows[0].detail


async def test_gpu_and_host_panels_name_every_endpoint_of_a_process():
    snap = fixed_snapshot()
    ports = (*snap.ports, replace(snap.ports[0], port=8001, endpoint="vllm-llama-2"))
    _, app = make_app(replace(snap, ports=ports))
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        gpu = text_of(app.screen.query_one("#gpu-panel", Static))
        assert "→ vllm-llama, vllm-llama-2" in gpu
        host = text_of(app.screen.query_one("#host-panel", Static))
        assert "4121 104% 3.2G +2 children  vllm-llama, vllm-llama-2" in host  # the figures first, then the names
        table = app.screen.query_one(PortsPanel).table
        assert table.get_row_at(0)[0] == "8000+1"


# No GPU


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
async def test_no_gpu_is_one_line_and_the_room_goes_to_the_other_panels(size):
    reason = "unavailable: NVML library not found: no NVIDIA driver on this host (libnvidia-ml.so.1 is not installed)"
    snap = replace(fixed_snapshot(), gpu=GpuSnapshot(status=reason))
    _, app = make_app(snap)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        screen = app.screen
        assert not screen.query_one("#gpu-panel").display
        line = screen.query_one("#gpu-line", Static)
        assert line.display and line.size.width >= size[0] - 2
        assert "libnvidia-ml.so.1 is not installed)" in text_of(line)  # the whole reason
        assert line.size.height <= 2
        assert screen.query_one("#ports-panel").region.width == size[0]  # the side panels take the whole width
        # 2 hides the line too, and the space goes to the other panels
        before = screen.query_one("#lower").size.height
        await pilot.press("2")
        await pilot.pause()
        assert not line.display and screen.query_one("#lower").size.height >= before


async def test_hidden_panels_give_their_room_away():
    _, app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen = app.screen
        await pilot.press("2", "4")  # only the host panel is left below: it keeps its few lines
        await pilot.pause()
        host = screen.query_one("#host-panel")
        assert host.size.height <= 5
        endpoints = screen.query_one("#endpoints-panel")
        assert endpoints.region.bottom == host.region.y  # no blank rows between them
        assert host.region.bottom >= 24 - 2  # down to the footer
        await pilot.press("3")
        await pilot.pause()
        assert not screen.query_one("#lower").display
        assert endpoints.region.bottom >= 24 - 2


# NO_COLOR


def _luminance(style: Style) -> float | None:
    color = style.color
    if color is None:
        return None
    r, g, b = color.get_truecolor()
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


async def test_no_color_emphasises_by_attributes_never_by_a_dimmer_colour():
    _, app = make_app(no_color=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        palette = app.palette
        assert palette.critical.bold and palette.critical.reverse and palette.critical.color is None
        assert palette.warning.bold and palette.warning.underline and palette.warning.color is None
        assert palette.ok == Style()
        # the table's critical cell (llamacpp-local's 100 % errors) carries the attributes, no colour
        table = app.screen.query_one(EndpointsTable)
        row = table.row_keys.index("llamacpp-local")
        err = [c.key for c in table.columns].index("err")
        cell = table._rows[row][err]
        assert cell.style is not None and cell.style.reverse and cell.style.color is None


# Charts


def test_tick_labels_are_plain_numbers():
    assert [tick_text(v) for v in (780.0, 1000.0, 1250.0, 12_500.0, 45.6, 0.5, 3.0)] == [
        "780", "1000", "1250", "12.5k", "45.6", "0.5", "3"]
    assert nice_ticks(0, 7, 4, integer=True) == [0, 3, 6, 9]
    assert nice_ticks(0, 1.5, 5, integer=True) == [0, 1, 2]  # no 0.25 on a request count
    assert nice_ticks(-65.6, 0, 5) == [-80, -60, -40, -20, 0]


def _plain(spec: ChartSpec, width: int = 60, height: int = 14) -> str:
    return ANSI.sub("", build_chart(spec, width, height, ((200, 200, 200),)))


def test_a_time_chart_reads_in_seconds_ago_ending_at_now_with_plain_ms():
    xs = tuple(-65.6 + i * 10.3 for i in range(7))
    spec = ChartSpec("TTFT ms", series=(Series("p", xs, (780.0, 1000.0, 1400.0, 900.0, 1100.0, 1300.0, 990.0)),),
                     x_label="seconds ago")
    text = _plain(spec)
    assert "e2" not in text and "e3" not in text and "-65.6" not in text
    assert "now" in text.splitlines()[-2]  # the x axis ends at now
    assert "1000" in text


def test_a_count_chart_has_whole_ticks_and_a_histogram_no_zero_row():
    queue = ChartSpec("server queue", series=(Series("waiting", (-3.0, -2.0, -1.0), (0.0, 1.0, 0.0)),),
                      y_min=0.0, integer_y=True)
    labels = [line.split("┤")[0].strip() for line in _plain(queue).splitlines() if "┤" in line]
    assert labels and all(label.isdigit() for label in labels), labels
    hist = ChartSpec("ITL", histogram=True, hist_values=(10.0,) * 50 + (400.0,), bins=20, time_x=False)
    rows = [line for line in _plain(hist).splitlines() if "┤" in line or "│" in line]
    bottom = next(line for line in reversed(rows) if "┤" in line)
    # the empty bins between 10 and 400 ms draw nothing: the bottom row is not one filled bar
    assert bottom.count("█") < 20, bottom


# Sort direction, reversible


async def test_sort_shows_its_column_and_direction_and_i_inverts_it():
    _, app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("s", "s")  # TTFT p99, largest first
        await pilot.pause()
        panel = app.screen.query_one("#endpoints-panel")
        table = app.screen.query_one(EndpointsTable)
        assert "sort: TTFT p99 ▼" in str(panel.border_title)
        assert [c.label for c in table.columns if c.key == "ttft99"] == ["TTFT99▼"]
        assert table.row_names == ["sglang-qwen", "vllm-llama", "llamacpp-local"]
        await pilot.press("I")
        await pilot.pause()
        assert "sort: TTFT p99 ▲" in str(panel.border_title)
        # smallest first; the endpoint without a TTFT stays last either way
        assert table.row_names == ["vllm-llama", "sglang-qwen", "llamacpp-local"]
        await pilot.press("s")  # a new column starts in its natural order
        await pilot.pause()
        assert "sort: error % ▼" in str(panel.border_title)


# ← → on the detail tabs, whatever has the focus


async def test_left_and_right_switch_detail_tabs_after_tab_moved_the_focus():
    _, app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("enter")
        await pilot.pause()
        tabs = app.screen.query_one(TabbedContent)
        assert tabs.active == "tab-charts"
        await pilot.press("tab", "tab")  # into the charts' scroll area
        await pilot.pause()
        assert app.focused is not None
        await pilot.press("right")
        await pilot.pause()
        assert tabs.active == "tab-server"
        await pilot.press("right", "right")
        await pilot.pause()
        assert tabs.active == "tab-settings"
        await pilot.press("right")  # round to the first
        await pilot.pause()
        assert tabs.active == "tab-charts"
        await pilot.press("left")
        await pilot.pause()
        assert tabs.active == "tab-settings"
        tabs.active = "tab-errors"
        app.screen.query_one("#errors-table", DataTable).focus()
        await pilot.pause()
        await pilot.press("left")
        await pilot.pause()
        assert tabs.active == "tab-server"


async def test_the_filter_field_keeps_its_own_keys():
    _, app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("slash", *"vllm")
        await pilot.pause()
        assert isinstance(app.focused, Input) and app.focused.value == "vllm"
        assert isinstance(app.screen, MainScreen)


async def test_empty_dashboard_at_80x24_says_why_there_is_no_gpu():
    _, app = make_app(empty_snapshot())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        shown = "\n".join(screen_lines(app))
        assert "GPU unavailable: NVML library not found" in shown
        assert "GPU ──" not in shown  # no half-screen panel holding one line


# The README's keys table is the app's


def test_the_readme_keys_table_matches_the_app():
    from pathlib import Path

    from lpxtop.ui.app import LpxtopApp
    from lpxtop.ui.screens.help import KEY_HELP

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### Keys", 1)[1].split("\n\n", 2)[1]
    rows = {}
    for line in section.splitlines()[2:]:
        keys, does = line.strip("|").split("|", 1)
        rows[keys.strip()] = does.strip()
    # + slows probing (interval ×1.5), as the footer's "+ slower" and the help say
    assert rows["`+` / `-`"].startswith("probe less / more often")
    assert dict((k, d) for k, d, _ in KEY_HELP)["+ / -"].startswith("+ probes less often, - more often")
    listed = " ".join(rows).replace("`1`–`4`", "`1` `2` `3` `4`")
    names = {"question_mark": "?", "plus": "+", "equals_sign": "+", "minus": "-", "slash": "/", "escape": "Esc",
             "enter": "Enter", "ctrl+c": "Ctrl+C", "left": "←", "right": "→"}
    for binding in [*LpxtopApp.BINDINGS, *MainScreen.BINDINGS, *DetailScreen.BINDINGS]:
        if binding.action.startswith(("replay_", "compare")):
            continue  # the replay's keys: docs/recording.md
        for key in binding.key.split(","):
            assert f"`{names.get(key, key)}`" in listed, key


async def test_the_compare_screen_has_its_own_help():
    from lpxtop.ui.screens.compare import CompareScreen

    source = ReplaySource(FIXTURES / "recordings" / "v1-sim.lpxrec", playing=False)
    app = create_app(source, poll=False, ssh=False)
    async with app.run_test(size=(80, 24)) as pilot:
        from pathlib import Path

        from lpxtop.record.compare import EndpointSummary, RecordingSummary, compare

        summary = RecordingSummary(Path("a.lpxrec"), 0.0, 60.0, {"e": EndpointSummary("e", probes=10, ok=10)})
        await app.push_screen(CompareScreen(compare(summary, summary)))
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen) and app.screen.page.title == "compare keys"


async def test_a_short_ports_panel_keeps_a_row_and_no_scrollbar_over_it():
    """At 80x24 with five endpoints and an alert the ports panel has three lines inside: the header and the
    row come first (the explanation takes what is left), and no horizontal scrollbar hides the row."""
    snap = fixed_snapshot()
    extra = tuple(replace(e, config=replace(e.config, name=f"{e.name}-2")) for e in snap.endpoints[:2])
    _, app = make_app(replace(snap, endpoints=(*snap.endpoints, *extra), alerts=snap.alerts[:1]))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        table = app.screen.query_one("#ports-table")
        lines = screen_lines(app)
        top = next(i for i, line in enumerate(lines) if "Ports & processes" in line)
        assert "Port" in lines[top + 1] and "8000" in lines[top + 2], lines[top:]
        assert not table.show_horizontal_scrollbar


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
async def test_the_strip_line_leaves_out_details_rather_than_cutting(size):
    """At 80 columns the gap's range (`(+28…+42)`) gives way before the line is cut: it read `(+28……`."""
    _, app = make_app()
    async with app.run_test(size=size) as pilot:
        await pilot.press("down", "down")  # vllm-llama: an estimated gap with its range
        await pilot.pause()
        line = next(line for line in screen_lines(app) if "vllm-llama  outside engine ~+35 ms" in line)
        assert "…│" not in line.replace(" ", "") and "……" not in line
        if size[0] >= 120:
            assert "(+28…+42)" in line or "last error: none" in line


async def test_before_any_probe_the_dashboard_names_the_endpoints_it_probes():
    """The first frame comes before the engine starts: it names the endpoints given (never "No endpoints to
    watch yet"), and the table comes with the first figures."""
    from lpxtop.engine.endpoints import pending_view
    from lpxtop.engine.runner import EngineSettings

    configs = [e.config for e in fixed_snapshot().endpoints]
    pending = tuple(pending_view(c, EngineSettings(), 0.0) for c in configs)
    _, app = make_app(replace(empty_snapshot(), endpoints=pending))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        message = text_of(app.screen.query_one("#empty-message", Static))
        assert message.startswith("Probing ") and all(c.name in message for c in configs)
        assert "No endpoints" not in message and not app.screen.query_one(EndpointsTable).display
        assert "Endpoints 3/3" in str(app.screen.query_one("#endpoints-panel").border_title)
