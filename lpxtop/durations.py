"""Durations as people write them, in every flag and config key that takes one: one parser, one formatter.

`parse_duration` reads `500ms`, `30s`, `2m`, `1h`, `1h30m`, `2d`, or a plain number (seconds, unless the
setting's own unit is another: `--client-lag-limit 50` is 50 ms). `format_duration` writes seconds back
the same way (`0.5` → `500ms`, `90` → `1m30s`), so what lpxtop prints can be typed back in.

Elapsed times on screen (`12m03s` ago, uptime) have their own compact form: `humanize.fmt_duration`.
"""

from __future__ import annotations

import math
import re

UNITS: dict[str, float] = {
    "ms": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 7 * 86400.0,
}
EXAMPLES = "500ms, 30s, 2m, 1h, 1h30m or plain seconds"
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(?:e([-+]?\d+))?\s*(ms|sec|min|s|m|h|d|w)?", re.IGNORECASE)


class DurationError(ValueError):
    """A text that is no duration, or one out of the setting's range; the message says what to write."""


def parse_duration(
    value: str | int | float,
    *,
    low: float | None = None,
    high: float | None = None,
    bare_unit: float = 1.0,
) -> float:
    """Seconds from a number or a text such as `500ms`, `30s`, `2m`, `1h`, `1h30m`.

    A plain number (or a text without a unit) counts in `bare_unit` seconds (1: seconds; 0.001: a setting
    kept in milliseconds). `low`/`high` bound the result (inclusive); NaN and infinities never pass.
    Raises DurationError naming the value and what would do.
    """
    if isinstance(value, bool):
        raise DurationError(f"{value!r} is not a duration (examples: {EXAMPLES})")
    if isinstance(value, int | float):
        seconds = float(value) * bare_unit
    elif isinstance(value, str):
        seconds = _parse_text(value, bare_unit)
    else:
        raise DurationError(f"{value!r} is not a duration (examples: {EXAMPLES})")
    if not math.isfinite(seconds):
        raise DurationError(f"{value!r} is not a finite duration")
    if (low is not None and seconds < low) or (high is not None and seconds > high):
        raise DurationError(f"{value!r} must be between {_bound(low, '0s')} and {_bound(high, 'no limit')}")
    return seconds


def _bound(limit: float | None, none: str) -> str:
    return none if limit is None else format_duration(limit)


def _parse_text(text: str, bare_unit: float) -> float:
    raw = text.strip()
    if raw.lower() in ("inf", "+inf", "infinity", "nan"):
        raise DurationError(f"{text!r} is not a finite duration")
    pos, total, parts, units = 0, 0.0, 0, 0
    while pos < len(raw):
        found = _PART.match(raw, pos)
        if found is None or found.end() == pos:
            raise DurationError(f"{text!r} is not a duration (examples: {EXAMPLES})")
        number = float(found.group(1) + (f"e{found.group(2)}" if found.group(2) else ""))
        unit = found.group(3)
        total += number * (UNITS[unit.lower()] if unit else bare_unit)
        parts += 1
        units += bool(unit)
        pos = found.end()
        while pos < len(raw) and raw[pos] in " \t":
            pos += 1
    if parts == 0 or (parts > 1 and units < parts):
        # "1h 30" is a slip, not 1 h and 30 s: every part of a compound duration names its unit
        raise DurationError(f"{text!r} is not a duration (examples: {EXAMPLES})")
    return total


def format_duration(seconds: float) -> str:
    """`seconds` as `parse_duration` reads it back: `250ms`, `1.5s`, `30s`, `2m`, `1m30s`, `1h`, `2d`."""
    if not math.isfinite(seconds):
        return str(seconds)
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{round(seconds * 1000, 3):g}ms"
    if seconds < 60:
        return f"{round(seconds, 3):g}s"
    whole = round(seconds, 3)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = "".join(f"{int(n)}{u}" for n, u in ((days, "d"), (hours, "h"), (minutes, "m")) if n)
    secs = round(secs, 3)
    return text + (f"{secs:g}s" if secs else "")
