"""Fixtures of the first-contact acceptance suite: `terminal` starts the real lpxtop in tmux (terminal.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.tmux_terminal import Terminal, tmux_missing


@pytest.fixture(scope="session")
def require_tmux() -> None:
    """Skip without tmux, unless LPXTOP_REQUIRE_TMUX=1 (CI installs it), where a missing tmux is a failure."""
    why = tmux_missing()
    if why:
        if os.environ.get("LPXTOP_REQUIRE_TMUX") == "1":
            pytest.fail(f"LPXTOP_REQUIRE_TMUX=1 but {why}")
        pytest.skip(why)


@pytest.fixture
def terminal(require_tmux, tmp_path) -> Iterator:
    """A factory: `terminal(ARGS..., cols=80, rows=24, env={...})` -> a Terminal running `python -m lpxtop ARGS`,
    closed after the test."""
    opened: list[Terminal] = []

    def start(*args: str, cols: int = 80, rows: int = 24, env: dict[str, str] | None = None) -> Terminal:
        term = Terminal(args, cols=cols, rows=rows, cwd=tmp_path, env=env)
        opened.append(term)
        return term

    yield start
    for term in opened:
        term.close()
