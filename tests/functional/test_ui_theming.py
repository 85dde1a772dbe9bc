"""Theme files: the shipped ones load, broken ones are reported with every problem, user themes work."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from textual.widgets import Static

from lpxtop.ui.theming import (
    DEFAULT_THEME,
    LPX_VARIABLES,
    ThemeFileError,
    UnknownThemeError,
    available_themes,
    discover_themes,
    load_theme,
    user_themes_dir,
)
from tests.support.paths import REPO
from tests.support.ui import make_app, text_of

TCSS = REPO / "lpxtop" / "ui" / "lpxtop.tcss"


def test_shipped_themes_load_and_the_top_level_themes_dir_is_the_same():
    themes = available_themes()
    assert {"lpxtop-dark", "lpxtop-light", "high-contrast", "nord-ish"} <= set(themes)
    assert DEFAULT_THEME in themes and themes["lpxtop-dark"].dark and not themes["lpxtop-light"].dark
    assert sorted(p.name for p in (REPO / "themes").glob("*.toml")) == sorted(
        p.name for p in (REPO / "lpxtop" / "themes").glob("*.toml")
    )
    for theme in themes.values():
        assert set(LPX_VARIABLES) <= set(theme.variables), theme.name


def test_unknown_theme_lists_the_available_ones():
    with pytest.raises(UnknownThemeError) as err:
        load_theme("solarized-nope")
    message = str(err.value)
    assert "solarized-nope" in message
    for name in ("high-contrast", "lpxtop-dark", "lpxtop-light", "nord-ish"):
        assert name in message


def test_create_app_refuses_an_unknown_theme():
    with pytest.raises(UnknownThemeError):
        make_app(theme="no-such-theme")


def test_broken_theme_file_reports_every_problem(tmp_path):
    user = tmp_path / "themes"
    user.mkdir()
    (user / "broken.toml").write_text(
        'dark = "yes"\nbackground = "not-a-colour"\ncolour = "#fff"\n[variables]\nlpx-ok = 42\n'
    )
    with pytest.raises(ThemeFileError) as err:
        load_theme("broken", user_dir=user)
    problems = err.value.problems
    assert len(problems) == 5, problems
    text = str(err.value)
    for part in ("primary is required", "background = 'not-a-colour'", "unknown key(s) colour", "dark must be",
                 "variables.lpx-ok"):
        assert part in text


def test_invalid_toml_is_a_theme_file_error(tmp_path):
    (tmp_path / "bad.toml").write_text("primary = \n")
    catalog = discover_themes(user_dir=tmp_path)
    assert [e.path.name for e in catalog.errors] == ["bad.toml"]
    assert "not valid TOML" in str(catalog.errors[0])
    assert "bad" not in catalog.themes


def test_user_themes_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert user_themes_dir() == tmp_path / "lpxtop" / "themes"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert user_themes_dir() == Path.home() / ".config" / "lpxtop" / "themes"


def test_every_custom_tcss_variable_has_a_default():
    used = set(re.findall(r"\$(lpx-[a-z0-9-]+)", TCSS.read_text()))
    assert used and used <= set(LPX_VARIABLES)


async def test_minimal_user_theme_renders_and_broken_files_are_reported_together(monkeypatch, tmp_path):
    user = tmp_path / "lpxtop" / "themes"
    user.mkdir(parents=True)
    (user / "mine.toml").write_text('primary = "#ff8800"\n')  # nothing else: every variable falls back
    (user / "one.toml").write_text('primary = "nope"\n')
    (user / "two.toml").write_text('primary = "#fff"\nbogus = 1\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    _, app = make_app(theme="mine")
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert app.theme == "mine"
        assert "lpxtop" in text_of(app.screen.query_one("#header", Static))
        notes = [n.message for n in app._notifications]
        assert len(notes) == 1 and "one.toml" in notes[0] and "two.toml" in notes[0]
        assert "mine" in app.lpxtop_themes
