"""Moments in a recording as people write them: `14:03:20`, `+3m`, `-30s`, `2026-12-01T14:03:20`, Unix seconds."""

from __future__ import annotations

import datetime as dt
import re

from lpxtop.record.retention import parse_duration

_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?$")
HELP = ("a time of day (14:03:20, local time, on the recording's date), +DURATION from the start (+3m), "
        "-DURATION before the end (-30s, or end-30s; after a flag write --to=-30s), a date and time "
        "(2026-12-01T14:03:20), Unix seconds, start or end")


def parse_moment(text: str, start: float, end: float) -> float:
    """The Unix time `text` names within a recording that spans [start, end]; ValueError with the forms
    accepted otherwise. The result is not clamped to the recording."""
    raw = text.strip()
    low = raw.lower()
    if low in ("start", "begin", "beginning"):
        return start
    if low in ("end", "last"):
        return end
    for name, sign in (("start", "+"), ("end", "-")):
        if low.startswith(name) and low[len(name):len(name) + 1] in ("+", "-"):
            raw = low[len(name):]
            if raw[0] != sign:
                raise ValueError(f"{text!r}: write {name}{sign}DURATION")
            break
    try:
        if raw.startswith("+"):
            return start + parse_duration(raw[1:])
        if raw.startswith("-"):
            return end - parse_duration(raw[1:])
    except ValueError:
        raise ValueError(f"{text!r}: expected {HELP}") from None
    if re.fullmatch(r"\d{9,}(\.\d+)?", raw):
        return float(raw)
    m = _CLOCK.match(raw)
    if m:
        hour, minute, second = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
        frac = float("0." + m.group(4)) if m.group(4) else 0.0
        if hour > 23 or minute > 59 or second > 59:
            raise ValueError(f"{text!r} is not a time of day")
        return _time_of_day(hour, minute, second, frac, start, end)
    try:
        moment = dt.datetime.fromisoformat(raw.replace("Z", "+00:00") if raw.endswith("Z") else raw)
    except ValueError:
        raise ValueError(f"{text!r}: expected {HELP}") from None
    return moment.timestamp()  # a naive date-time is local time


def _time_of_day(hour: int, minute: int, second: int, frac: float, start: float, end: float) -> float:
    """That local time on the day within [start, end] that has it, else the nearest such moment."""
    first = dt.datetime.fromtimestamp(start).date()
    last = dt.datetime.fromtimestamp(end).date()
    candidates = []
    day = first - dt.timedelta(days=1)
    while day <= last + dt.timedelta(days=1):
        candidates.append(dt.datetime(day.year, day.month, day.day, hour, minute, second).timestamp() + frac)
        day += dt.timedelta(days=1)
    inside = [c for c in candidates if start - 1 <= c <= end + 1]
    if inside:
        return inside[0]
    return min(candidates, key=lambda c: min(abs(c - start), abs(c - end)))


def format_moment(t: float, with_date: bool = False) -> str:
    """Local time as the time bar shows it."""
    moment = dt.datetime.fromtimestamp(t)
    return moment.strftime("%Y-%m-%d %H:%M:%S" if with_date else "%H:%M:%S")
