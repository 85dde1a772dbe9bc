"""The load test's step panel: where the test is, the running step's live figures, the server right now, and
one row per step (the running one last, in italics).

Figures are formatted as everywhere in lpxtop (`ui/formatting.py`), from the same `StepResult`s the JSON
and CSV are written from, so the screen and the report say the same thing.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from lpxtop.model.load import LoadState, StepResult, format_level
from lpxtop.model.server import ServerMetrics
from lpxtop.ui.formatting import fmt_count, fmt_duration, fmt_ms, fmt_pct, fmt_rate
from lpxtop.ui.palette import Palette

PHASE_TEXT = {
    "starting": "starting",
    "warmup": "warm-up (not counted)",
    "measuring": "measuring",
    "draining": "draining (holding the load until the counted requests end)",
    "judging": "judging the step",
    "done": "finished",
    "stopped": "stopped",
    "failed": "failed",
}
# Columns by priority: a narrow terminal drops the last ones first.
COLUMNS = (
    ("#", "right"), ("load", "left"), ("ok", "right"), ("fail", "right"), ("req/s", "right"),
    ("tok/s", "right"), ("TTFT p50", "right"), ("TTFT p95", "right"), ("E2E p95", "right"), ("SLO", "left"),
    ("TPOT p50", "right"), ("ITL p50", "right"), ("queue↑", "right"), ("KV↑", "right"), ("goodput", "right"),
    ("status", "left"),
)
COLUMN_WIDTH = {"#": 3, "load": 14, "ok": 5, "fail": 4, "req/s": 6, "tok/s": 6, "TTFT p50": 8, "TTFT p95": 8,
                "E2E p95": 7, "SLO": 16, "TPOT p50": 8, "ITL p50": 7, "queue↑": 6, "KV↑": 4, "goodput": 7,
                "status": 9}


def level_cell(step: StepResult) -> str:
    if step.mode == "concurrency":
        return f"{int(step.level)} conc"
    if step.mode == "rate":
        return f"{step.level:g} req/s"
    return f"{int(step.level)} tok in"


def slo_cell(step: StepResult, palette: Palette) -> Text:
    if step.status == "running":
        return Text("…", style=palette.muted)
    if step.client.limited:
        return Text("client-limited", style=palette.warning)
    if step.slo_met is None:
        text = Text("--", style=palette.muted)
    elif step.slo_met:
        text = Text("met", style=palette.ok)
    else:
        missed = ", ".join(r.metric.replace("_", " ") for r in step.slo if not r.met)
        text = Text(f"missed {missed}", style=palette.critical)
    if step.saturated:
        text.append(" saturated", style=palette.warning)
    return text


def step_row(step: StepResult, palette: Palette, *, knee: bool, capacity: bool) -> dict[str, Text | str]:
    marker = "◆" if knee else ""
    server = step.server
    row: dict[str, Text | str] = {
        "#": f"{step.index + 1}",
        "load": Text(level_cell(step) + (" ✓" if capacity else "") + (f" {marker}" if marker else ""),
                     style=palette.ok if capacity else ""),
        "ok": str(step.completed),
        "fail": Text(str(step.failed), style=palette.critical if step.failed else ""),
        "req/s": fmt_rate(step.request_throughput),
        "tok/s": fmt_rate(step.output_throughput),
        "TTFT p50": fmt_ms(step.ttft_ms.p50 if step.ttft_ms else None),
        "TTFT p95": fmt_ms(step.ttft_ms.p95 if step.ttft_ms else None),
        "E2E p95": fmt_ms(step.e2el_ms.p95 if step.e2el_ms else None),
        "SLO": slo_cell(step, palette),
        "TPOT p50": fmt_ms(step.tpot_ms.p50 if step.tpot_ms else None),
        "ITL p50": fmt_ms(step.itl_ms.p50 if step.itl_ms else None),
        "queue↑": fmt_count(server.peak_requests_waiting if server else None),
        "KV↑": fmt_pct(server.peak_kv_cache_usage if server else None, fraction=True),
        "goodput": fmt_rate(step.request_goodput),
        "status": step.status,
    }
    if step.status == "running":  # the step under way, over its requests so far
        row = {k: (v if isinstance(v, Text) or k == "#" else Text(v, style="italic")) for k, v in row.items()}
    return row


def columns_for(width: int) -> list[str]:
    chosen: list[str] = []
    used = 0
    for name, _ in COLUMNS:
        need = COLUMN_WIDTH[name] + 1
        if chosen and used + need > width:
            break
        chosen.append(name)
        used += need
    return chosen


def render_steps(state: LoadState, width: int, palette: Palette) -> Table:
    names = columns_for(width)
    table = Table(box=None, padding=(0, 1, 0, 0), show_edge=False, expand=False, header_style=palette.muted)
    justify = dict(COLUMNS)
    for name in names:
        table.add_column(name, justify=justify[name], no_wrap=True, overflow="ellipsis",  # type: ignore[arg-type]
                         max_width=COLUMN_WIDTH[name] if name == "SLO" else None)
    cap_index = state.capacity.step_index if state.capacity is not None else None
    rows = [step_row(s, palette, knee=i == state.knee_index, capacity=i == cap_index) for i, s in enumerate(state.steps)]
    if state.live is not None and not state.finished:
        rows.append(step_row(state.live, palette, knee=False, capacity=False))
    for row in rows:
        table.add_row(*(row[name] for name in names))
    return table


def render_status(state: LoadState, server: ServerMetrics | None, now: float, palette: Palette) -> Text:
    """Three lines: where the test is; the running step's live figures; the server right now."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if state.step_index is not None and not state.finished:
        text.append(f"step {state.step_index + 1}", style="bold")
        if not state.search and state.planned_levels:
            text.append(f"/{len(state.planned_levels)}")
        text.append(f" · {format_level(state.mode, state.level)} · ")
    text.append(PHASE_TEXT.get(state.phase, state.phase), style=palette.accent if not state.finished else "bold")
    left = state.time_left_s(now)
    if left is not None and not state.finished:
        text.append(f" · {fmt_duration(left)} left")
    if not state.finished:
        text.append(f" · {state.in_flight} in flight · {state.sent} sent", style=palette.muted)
    if state.finished:
        reason = state.capacity.reason if state.capacity is not None and state.phase != "failed" else state.message
        text.append(f" · {reason}", style=palette.critical if state.phase == "failed" else "")
        text.append(" · q quits", style=palette.muted)
    elif state.message and state.step_index is None:
        text.append(f" · {state.message}")
    text.append("\n")
    live = state.live
    if live is not None and live.requests and not state.finished:
        text.append(f"live (last {state.live_recent} counted): ", style=palette.muted)
        text.append(f"TTFT p50 {fmt_ms(live.ttft_ms.p50 if live.ttft_ms else None)}"
                    f" p95 {fmt_ms(live.ttft_ms.p95 if live.ttft_ms else None)}")
        text.append(f" · TPOT p50 {fmt_ms(live.tpot_ms.p50 if live.tpot_ms else None)}")
        text.append(f" · E2E p95 {fmt_ms(live.e2el_ms.p95 if live.e2el_ms else None)}")
        text.append(f" · {fmt_rate(live.output_throughput)} tok/s")
        errors = Text(f" · errors {live.failed}", style=palette.critical if live.failed else "")
        text.append_text(errors)
    elif state.capacity is not None:
        text.append(state.capacity.sentence, style="bold")
    else:
        text.append("no counted request has finished yet", style=palette.muted)
    text.append("\n")
    text.append("server now: ", style=palette.muted)
    if server is None or not server.ok:
        text.append("--" if server is None else server.status, style=palette.muted)
    else:
        text.append(f"running {fmt_count(server.requests_running)} · waiting {fmt_count(server.requests_waiting)}")
        text.append(f" · KV {fmt_pct(server.kv_cache_usage, fraction=True)}")
        text.append(f" · preemptions {fmt_count(server.preemptions_total)}")
        if server.server_ttft_ms is not None:
            text.append(f" · its TTFT p50 {fmt_ms(server.server_ttft_ms.p50)}")
    return text


class LoadStepPanel(Vertical):
    """Status lines and the step table; each redrawn only when what it shows changed."""

    DEFAULT_CSS = """
    LoadStepPanel { height: auto; }
    LoadStepPanel #load-status { height: 3; text-wrap: nowrap; text-overflow: ellipsis; }
    LoadStepPanel #load-steps { height: auto; max-height: 14; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._status_key: tuple | None = None
        self._table_key: tuple | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="load-status")
        yield Static("", id="load-steps")

    def show(self, state: LoadState, server: ServerMetrics | None, now: float, palette: Palette,
             *, force: bool = False) -> None:
        left = state.time_left_s(now)
        status_key = (state.seq, server, None if left is None else int(left), id(palette))
        if status_key != self._status_key or force:
            self._status_key = status_key
            self.query_one("#load-status", Static).update(render_status(state, server, now, palette), layout=False)
        width = self.content_size.width or 80
        table_key = (state.steps, state.live if not state.finished else None, state.knee_index, state.capacity,
                     width, id(palette))
        if table_key != self._table_key or force:
            self._table_key = table_key
            self.query_one("#load-steps", Static).update(render_steps(state, width, palette))
