"""Every key of the main and detail screens, driven through Pilot over a fixed snapshot."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from textual.widgets import DataTable, Input, Static, TabbedContent

from lpxtop.model.probe import Percentiles
from lpxtop.ui.app import create_app
from lpxtop.ui.screens.confirm import ConfirmSignalScreen
from lpxtop.ui.screens.detail import DetailScreen
from lpxtop.ui.screens.help import DETAIL_KEY_HELP, KEY_HELP, HelpScreen
from lpxtop.ui.screens.main import MainScreen
from lpxtop.ui.widgets.endpoints_table import EndpointsTable
from lpxtop.ui.widgets.row_table import RowTable
from tests.support.snapshot_data import empty_snapshot, fixed_snapshot, with_leftover
from tests.support.ui import SwitchableSource, bump, make_app, text_of

SIZE = (120, 40)


def rows(app) -> list[str]:
    return app.screen.query_one(EndpointsTable).row_names


def header(app) -> str:
    return text_of(app.screen.query_one("#header", Static))


async def test_q_quits():
    _, app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running


async def test_question_mark_opens_help_listing_every_key():
    _, app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        shown = text_of(app.screen.query_one("#help-keys", Static))
        for _keys, description, demo_only in KEY_HELP:
            live_key = not demo_only and not description.startswith("replay:")  # replay keys: only in a replay
            assert (description in shown) is live_key, description
        for key in ("q", "?", "Enter", "Esc", "p", "r", "+ / -", "s", "/", "1 2 3 4", "t", "T", "K"):
            assert key in shown
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)


@pytest.mark.parametrize("screen, table", [(MainScreen, KEY_HELP), (DetailScreen, DETAIL_KEY_HELP)],
                         ids=["main", "detail"])
def test_every_binding_is_in_that_screens_help(screen, table):
    """A key bound on the app or on a screen must appear in that screen's help (by its displayed name)."""
    from lpxtop.ui.app import LpxtopApp

    names = {"question_mark": "?", "plus": "+", "equals_sign": "+", "minus": "-", "slash": "/",
             "escape": "Esc", "enter": "Enter", "left": "←", "right": "→", "shift+left": "shift+←",
             "shift+right": "shift+→", "left_square_bracket": "[", "right_square_bracket": "]",
             "less_than_sign": "<", "greater_than_sign": ">", "ctrl+c": "Ctrl+C"}
    help_keys = " ".join(k for k, _, _ in table).split()
    for binding in [*LpxtopApp.BINDINGS, *screen.BINDINGS]:
        for key in binding.key.split(","):
            assert names.get(key, key) in help_keys, key


async def test_help_mentions_surge_only_in_the_demo():
    _, app = make_app(demo=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert "load surge" in text_of(app.screen.query_one("#help-keys", Static))


async def test_enter_opens_detail_and_escape_returns():
    _, app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("down", "down", "enter")  # sorted by name: llamacpp, sglang, vllm
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        assert app.screen.endpoint_name == "vllm-llama"
        summary = text_of(app.screen.query_one("#detail-summary", Static))
        # the probes' mean TTFT 145.9 minus the server's exact mean 110.6, an estimate (`~`): the fixture's
        # server TTFTs all lie in 100-118 ms
        assert "outside engine ~+35 ms" in summary and "server TTFT mean 111" in summary
        server_tab = text_of(app.screen.query_one("#server-latency", Static))
        assert "~110 (100–113)" in server_tab and "certainly +28…+46 ms" in server_tab
        settings = text_of(app.screen.query_one("#settings", Static))
        assert "VLLM_API_KEY" in settings and "not-shown" not in settings  # the key's name, never a secret
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)


async def test_detail_lists_recent_errors_newest_first():
    _, app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("down", "enter")
        await pilot.pause()
        assert app.screen.endpoint_name == "sglang-qwen"
        app.screen.query_one(TabbedContent).active = "tab-errors"
        await pilot.pause()
        table = app.screen.query_one("#errors-table", DataTable)
        assert table.row_count == 3
        first = [str(c) for c in table.get_row_at(0)]
        # The fixture's newest error: sample 21 + 5 = 26 → 2 × (30 − 26) = 8 s before the snapshot.
        assert first == ["8s ago", "http_5xx", "500", "HTTP 500: Internal Server Error"]


async def test_p_pauses_and_resumes():
    source, app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p")
        await pilot.pause()
        assert ("set_paused", True) in source.calls
        assert "PAUSED" in header(app)
        await pilot.press("p")
        await pilot.pause()
        assert source.calls[-1] == ("set_paused", False)
        assert "PAUSED" not in header(app)


