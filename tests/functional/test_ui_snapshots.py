"""SVG snapshots of the main and detail screens from the fixed snapshot, at 80×24 and 160×48, in two themes.

The poll timer is off and every time on screen is computed from the snapshot's wall time, so the
pictures never change between runs. Update them with `pytest tests/functional/test_ui_snapshots.py
--snapshot-update` and look at the result before committing.
"""

from __future__ import annotations

import pytest

from tests.support.snapshot_data import empty_snapshot
from tests.support.ui import make_app

SIZES = [(80, 24), (160, 48)]
THEMES = ["lpxtop-dark", "lpxtop-light"]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("theme", THEMES)
def test_main_screen(snap_compare, theme, size):
    _, app = make_app(theme=theme)
    assert snap_compare(app, terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("theme", THEMES)
def test_detail_screen(snap_compare, theme, size):
    _, app = make_app(theme=theme)
    # Sorted by name the rows are llamacpp-local, sglang-qwen, vllm-llama: open the one with server metrics.
    assert snap_compare(app, press=["down", "down", "enter"], terminal_size=size)


def test_empty_main_screen(snap_compare):
    _, app = make_app(empty_snapshot())
    assert snap_compare(app, terminal_size=(80, 24))


def test_detail_server_tab(snap_compare):
    """The server's own latency: exact means, `~` estimates with their ranges, and the gap's method."""
    from textual.widgets import TabbedContent

    _, app = make_app(theme="lpxtop-dark")

    async def server_tab(pilot) -> None:
        await pilot.press("down", "down", "enter")
        await pilot.pause()
        app.screen.query_one("#detail-tabs", TabbedContent).active = "tab-server"
        await pilot.pause()

    assert snap_compare(app, run_before=server_tab, terminal_size=(120, 32))
