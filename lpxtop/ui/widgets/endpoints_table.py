"""The endpoints table: one row per endpoint keyed by its name; only the cells that changed are updated."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from textual.binding import Binding

from lpxtop.humanize import (
    UNKNOWN,
    fmt_bytes,
    fmt_count,
    fmt_ms,
    fmt_pair_ms,
    fmt_pct,
    fmt_rate,
    fmt_signed_ms,
)
from lpxtop.model.snapshot import EndpointView
from lpxtop.ui.formatting import level, spark_text
from lpxtop.ui.palette import Palette
from lpxtop.ui.widgets.row_table import COLUMN_PADDING, RowTable, TableCell, TableColumn

STATUS_SYMBOLS = {"up": "●", "degraded": "◐", "down": "✖", "pending": "…"}
DISCOVERED_MARK = "◇"  # endpoints found by discovery rather than named by the user
# Sorting puts problems first: the worst status, the slowest, the most errors, the longest queue.
STATUS_RANK = {"down": 0, "degraded": 1, "pending": 2, "up": 3}


def server_ttft_p50_ms(view: EndpointView) -> float | None:
    """The server's own TTFT p50: an estimate from its histogram's buckets (see ServerLatency.p50_range)."""
    latency = getattr(view.server, "server_ttft_ms", None) if view.server is not None else None
    return getattr(latency, "p50", None)


def server_ttft_mean_ms(view: EndpointView) -> float | None:
    """The server's own TTFT mean over its window (exact: Δsum/Δcount of its histogram), when it has one."""
    latency = getattr(view.server, "server_ttft_ms", None) if view.server is not None else None
    return getattr(latency, "mean", None)


def ttft_gap_ms(view: EndpointView) -> float | None:
    """Time outside the engine (network, proxy, HTTP server): the probes' TTFT minus the server's own for
    comparable requests (lpxtop.model.server_gap); None where nothing compares."""
    return view.ttft_gap.value_ms


def gap_text(view: EndpointView) -> str:
    """The gap for a cell: `+6.2`, `~+4` for an estimate (a range stands behind it), `--` for none."""
    gap = view.ttft_gap
    if gap.value_ms is None:
        return UNKNOWN
    return ("~" if gap.estimate else "") + fmt_signed_ms(gap.value_ms)


def error_pct(view: EndpointView) -> float | None:
    """Failed share of the window's probes; of its agent steps when the endpoint runs only those."""
    rate = view.error_rate
    if rate is None and view.agent is not None and view.agent.samples:
        steps = view.agent.samples
        rate = sum(1 for s in steps if not s.ok) / len(steps)
    return None if rate is None else rate * 100.0


def _server_value(view: EndpointView, name: str) -> float | None:
    return getattr(view.server, name, None) if view.server is not None else None


def ttft_trend(view: EndpointView) -> list[float | None]:
    """TTFT per probe in the window, None for failed probes (a gap in the sparkline)."""
    return [s.ttft_ms if s.ok else None for s in view.samples]



def step_cell(view: EndpointView) -> tuple[str, str]:
    """The main table's `Step50/95` text and level; empty for an endpoint without the agent probe."""
    agent = view.agent
    if agent is None:
        return "", "ok"
    if agent.step_ms is None:
        return UNKNOWN, "unknown"
    return fmt_pair_ms(agent.step_ms.p50, agent.step_ms.p95), "ok"


@dataclass(frozen=True)
class Cell:
    """What a cell shows: text and a level for its colour ("ok", "warning", "critical", "unknown")."""

    text: str
    level: str = "ok"
    right: bool = True


Thresholds = Mapping[str, tuple[float, float]]


def _p(value: object, attr: str) -> float | None:
    return getattr(value, attr, None) if value is not None else None


def _status(v: EndpointView, t: Thresholds) -> Cell:
    return Cell(STATUS_SYMBOLS.get(v.status, "?"), {"up": "ok", "degraded": "warning", "down": "critical"}.get(v.status, "unknown"), False)


def _name(v: EndpointView, t: Thresholds) -> Cell:
    prefix = DISCOVERED_MARK + " " if v.config.discovered else ""
    return Cell(prefix + v.name, "ok", False)


def _queue(v: EndpointView, t: Thresholds) -> Cell:
    waiting, running = _server_value(v, "requests_waiting"), _server_value(v, "requests_running")
    if waiting is None and running is None:
        return Cell(UNKNOWN, "unknown")
    return Cell(f"{fmt_count(waiting)}/{fmt_count(running)}", level(waiting, "queue_waiting", t))


def _kv(v: EndpointView, t: Thresholds) -> Cell:
    kv = _server_value(v, "kv_cache_usage")
    return Cell(fmt_pct(kv, fraction=True), level(kv, "kv_cache", t))


def _ms_cell(value: float | None, key: str, t: Thresholds) -> Cell:
    return Cell(fmt_ms(value), level(value, key, t) if key else ("unknown" if value is None else "ok"))


