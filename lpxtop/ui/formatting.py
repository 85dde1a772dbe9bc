"""Values into a severity level for colour, and cell text laid out: thresholds, levels, bars, sparklines, cuts.

Pure functions over numbers and Rich text, no Textual: every widget draws the same way, and tests check them
directly. The numbers themselves become text in lpxtop/humanize.py. Unknown values are always `--`, never 0;
so are numbers that are not finite (a server may legally report a gauge as +Inf or NaN) or too large for a
float: every function here takes any number without raising.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.cells import cell_len
from rich.text import Text

from lpxtop.humanize import UNKNOWN
from lpxtop.numbers import finite_or_none as known  # None, NaN, ±Inf, too large or not a number -> None

# (warning, critical) limits; a value at or above a limit takes that level.
DEFAULT_THRESHOLDS: dict[str, tuple[float, float]] = {
    "ttft_p50_ms": (500.0, 2000.0),
    "ttft_p99_ms": (1000.0, 3000.0),
    "e2e_p99_ms": (15000.0, 30000.0),
    "itl_p50_ms": (100.0, 250.0),
    "tpot_p50_ms": (100.0, 250.0),
    "error_pct": (1.0, 5.0),
    "kv_cache": (0.9, 0.97),  # 0..1
    "queue_waiting": (1.0, 10.0),
    "gpu_mem": (0.9, 0.97),  # 0..1
    "gpu_temp_c": (80.0, 90.0),
    "cpu_pct": (85.0, 95.0),
    "host_mem": (0.9, 0.97),  # 0..1
    "swap": (0.25, 0.75),  # 0..1
    "mem_pressure": (10.0, 40.0),  # PSI avg10 %
}

LEVELS = ("ok", "warning", "critical", "unknown")


def merge_thresholds(overrides: Mapping[str, tuple[float, float]] | None) -> dict[str, tuple[float, float]]:
    """The defaults with the caller's limits laid over them."""
    merged = dict(DEFAULT_THRESHOLDS)
    for key, pair in (overrides or {}).items():
        warning, critical = pair
        merged[key] = (float(warning), float(critical))
    return merged


def level(value: float | None, key: str, thresholds: Mapping[str, tuple[float, float]]) -> str:
    """"ok", "warning" or "critical" for `value` against thresholds[key]; "unknown" for None."""
    value = known(value)
    if value is None:
        return "unknown"
    limits = thresholds.get(key)
    if limits is None:
        return "ok"
    warning, critical = limits
    if value >= critical:
        return "critical"
    if value >= warning:
        return "warning"
    return "ok"


def truncate(text: str | None, width: int) -> str:
    """Cut to `width` characters with an ellipsis; None becomes `--`."""
    if text is None:
        return UNKNOWN
    text = " ".join(text.split())  # one line: messages may hold newlines
    if width <= 0:
        return ""
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


SPARK_CHARS = "▁▂▃▄▅▆▇█"


def spark_text(values: Sequence[float | None], width: int) -> str:
    """A one-line sparkline of the last `width` values; a missing value (a failed probe) is a space,
    and so is a value that is not a finite number."""
    tail = [known(v) for v in (list(values)[-width:] if width > 0 else [])]
    finite = [v for v in tail if v is not None]
    if not finite:
        return " " * len(tail)
    # halved, so that two finite values at opposite ends of the float range still have a finite distance
    low, high = min(finite) / 2, max(finite) / 2
    span = high - low
    out = []
    for v in tail:
        if v is None:
            out.append(" ")
        elif span <= 0:
            out.append(SPARK_CHARS[0])
        else:
            out.append(SPARK_CHARS[min(len(SPARK_CHARS) - 1, int((v / 2 - low) / span * len(SPARK_CHARS)))])
    return "".join(out)


BAR_EIGHTHS = " ▏▎▍▌▋▊▉█"


def bar_text(fraction: float | None, width: int) -> str:
    """A horizontal bar `width` cells wide filled to `fraction` (0..1), in eighths of a cell."""
    if width <= 0:
        return ""
    fraction = known(fraction)
    if fraction is None:
        return "·" * width
    eighths = int(round(max(0.0, min(1.0, fraction)) * width * 8))
    full, part = divmod(eighths, 8)
    text = "█" * full + (BAR_EIGHTHS[part] if part and full < width else "")
    return text + " " * (width - len(text))


def ratio(used: float | None, total: float | None) -> float | None:
    """used / total, or None when either is unknown (or not finite) or the total is 0."""
    used, total = known(used), known(total)
    if used is None or not total:
        return None
    return known(used / total)


def join_lines(lines: Sequence[Text]) -> Text:
    """Lines of Rich text as one block, each line cut (not wrapped) at the widget's edge."""
    joined = Text("\n").join(lines)
    joined.no_wrap = True
    joined.overflow = "ellipsis"
    return joined


def pack_chunks(groups: Sequence[Sequence[Text]], width: int, sep: str = "  ") -> Text:
    """Chunks (a figure with its label: `TTFT p50 65 p99 120 ms`) laid out in lines `width` cells wide,
    `sep` between them, a chunk never split across lines: each group starts a new line and continues on
    as many as it needs. Only a chunk wider than a whole line is cut (with an ellipsis)."""
    lines: list[Text] = []
    for group in groups:
        line = Text()
        for chunk in group:
            if not chunk.plain:
                continue
            if line.plain and line.cell_len + cell_len(sep) + chunk.cell_len > width:
                lines.append(line)
                line = Text()
            if line.plain:
                line.append(sep)
            line.append_text(chunk)
        if line.plain:
            lines.append(line)
    text = Text("\n").join(lines)
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text
