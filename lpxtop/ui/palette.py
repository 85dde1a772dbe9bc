"""The current theme's status colours as Rich styles, for text that widgets build in Python.

TCSS colours follow the theme by themselves; Rich `Text` built in code does not, so widgets take their
styles from here and re-render when the theme changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rich.style import Style
from textual.color import Color, ColorParseError


def _rgb_hex(value: str | None, fallback: str) -> str:
    try:
        return Color.parse(value or fallback).hex6
    except ColorParseError:
        return Color.parse(fallback).hex6


@dataclass(frozen=True)
class Palette:
    """Rich styles per level ("ok", "warning", "critical", "unknown"), plus chart colours as RGB."""

    ok: Style
    warning: Style
    critical: Style
    muted: Style
    accent: Style
    chart: tuple[tuple[int, int, int], ...]

    def for_level(self, level: str) -> Style:
        """The style for a formatting.level() result."""
        if level == "critical":
            return self.critical
        if level == "warning":
            return self.warning
        if level == "unknown":
            return self.muted
        return Style()

    def status(self, status: str) -> Style:
        """Endpoint status colours: up, degraded, down, pending."""
        return {"up": self.ok, "degraded": self.warning, "down": self.critical}.get(status, self.muted)

    def severity(self, severity: str) -> Style:
        """Alert severity colours."""
        return {"critical": self.critical, "warning": self.warning}.get(severity, self.accent)


def palette_from_variables(variables: Mapping[str, str]) -> Palette:
    """Build the palette from the app's resolved theme variables (App.theme_variables)."""

    def rgb(name: str, fallback: str) -> tuple[int, int, int]:
        color = Color.parse(_rgb_hex(variables.get(name), fallback))
        return (color.r, color.g, color.b)

    return Palette(
        ok=Style(color=_rgb_hex(variables.get("lpx-ok"), "#4ebf71")),
        warning=Style(color=_rgb_hex(variables.get("lpx-warning"), "#ffa62b"), bold=True),
        critical=Style(color=_rgb_hex(variables.get("lpx-critical"), "#ba3c5b"), bold=True),
        muted=Style(color=_rgb_hex(variables.get("lpx-muted"), "#808080")),
        accent=Style(color=_rgb_hex(variables.get("primary"), "#0178d4")),
        chart=(
            rgb("lpx-chart-1", "#0178d4"),
            rgb("lpx-chart-2", "#ffa62b"),
            rgb("lpx-chart-3", "#4ebf71"),
            rgb("lpx-warning", "#ffa62b"),
            rgb("lpx-critical", "#ba3c5b"),
        ),
    )


def monochrome_palette(chart: tuple[tuple[int, int, int], ...]) -> Palette:
    """The palette under NO_COLOR: emphasis by attributes, never by a colour (a terminal filter turns every
    colour into a grey, and the critical red became a grey dimmer than plain text). Critical is bold and
    reversed, a warning bold and underlined; plain text for what is fine; muted text is dim."""
    return Palette(
        ok=Style(),
        warning=Style(bold=True, underline=True),
        critical=Style(bold=True, reverse=True),
        muted=Style(dim=True),
        accent=Style(),
        chart=chart,
    )
