"""Themes: TOML files turned into Textual `Theme`s, validated on load with every problem reported at once.

Built-in themes live in ``lpxtop/themes/*.toml`` (shipped inside the wheel); a user adds or overrides
themes in ``$XDG_CONFIG_HOME/lpxtop/themes/*.toml`` (default ``~/.config/lpxtop/themes``).

A theme file::

    name = "my-theme"            # optional, defaults to the file name without .toml
    dark = true
    primary = "#5fafd7"          # required; the other base colours are optional
    background = "#16191e"
    [variables]                  # optional Textual / lpxtop variables, e.g. the status colours
    lpx-ok = "#5fd787"
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from textual.color import Color, ColorParseError
from textual.theme import Theme

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

DEFAULT_THEME = "lpxtop-dark"

# The base colours a theme file may set; everything else goes under [variables].
COLOR_KEYS = (
    "primary",
    "secondary",
    "accent",
    "warning",
    "error",
    "success",
    "foreground",
    "background",
    "surface",
    "panel",
    "boost",
)
OTHER_KEYS = ("name", "dark", "luminosity_spread", "text_alpha", "variables")

# lpxtop's own theme variables. The UI turns them into Rich colours, so they must be plain colours.
# Their defaults (derived from the theme's base colours) are in `variable_defaults`.
LPX_VARIABLES = ("lpx-ok", "lpx-warning", "lpx-critical", "lpx-muted", "lpx-chart-1", "lpx-chart-2", "lpx-chart-3")


class ThemeError(ValueError):
    """Base class: the CLI catches this, prints the message and exits 2."""


class UnknownThemeError(ThemeError):
    """A theme name that no built-in or user theme file defines."""

    def __init__(self, name: str, available: list[str]) -> None:
        self.name = name
        self.available = available
        super().__init__(f"unknown theme {name!r}; available themes: {', '.join(available)}")


class ThemeFileError(ThemeError):
    """A theme file that cannot be used; `problems` lists every reason, not just the first."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(f"theme file {path}: " + "; ".join(problems))


@dataclass(frozen=True)
class ThemeCatalog:
    """Every usable theme by name, and the files that could not be loaded (shown to the user once)."""

    themes: Mapping[str, Theme]
    errors: tuple[ThemeFileError, ...] = ()


def user_themes_dir() -> Path:
    """``$XDG_CONFIG_HOME/lpxtop/themes``, or ``~/.config/lpxtop/themes`` when the variable is unset."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "lpxtop" / "themes"


def builtin_themes_dir() -> Path:
    """The themes shipped inside the package."""
    return Path(str(resources.files("lpxtop") / "themes"))


def _check_color(value: object, where: str, problems: list[str]) -> str | None:
    if not isinstance(value, str):
        problems.append(f"{where} must be a colour string like \"#5fafd7\", not {type(value).__name__}")
        return None
    try:
        Color.parse(value)
    except ColorParseError:
        problems.append(f"{where} = {value!r} is not a colour (use \"#rrggbb\", \"rgb(r,g,b)\" or a colour name)")
        return None
    return value


def theme_from_mapping(data: Mapping[str, object], path: Path) -> Theme:
    """Validate one parsed theme file and build its Theme; raises ThemeFileError listing every problem."""
    problems: list[str] = []
    unknown = sorted(set(data) - set(COLOR_KEYS) - set(OTHER_KEYS))
    if unknown:
        problems.append(
            f"unknown key(s) {', '.join(unknown)} (allowed: {', '.join(COLOR_KEYS + OTHER_KEYS)}; "
            "put other variables under [variables])"
        )
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not name.strip():
        problems.append("name must be a non-empty string")
        name = path.stem
    if "primary" not in data:
        problems.append('primary is required (e.g. primary = "#5fafd7")')
    colors: dict[str, str] = {}
    for key in COLOR_KEYS:
        if key in data:
            value = _check_color(data[key], key, problems)
            if value is not None:
                colors[key] = value
    dark = data.get("dark", True)
    if not isinstance(dark, bool):
        problems.append("dark must be true or false")
        dark = True
    numbers: dict[str, float] = {}
    for key in ("luminosity_spread", "text_alpha"):
        if key in data:
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                problems.append(f"{key} must be a number between 0 and 1")
            else:
                numbers[key] = float(value)
    variables: dict[str, str] = {}
    raw_vars = data.get("variables", {})
    if not isinstance(raw_vars, Mapping):
        problems.append("[variables] must be a table of name = \"value\"")
        raw_vars = {}
    for key, value in raw_vars.items():
        if key in LPX_VARIABLES:
            checked = _check_color(value, f"variables.{key}", problems)
            if checked is not None:
                variables[key] = checked
        elif not isinstance(value, str):
            problems.append(f"variables.{key} must be a string")
        else:
            variables[key] = value
    if problems:
        raise ThemeFileError(path, problems)
    return Theme(name=str(name), dark=dark, variables=variables, **colors, **numbers)  # type: ignore[arg-type]


def load_theme_file(path: Path) -> Theme:
    """Read and validate one theme file."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ThemeFileError(path, [f"cannot read it: {exc.strerror or exc}"]) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ThemeFileError(path, [f"not valid TOML: {exc}"]) from exc
    return theme_from_mapping(data, path)


def _load_dir(directory: Path, themes: dict[str, Theme], errors: list[ThemeFileError]) -> None:
    try:
        files = sorted(directory.glob("*.toml"))
    except OSError:
        return
    for path in files:
        try:
            theme = load_theme_file(path)
        except ThemeFileError as exc:
            errors.append(exc)
            continue
        themes[theme.name] = theme


def discover_themes(user_dir: Path | None = None) -> ThemeCatalog:
    """Built-in themes, then the user's (which may override a built-in of the same name)."""
    themes: dict[str, Theme] = {}
    errors: list[ThemeFileError] = []
    _load_dir(builtin_themes_dir(), themes, errors)
    _load_dir(user_dir if user_dir is not None else user_themes_dir(), themes, errors)
    return ThemeCatalog(themes=dict(sorted(themes.items())), errors=tuple(errors))


def available_themes(user_dir: Path | None = None) -> dict[str, Theme]:
    """Every usable theme by name (files with problems are left out; see `discover_themes`)."""
    return dict(discover_themes(user_dir).themes)


def load_theme(name: str, user_dir: Path | None = None) -> Theme:
    """The theme called `name`.

    Raises ThemeFileError when the only file defining it is broken (its problems, all of them),
    UnknownThemeError (listing the available names) when nothing defines it.
    """
    catalog = discover_themes(user_dir)
    if name in catalog.themes:
        return catalog.themes[name]
    for error in catalog.errors:
        if error.path.stem == name:
            raise error
    raise UnknownThemeError(name, list(catalog.themes))


def variable_defaults(theme: Theme) -> dict[str, str]:
    """Fallbacks for lpxtop's TCSS variables, taken from the theme's base colours.

    Textual refuses a stylesheet that names a variable without a value, so a user theme that sets
    only `primary` must still work.
    """
    success = theme.success or "#4ebf71"
    warning = theme.warning or "#ffa62b"
    error = theme.error or "#ba3c5b"
    muted = "#808080"
    return {
        "lpx-ok": success,
        "lpx-warning": warning,
        "lpx-critical": error,
        "lpx-muted": muted,
        "lpx-chart-1": theme.primary,
        "lpx-chart-2": theme.accent or warning,
        "lpx-chart-3": theme.secondary or success,
    }