@dataclass(frozen=True)
class Column:
    """A table column: `priority` 1 is always shown, higher ones only when the terminal is wide enough."""

    key: str
    label: str
    width: int
    priority: int
    cell: Callable[[EndpointView, Thresholds], Cell]
    flexible: bool = False  # takes the width left over
    agent_only: bool = False  # shown only when an endpoint in the table has the agent-step probe


# Priorities: what a user asks first stays on an 80-column terminal (status, TTFT, tok/s, errors, then the
# server's queue and KV cache, which say why); agent steps (only when an endpoint runs them) next; then
# E2E, ITL, and the rest as the width allows. The name column takes some of the width left over.
COLUMNS: tuple[Column, ...] = (
    Column("status", "", 1, 1, _status),
    Column("name", "Endpoint", 14, 1, _name),
    Column("model", "Model", 20, 8, lambda v, t: Cell(v.model or UNKNOWN, "ok" if v.model else "unknown", False)),
    Column("kind", "Server", 8, 6, lambda v, t: Cell(v.server_kind, "ok", False)),
    Column("ttft50", "TTFT50", 6, 1, lambda v, t: _ms_cell(_p(v.ttft_ms, "p50"), "ttft_p50_ms", t)),
    Column("ttft99", "TTFT99", 6, 1, lambda v, t: _ms_cell(_p(v.ttft_ms, "p99"), "ttft_p99_ms", t)),
    Column("gap", "Gap", 6, 7, lambda v, t: Cell(gap_text(v), "ok" if ttft_gap_ms(v) is not None else "unknown")),
    Column("itl", "ITL50", 5, 5, lambda v, t: _ms_cell(_p(v.itl_ms, "p50"), "itl_p50_ms", t)),
    Column("tpot", "TPOT50", 6, 9, lambda v, t: _ms_cell(_p(v.tpot_ms, "p50"), "tpot_p50_ms", t)),
    Column("tps", "tok/s", 5, 1, lambda v, t: Cell(fmt_rate(_p(v.output_tokens_per_s, "p50")), "ok" if v.output_tokens_per_s else "unknown")),
    Column("e2e", "E2E99", 6, 4, lambda v, t: _ms_cell(_p(v.e2e_ms, "p99"), "e2e_p99_ms", t)),
    Column("step", "Step50/95", 9, 3, lambda v, t: Cell(*step_cell(v)), agent_only=True),
    Column("err", "Err%", 4, 1, lambda v, t: Cell(fmt_pct(error_pct(v)), level(error_pct(v), "error_pct", t))),
    Column("queue", "Q w/r", 7, 2, _queue),
    Column("kv", "KV", 4, 2, _kv),
    Column("trend", "TTFT trend", 12, 6, lambda v, t: Cell(spark_text(ttft_trend(v), 12), "ok", False)),
    Column("last_error", "Last error", 16, 7, lambda v, t: Cell(v.last_error or "", "critical" if v.last_error else "ok", False), True),
)


# Only when the snapshot spans hosts (the fleet view) or knows each endpoint's GPU memory: the live
# dashboard's columns stay as they are.
HOST_COLUMN = Column("host", "Host", 12, 1, lambda v, t: Cell(v.host or UNKNOWN, "ok" if v.host else "unknown", False))
GPU_MEM_COLUMN = Column("gpu_mem", "GPU mem", 7, 3, lambda v, t: Cell(fmt_bytes(v.gpu_mem_bytes),
                                                                           "ok" if v.gpu_mem_bytes is not None else "unknown"))


def columns_for(views: Sequence[EndpointView]) -> tuple[Column, ...]:
    """COLUMNS, with the host column after the status when views span hosts, and GPU memory after KV."""
    if not any(getattr(v, "host", None) for v in views):
        return COLUMNS
    out: list[Column] = []
    for c in COLUMNS:
        out.append(c)
        if c.key == "status":
            out.append(HOST_COLUMN)
        elif c.key == "kv":
            out.append(GPU_MEM_COLUMN)
    return tuple(out)


def columns_for_width(width: int, columns: tuple[Column, ...] = COLUMNS, agent: bool = False) -> tuple[Column, ...]:
    """The columns that fit in `width` cells, most important first, kept in display order.

    `agent`: some endpoint has the agent-step probe, so its step column is among them."""
    columns = tuple(c for c in columns if agent or not c.agent_only)
    chosen: set[str] = set()
    used = 0
    for priority in sorted({c.priority for c in columns}):
        group = [c for c in columns if c.priority == priority]
        need = sum(c.width + COLUMN_PADDING for c in group)
        if priority > 1 and used + need > width:
            break
        chosen.update(c.key for c in group)
        used += need
    return tuple(c for c in columns if c.key in chosen)


SORT_KEYS: tuple[tuple[str, str], ...] = (
    ("name", "name"),
    ("status", "status"),
    ("ttft", "TTFT p99"),
    ("errors", "error %"),
    ("queue", "queue"),
    ("tps", "tok/s"),
    ("worst", "worst first"),
)
# The column each sort orders by (its header shows the direction), and the sorts whose natural order puts
# the largest value first (▼); the others go from the smallest (▲, names A to Z).
SORT_COLUMN = {"name": "name", "status": "status", "ttft": "ttft99", "errors": "err", "queue": "queue", "tps": "tps"}
DESCENDING = frozenset({"ttft", "errors", "queue", "worst"})


