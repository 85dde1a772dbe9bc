"""Numbers as people read them: bytes, ages, durations, latencies, rates. The one place lpxtop turns a
figure into text for a person; pure functions of numbers (no Rich, no Textual), so the engine's messages,
the reports and the dashboard's cells all format alike, and one table test holds them
(tests/unit/test_humanize.py).

Two registers. Cells (`fmt_*`): at most about six characters, unknown is `--`, never 0, and so is a number
that is not finite or too large for a float; every function takes any number without raising. Prose
(messages, reports, the CLI's sentences): `spoken_ms` ("430 ms"), `message_age` ("3 h"), `memory_size`
("1.5 GiB"), `file_size` ("4.2 MB"). Durations as flags take them (`30s`, `1m30s`): lpxtop/durations.py.
"""

from __future__ import annotations

from lpxtop.numbers import finite_or_none as known  # None, NaN, ±Inf, too large or not a number -> None

UNKNOWN = "--"


def fmt_ms(value: float | None) -> str:
    """Milliseconds in at most 6 characters: 3.2, 142, 1.25s, 12.3s, 2m05s."""
    value = known(value)
    if value is None:
        return UNKNOWN
    if value < 10:
        return f"{value:.1f}"
    if value < 1000:
        return f"{value:.0f}"
    seconds = value / 1000.0
    if seconds < 10:
        return f"{seconds:.2f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes}m{rest:02d}s"


def fmt_ms_unit(value: float | None) -> str:
    """fmt_ms with its unit when it has none: `720 ms`, `1.52s`, `--` (for prose, where `1.52s ms` read
    wrong)."""
    text = fmt_ms(value)
    return text if text == UNKNOWN or text.endswith("s") else f"{text} ms"


def fmt_signed_ms(value: float | None) -> str:
    """A difference in ms with its sign: +24, -3.1, +1.20s."""
    value = known(value)
    if value is None:
        return UNKNOWN
    sign = "-" if value < 0 else "+"
    return sign + fmt_ms(abs(value))


def fmt_pair_ms(low: float, high: float) -> str:
    """Two times (low ≤ high) in at most 9 characters: 142/318, 0.9/2.4s, 12/46s, 2/17m."""
    if high < 999.5:
        return f"{fmt_ms(low)}/{fmt_ms(high)}"
    if high < 9_950:
        return f"{low / 1000:.1f}/{high / 1000:.1f}s"
    if high < 99_500:
        return f"{low / 1000:.0f}/{high / 1000:.0f}s"
    return f"{low / 60_000:.0f}/{high / 60_000:.0f}m"


def fmt_rate(value: float | None) -> str:
    """Tokens per second: 8.4, 84.2, 842, 1.2k."""
    value = known(value)
    if value is None:
        return UNKNOWN
    if value < 100:
        return f"{value:.1f}"
    if value < 1000:
        return f"{value:.0f}"
    if value < 100_000:
        return f"{value / 1000:.1f}k"
    return f"{value / 1000:.0f}k"


def fmt_joules(value: float | None) -> str:
    """Energy in joules (per output token): "0.41", "2.3", "15"; `--` when unknown."""
    value = known(value)
    if value is None or value < 0:
        return UNKNOWN
    if value < 1:
        return f"{value:.2f}"
    if value < 10:
        return f"{value:.1f}"
    return f"{value:.0f}"


def fmt_pct(value: float | None, *, fraction: bool = False, digits: int = 0) -> str:
    """A percentage; `fraction=True` when the value is 0..1."""
    value = known(value)
    if value is None or (fraction and known(value * 100.0) is None):
        return UNKNOWN
    pct = value * 100.0 if fraction else value
    return f"{pct:.{digits}f}%"


def fmt_count(value: float | None) -> str:
    """A gauge that counts things (requests): integers without a decimal point."""
    value = known(value)
    if value is None:
        return UNKNOWN
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.1f}"


def fmt_bytes(value: float | None) -> str:
    """Binary units, 1 decimal from GiB: 812M, 71.2G."""
    value = known(value)
    if value is None:
        return UNKNOWN
    if value < 1024:
        return f"{value:.0f}B"
    for unit, size in (("T", 1024.0**4), ("G", 1024.0**3), ("M", 1024.0**2), ("K", 1024.0)):
        if value >= size:
            amount = value / size
            return f"{amount:.1f}{unit}" if unit in "TG" else f"{amount:.0f}{unit}"
    return f"{value:.0f}B"  # pragma: no cover - unreachable


def fmt_duration(seconds: float | None) -> str:
    """Compact elapsed time: 45s, 12m03s, 1h02m, 3d04h."""
    seconds = known(seconds)
    if seconds is None:
        return UNKNOWN
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def fmt_ago(event_time: float | None, now: float) -> str:
    """How long before `now` (the snapshot's wall time, never time.time(), so screens are reproducible)."""
    if known(event_time) is None or known(now) is None:
        return UNKNOWN
    return fmt_duration(now - event_time) + " ago"


def spoken_ms(ms: float) -> str:
    """430 ms, 6.10 s: how a person says a latency."""
    if ms >= 100_000:
        return f"{ms / 1000:.0f} s"
    if ms >= 10_000:
        return f"{ms / 1000:.1f} s"
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    if ms >= 10:
        return f"{ms:.0f} ms"
    return f"{ms:.2g} ms"


def message_age(seconds: float | None) -> str:
    """``"3 h"`` style age for messages; ``"?"`` when unknown."""
    if seconds is None:
        return "?"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"


def memory_size(n: int) -> str:
    """GiB/MiB for memory in messages."""
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GiB"
    return f"{n / (1 << 20):.0f} MiB"


def file_size(n: float) -> str:
    """A file's size in decimal units, one decimal from kB: 812 B, 4.2 MB, 1.5 GB."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"