async def test_r_resets_statistics():
    source, app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        await pilot.pause()
        assert source.calls == [("reset", None)]


async def test_r_shows_the_reset_figures_before_the_next_refresh():
    source = SwitchableSource(fixed_snapshot())
    app = create_app(source, refresh_s=60.0, ssh=False)  # the poll timer on, but far away
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        reset = bump(source.snapshot(), endpoints=())  # what the engine publishes after the reset
        source.publish(reset)
        for _ in range(40):  # bounded: 4 s at most
            if app.snapshot is reset:
                break
            await asyncio.sleep(0.1)
        assert app.snapshot is reset


async def test_plus_and_minus_change_the_probe_interval_within_bounds():
    source, app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("plus")
        await pilot.pause()
        assert source.calls[-1] == ("set_interval", 3.0)  # 2.0 × 1.5
        assert "probe 3.0s" in header(app)
        await pilot.press("minus", "minus")
        await pilot.pause()
        assert source.calls[-1] == ("set_interval", 1.333)  # 3.0 / 1.5 / 1.5
        for _ in range(12):
            await pilot.press("minus")
        await pilot.pause()
        assert source.calls[-1] == ("set_interval", 0.25)
        calls = len(source.calls)
        await pilot.press("minus")
        await pilot.pause()
        assert len(source.calls) == calls  # already at the minimum: nothing sent


async def test_s_cycles_the_sort_column():
    _, app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        assert rows(app) == ["llamacpp-local", "sglang-qwen", "vllm-llama"]  # name
        await pilot.press("s")
        await pilot.pause()
        assert rows(app) == ["llamacpp-local", "sglang-qwen", "vllm-llama"]  # status: down, degraded, up
        await pilot.press("s")
        await pilot.pause()
        assert rows(app) == ["sglang-qwen", "vllm-llama", "llamacpp-local"]  # TTFT p99 1520, 318, unknown
        await pilot.press("s")
        await pilot.pause()
        assert rows(app) == ["llamacpp-local", "sglang-qwen", "vllm-llama"]  # errors 100 %, 12 %, 0 %
        await pilot.press("s")
        await pilot.pause()
        assert rows(app) == ["sglang-qwen", "vllm-llama", "llamacpp-local"]  # queue waiting 9, 3, unknown
        await pilot.press("s")
        await pilot.pause()
        assert rows(app) == ["sglang-qwen", "vllm-llama", "llamacpp-local"]  # tok/s 28.6, 84.2, unknown
        assert "sort: tok/s" in str(app.screen.query_one("#endpoints-panel").border_title)


async def test_slash_filters_and_escape_clears():
    _, app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("slash")
        await pilot.pause()
        assert isinstance(app.focused, Input)
        await pilot.press(*"qwen")
        await pilot.pause()
        assert rows(app) == ["sglang-qwen"]
        await pilot.press("enter")  # keeps the filter, back to the table
        await pilot.pause()
        assert rows(app) == ["sglang-qwen"]
        assert isinstance(app.focused, EndpointsTable)
        await pilot.press("escape")
        await pilot.pause()
        assert rows(app) == ["llamacpp-local", "sglang-qwen", "vllm-llama"]


async def test_filter_with_no_match_says_so():
    _, app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("slash", *"zzz")
        await pilot.pause()
        message = app.screen.query_one("#empty-message", Static)
        assert message.display and "zzz" in text_of(message)


async def test_number_keys_toggle_panels():
    _, app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        for key, panel in (("1", "#endpoints-panel"), ("2", "#gpu-panel"), ("3", "#host-panel"), ("4", "#ports-panel")):
            widget = app.screen.query_one(panel)
            assert widget.display, panel
            await pilot.press(key)
            await pilot.pause()
            assert not widget.display, panel
            await pilot.press(key)
            await pilot.pause()
            assert widget.display, panel


async def test_t_cycles_lpxtop_themes():
    _, app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        assert app.theme == "lpxtop-dark"
        seen = [app.theme]
        for _ in range(4):
            await pilot.press("t")
            await pilot.pause()
            seen.append(app.theme)
        # Alphabetical: high-contrast, lpxtop-dark, lpxtop-light, nord-ish, then round again.
        assert seen == ["lpxtop-dark", "lpxtop-light", "nord-ish", "high-contrast", "lpxtop-dark"]