def sort_arrow(key: str, reverse: bool) -> str:
    """▼ when the rows go from the largest value down, ▲ from the smallest up."""
    return "▼" if (key in DESCENDING) != reverse else "▲"


def sort_label(key: str, reverse: bool) -> str:
    """The sort as the panel's title says it: `TTFT p99 ▼`, `name ▲`, `worst first ▲` (inverted)."""
    return f"{dict(SORT_KEYS).get(key, key)} {sort_arrow(key, reverse)}"


def _sort_value(v: EndpointView, key: str):
    """What a sort orders by, None when unknown (those go last, in either direction)."""
    if key == "status":
        return STATUS_RANK.get(v.status, 9)
    if key == "ttft":
        p99 = _p(v.ttft_ms, "p99")
        return None if p99 is None else -p99
    if key == "errors":
        e = error_pct(v)
        return None if e is None else -e
    if key == "queue":
        w = _server_value(v, "requests_waiting")
        return None if w is None else -w
    if key == "tps":
        return _p(v.output_tokens_per_s, "p50")
    if key == "worst":  # down, then degraded; then the most errors; then the slowest TTFT p99
        e = error_pct(v)
        p99 = _p(v.ttft_ms, "p99")
        return (STATUS_RANK.get(v.status, 9), -(e or 0.0), -(p99 if p99 is not None else -float("inf")))
    return v.name


def sort_views(views: Sequence[EndpointView], key: str, *, reverse: bool = False) -> list[EndpointView]:
    """Order rows by a SORT_KEYS key (`reverse`: the other way round); unknown values go last either way,
    ties by name."""
    valued = [(_sort_value(v, key), v) for v in views]
    known = sorted(((value, v.name, v.key, v) for value, v in valued if value is not None),
                   key=lambda item: item[:3], reverse=reverse)
    unknown = sorted((v for value, v in valued if value is None), key=lambda v: (v.name, v.key))
    return [item[3] for item in known] + unknown


def filter_views(views: Sequence[EndpointView], text: str) -> list[EndpointView]:
    """Endpoints whose name, model, URL or server kind contains `text` (case-insensitive)."""
    needle = text.strip().lower()
    if not needle:
        return list(views)
    return [
        v
        for v in views
        if any(needle in (s or "").lower() for s in (v.name, v.model, v.config.url, v.server_kind, v.host))
    ]


class EndpointsTable(RowTable):
    """Endpoints, one row each, keyed by name; only rows whose text or colour changed are redrawn."""

    BINDINGS = [Binding("enter", "select_cursor", "detail", key_display="⏎")]

    @property
    def selected_name(self) -> str | None:
        """The endpoint under the cursor, if any (its `EndpointView.key`: the name, or host/name)."""
        return self.cursor_key

    @property
    def row_names(self) -> list[str]:
        """Endpoint keys in display order (after filter and sort)."""
        return self.row_keys

    def show(self, views: Sequence[EndpointView], thresholds: Thresholds, palette: Palette,
             sort: tuple[str, bool] | None = None) -> None:
        """Display `views` (already filtered and sorted); `sort` (key, reversed) marks its column's header."""
        seen: set[str] = set()
        # Rows are keyed by name (host/name across hosts): a duplicate (a config mistake) would make two rows
        # one; show the first.
        views = [v for v in views if not (v.key in seen or seen.add(v.key))]
        width = max(0, self.size.width or self.app.size.width) - 2  # room for a scrollbar
        columns = columns_for_width(width, columns_for(views), agent=any(v.agent is not None for v in views))
        if sort is not None:  # the sorted column's header carries the direction: `TTFT99▼`
            marked = SORT_COLUMN.get(sort[0])
            arrow = sort_arrow(*sort)
            columns = tuple(replace(c, label=c.label + arrow, width=max(c.width, len(c.label) + 1))
                            if c.key == marked else c for c in columns)
        # The width left over goes first to names longer than the name column (up to 14 more cells), then
        # to the last error, or to the name when the error is not shown.
        rows_cells = [[c.cell(v, thresholds) for c in columns] for v in views]
        name_index = [c.key for c in columns].index("name")
        name_col = columns[name_index]
        longest = max((len(cells[name_index].text) for cells in rows_cells), default=0)
        fixed = sum(c.width + COLUMN_PADDING for c in columns)
        extra = max(0, width - fixed)
        grow = min(extra, 14, max(0, longest - name_col.width))
        extra -= grow
        flexible = [c for c in columns if c.flexible] or [name_col]
        flex_width = {c.key: c.width + (extra if c.flexible else min(extra, 14 - grow)) for c in flexible}
        flex_width["name"] = flex_width.get("name", name_col.width) + grow
        table_columns = tuple(TableColumn(c.key, c.label, flex_width.get(c.key, c.width)) for c in columns)
        rows = []
        for v, row in zip(views, rows_cells):
            cells = [TableCell(cell.text, palette.for_level(cell.level) if cell.level != "ok" else None, cell.right)
                     for cell in row]
            rows.append((v.key, cells))
        self.set_table(table_columns, rows)