async def test_g_toggles_the_surge_in_the_demo_only():
    source, app = make_app(demo=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("g")
        await pilot.press("g")
        await pilot.pause()
        assert source.calls == [("surge", True), ("surge", False)]
    source, app = make_app(demo=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("g")
        await pilot.pause()
        assert source.calls == []


async def _focus_ports_row(app, pilot, key: str) -> None:
    table = app.screen.query_one("#ports-table", RowTable)
    table.focus()
    table.move_cursor(row=table.get_row_index(key))
    await pilot.pause()


async def test_T_is_refused_in_readonly_mode_without_a_dialog():
    _, app = make_app(readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await _focus_ports_row(app, pilot, "pid:3999")
        await pilot.press("T")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmSignalScreen)
        messages = [n.message for n in app._notifications]
        assert any("read-only" in m and "3999" in m for m in messages), messages


@pytest.fixture
def child():
    """A real process to signal; always reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def _wait_exit(proc: subprocess.Popen, timeout_s: float = 5.0) -> int | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    return proc.poll()


async def test_T_confirms_then_sends_sigterm_to_the_selected_process(child):
    snap = with_leftover(fixed_snapshot(), child.pid, f"{sys.executable} -c sleep", "tester")
    _, app = make_app(snap)
    async with app.run_test(size=SIZE) as pilot:
        await _focus_ports_row(app, pilot, f"pid:{child.pid}")
        await pilot.press("T")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmSignalScreen)
        body = text_of(app.screen.query_one("#confirm-body", Static))
        assert f"PID {child.pid}" in body and "SIGTERM" in body and "time.sleep(60)" in body
        await pilot.press("y")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        assert _wait_exit(child) == -15


async def test_K_cancelled_leaves_the_process_alone(child):
    snap = with_leftover(fixed_snapshot(), child.pid, "sleeper", "tester")
    _, app = make_app(snap)
    async with app.run_test(size=SIZE) as pilot:
        await _focus_ports_row(app, pilot, f"pid:{child.pid}")
        await pilot.press("K")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmSignalScreen)
        assert "SIGKILL" in text_of(app.screen.query_one("#confirm-body", Static))
        await pilot.press("n")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        assert child.poll() is None


async def test_a_row_without_pid_asks_to_select_a_process():
    _, app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await _focus_ports_row(app, pilot, "port:8080")  # the down port has no PID
        await pilot.press("T")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmSignalScreen)
        assert any("Select a process" in n.message for n in app._notifications)


async def test_a_refused_signal_shows_why_and_offers_no_yes():
    snap = with_leftover(fixed_snapshot(), 1, "/sbin/init", "root")  # lpxtop never signals PID 1
    _, app = make_app(snap)
    async with app.run_test(size=SIZE) as pilot:
        await _focus_ports_row(app, pilot, "pid:1")
        await pilot.press("K")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmSignalScreen)
        assert "init process" in text_of(app.screen.query_one("#confirm-refusal", Static))
        assert not app.screen.query("#confirm-yes")
        await pilot.press("y")  # refused: "yes" does nothing but close
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)


async def test_duplicate_endpoint_names_do_not_crash():
    snap = fixed_snapshot()
    _, app = make_app(replace(snap, endpoints=(*snap.endpoints, snap.endpoints[0])))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert rows(app) == ["llamacpp-local", "sglang-qwen", "vllm-llama"]


async def test_mouse_selects_rows_and_switches_tabs():
    _, app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one(EndpointsTable)
        assert await pilot.click(EndpointsTable, offset=(8, 2))  # header is row 0: this is sglang-qwen
        await pilot.pause()
        assert table.selected_name == "sglang-qwen"
        assert await pilot.click(EndpointsTable, offset=(8, 2))  # a second click on the row opens it
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        assert await pilot.click("#detail-tabs Tab#--content-tab-tab-settings")
        await pilot.pause()
        assert app.screen.query_one(TabbedContent).active == "tab-settings"


async def test_new_snapshots_update_cells_and_same_seq_is_skipped():
    source, app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one(EndpointsTable)
        first = fixed_snapshot()
        assert str(table.get_cell("vllm-llama", "ttft50")) == "142"
        views = list(first.endpoints)
        views[0] = replace(views[0], ttft_ms=Percentiles(p50=150.0, p95=300.0, p99=318.0, mean=150.0, max=318.0, count=30))
        source.publish(replace(first, endpoints=tuple(views)))  # same seq: the UI must not redraw
        app.poll()
        await pilot.pause()
        assert str(table.get_cell("vllm-llama", "ttft50")) == "142"
        source.publish(bump(first, endpoints=tuple(views)))
        app.poll()
        await pilot.pause()
        assert str(table.get_cell("vllm-llama", "ttft50")) == "150"


async def test_hidden_panels_and_dialogs_skip_rendering():
    source, app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")  # hide the GPU panel
        await pilot.pause()
        gpu = app.screen.query_one("#gpu-panel")
        key_before = gpu._key
        changed = bump(fixed_snapshot(), gpu=replace_gpu_util(fixed_snapshot().gpu, 11.0))
        source.publish(changed)
        app.poll()
        await pilot.pause()
        assert gpu._key == key_before  # not rendered while hidden
        await pilot.press("2")
        await pilot.pause()
        assert gpu._key[0] == changed.gpu  # drawn as soon as it is shown
        await pilot.press("question_mark")
        await pilot.pause()
        newer = bump(changed)
        source.publish(newer)
        app.poll()
        main = app.screen_stack[0]
        assert main._snap is changed  # the dialog is on top: main waits
        await pilot.press("escape")
        await pilot.pause()
        assert main._snap is newer


def replace_gpu_util(gpu, util):
    return replace(gpu, devices=(replace(gpu.devices[0], util_pct=util), *gpu.devices[1:]))


async def test_ssh_turns_animation_off_and_keeps_the_poll_under_1_hz(monkeypatch):
    _, app = make_app(ssh=None)
    assert app.refresh_s == 2.0 and app.animation_level != "none"
    monkeypatch.setenv("SSH_CONNECTION", "10.0.0.1 5000 10.0.0.2 22")
    _, app = make_app(ssh=None)
    assert app.refresh_s == 2.0 and app.animation_level == "none"
    _, asked = make_app(ssh=None, refresh_s=1.0)  # `--refresh 1`: asked for, so kept over SSH too
    assert asked.refresh_s == 1.0
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("slash")
        await pilot.pause()
        assert app.screen.query_one("#filter", Input).cursor_blink is False


async def test_no_color_option_makes_output_monochrome():
    _, app = make_app(no_color=True)
    assert app.no_color


async def test_empty_snapshot_says_how_to_add_an_endpoint():
    _, app = make_app(empty_snapshot())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        text = text_of(app.screen.query_one("#empty-message", Static))
        assert "lpxtop http://127.0.0.1:8000/v1" in text and "--config" in text and "lpxtop demo" in text
        # no GPU: its panel gives its room away, one line says why
        assert not app.screen.query_one("#gpu-panel").display
        gpu = text_of(app.screen.query_one("#gpu-line", Static))
        assert "unavailable: NVML library not found" in gpu


async def test_ports_table_is_rebuilt_only_when_what_it_shows_changes():
    """A listener's CPU and memory change at every port scan; the table shows neither, so it keeps its
    rows (a rebuild lays the screen out again) while a changed detail line is still redrawn."""
    source, app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        panel = app.screen.query_one("#ports-panel")
        table = app.screen.query_one("#ports-table", RowTable)
        detail = app.screen.query_one("#ports-detail", Static)
        first = fixed_snapshot()
        await pilot.pause()  # the first layout gives the panel its width
        app.screen.rerender()
        rows_before = table.row_keys
        key_before = panel._key
        busier = tuple(replace(p, cpu_pct=(p.cpu_pct or 0) + 7.0, rss_bytes=(p.rss_bytes or 0) + 4096,
                               detail=p.detail + " (busier)") for p in first.ports)
        second = bump(first, ports=busier)
        source.publish(second)
        app.poll()
        await pilot.pause()
        assert panel._key == key_before and table.row_keys == rows_before
        assert text_of(detail).endswith("(busier)")
        moved = (replace(busier[0], pid=(busier[0].pid or 0) + 1), *busier[1:])
        source.publish(bump(second, ports=moved))
        app.poll()
        await pilot.pause()
        assert panel._key != key_before  # a new PID is shown: rebuilt


async def test_the_key_line_shows_each_screens_keys_and_a_click_types_one():
    from lpxtop.ui.widgets.key_bar import KeyBar
    from tests.support.ui import screen_lines

    _, app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        line = screen_lines(app)[-1]
        assert line.startswith("⏎ detail s sort / filter q quit ? help")
        bar = app.screen.query_one(KeyBar)
        x = line.index("s sort")
        assert app.screen.sort_key == "name"
        await pilot.click(KeyBar, offset=(x + 2, 0))  # on "sort": as typing s
        await pilot.pause()
        assert app.screen.sort_key != "name"
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        assert screen_lines(app)[-1].startswith("← → tab esc back q quit ? help")
        assert bar is not app.screen.query_one(KeyBar)  # the detail screen's own
