"""The load test's step panel: where the test is, the running step's live figures, the server right now, and
one row per step (the running one last, in italics).

Figures are formatted as everywhere in lpxtop (`lpxtop/humanize.py`), from the same `StepResult`s the JSON
and CSV are written from, so the screen and the report say the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from lpxtop.humanize import fmt_count, fmt_duration, fmt_ms, fmt_ms_unit, fmt_pct, fmt_rate
from lpxtop.model.load import LoadState, StepResult, format_level
from lpxtop.model.server import ServerMetrics
from lpxtop.ui.formatting import pack_chunks
from lpxtop.ui.palette import Palette

PHASE_TEXT = {
    "starting": "starting",
    "warmup": "warming up (not counted)",
    "measuring": "measuring",
    "draining": "draining (holding the load until the counted requests end)",
    "judging": "judging the step",
    "done": "done",
    "stopped": "stopped",
    "failed": "failed",
}
# (name, justify, width). Shown in this order; a narrow terminal keeps them by PRIORITY. The SLO verdict
# comes last, takes the width left and wraps there: it is never cut.
COLUMNS = (
    ("#", "right", 2), ("load", "left", 10), ("ok", "right", 5), ("fail", "right", 4), ("req/s", "right", 5),
    ("tok/s", "right", 6), ("TTFT p50", "right", 8), ("TTFT p95", "right", 8), ("E2E p95", "right", 7),
    ("TPOT p50", "right", 8), ("ITL p50", "right", 7), ("queue↑", "right", 6), ("KV↑", "right", 4),
    ("goodput", "right", 7), ("p50 q/p/out", "right", 14), ("p95 q/p/out", "right", 14), ("status", "left", 9),
    ("SLO", "left", 14),
)
PRIORITY = ("#", "load", "ok", "fail", "SLO", "TTFT p95", "tok/s", "req/s", "TTFT p50", "p95 q/p/out", "E2E p95",
            "TPOT p50", "ITL p50", "queue↑", "KV↑", "p50 q/p/out", "goodput", "status")
# The TTFT at p50 and p95 split by the requests' own server spans (--traces-listen; model/chain.py TtftSplit)
SPLIT_COLUMNS = {"p50 q/p/out": 50, "p95 q/p/out": 95}
COLUMN_WIDTH = {name: width for name, _, width in COLUMNS}
SLO_MIN = 14  # the verdict's column: at least this wide, wider when there is room
CAPACITY_MARK, KNEE_MARK = "✓", "◆"
MARKS_LEGEND = f"{CAPACITY_MARK} capacity: the highest step within the SLO · {KNEE_MARK} knee: most throughput per unit of latency"


def level_cell(step: StepResult) -> str:
    return short_level(step.mode, step.level)


def short_level(mode: str, level: float) -> str:
    if mode == "concurrency":
        return f"{int(level)} conc"
    if mode == "rate":
        return f"{level:g} req/s"
    return f"{int(level)} tok in"


def slo_cell(step: StepResult, palette: Palette) -> Text:
    if step.status == "running":
        return Text("…", style=palette.muted)
    if step.client.limited:  # not judged: lpxtop itself was short of CPU (the help's legend says so)
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


def split_cell(step: StepResult, quantile: int) -> str:
    """The step's TTFT at `quantile` as queue/prefill/outside ms, from its requests' own server spans."""
    split = step.chain.split_at(quantile) if step.chain is not None else None
    if split is None:
        return "--"
    return f"{fmt_ms(split.queue_ms)}/{fmt_ms(split.prefill_ms)}/{fmt_ms(split.outside_ms)}"


def step_row(step: StepResult, palette: Palette, *, knee: bool, capacity: bool) -> dict[str, Text | str]:
    server = step.server
    marks = (f" {CAPACITY_MARK}" if capacity else "") + (f" {KNEE_MARK}" if knee else "")
    row: dict[str, Text | str] = {
        "#": f"{step.index + 1}",
        "load": Text(level_cell(step) + marks, style=palette.ok if capacity else ""),
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
        **{name: split_cell(step, q) for name, q in SPLIT_COLUMNS.items()},
    }
    if step.status == "running":  # the step under way, over its requests so far
        row = {k: (v if isinstance(v, Text) or k == "#" else Text(v, style="italic")) for k, v in row.items()}
    return row


def load_width(state: LoadState) -> int:
    """The load column's width: its widest level (planned, run or running) and room for both marks, so
    the columns keep their places as the test goes from 9 to 12."""
    levels = [*state.planned_levels, *(s.level for s in state.steps)]
    if state.level is not None:
        levels.append(state.level)
    return max([COLUMN_WIDTH["load"], *(len(short_level(state.mode, lv)) + 4 for lv in levels)])


def columns_for(width: int, load: int = COLUMN_WIDTH["load"], *, split: bool = False) -> list[str]:
    """The columns that fit in `width` cells, by PRIORITY, in display order (the TTFT split's only with `split`:
    a run with a trace receiver)."""
    widths = {**COLUMN_WIDTH, "load": load, "SLO": SLO_MIN}
    chosen: set[str] = set()
    used = 0
    for name in PRIORITY:
        if name in SPLIT_COLUMNS and not split:
            continue
        need = widths[name] + 1
        if chosen and used + need > width:
            break
        chosen.add(name)
        used += need
    return [name for name, _, _ in COLUMNS if name in chosen]


def render_steps(state: LoadState, width: int, palette: Palette) -> Table:
    load = load_width(state)
    split = any(s.chain is not None for s in (*state.steps, *((state.live,) if state.live is not None else ())))
    names = columns_for(width, load, split=split)
    table = Table(box=None, padding=(0, 1, 0, 0), show_edge=False, expand=False, header_style=palette.muted)
    justify = {name: j for name, j, _ in COLUMNS}
    fixed = sum((load if n == "load" else COLUMN_WIDTH[n]) + 1 for n in names if n != "SLO")
    for name in names:
        if name == "SLO":  # the rest of the width, wrapped: a verdict is never cut
            table.add_column(name, justify="left", min_width=SLO_MIN, max_width=max(SLO_MIN, width - fixed - 1),
                             overflow="fold")
        else:
            w = load if name == "load" else COLUMN_WIDTH[name]
            table.add_column(name, justify=justify[name], no_wrap=True, overflow="ellipsis",  # type: ignore[arg-type]
                             width=w, min_width=w)
    cap_index = state.capacity.step_index if state.capacity is not None else None
    rows = [step_row(s, palette, knee=i == state.knee_index, capacity=i == cap_index) for i, s in enumerate(state.steps)]
    if state.live is not None and not state.finished:
        rows.append(step_row(state.live, palette, knee=False, capacity=False))
    for row in rows:
        table.add_row(*(row[name] for name in names))
    return table


def marks_legend(state: LoadState) -> str:
    """The legend of the marks the table shows (for the panel's border), empty while there are none."""
    parts = []
    if state.capacity is not None and state.capacity.step_index is not None:
        parts.append(f"{CAPACITY_MARK} capacity")
    if state.knee_index is not None:
        parts.append(f"{KNEE_MARK} knee")
    return " · ".join(parts)


def load_title(state: LoadState, now: float, width: int = 200) -> str:
    """The panel's title: the mode, and where the test is (step k/n, elapsed, ETA) or how it ended. Once it
    ended, the capacity is added only where it fits in `width` cells (the verdict line in the panel says it
    whole; a border title is cut with an ellipsis)."""
    title = f"Load test · {state.mode.replace('_', ' ')}{' search' if state.search else ''}"
    progress = state.progress(now)
    if state.finished:
        title += f" · {PHASE_TEXT.get(state.phase, state.phase)}"
        if progress.elapsed_s is not None and state.steps:
            title += f" in {fmt_duration(progress.elapsed_s)}"
        if state.capacity is not None and state.capacity.level is not None:
            capacity = " · " + state.capacity.sentence.removeprefix("capacity: ").split(" (")[0] + " within the SLO"
            if cell_len(title + capacity) <= width:
                title += capacity
        return title
    if state.step_index is not None:
        title += f" · step {progress.step}" + (f"/{progress.steps}" if progress.steps is not None else "")
    if progress.elapsed_s is not None:
        title += f" · elapsed {fmt_duration(progress.elapsed_s)}"
    if progress.eta_s is not None:
        title += f" · ETA {fmt_duration(progress.eta_s)}"
    return title


def _progress_chunks(state: LoadState, now: float, palette: Palette, files: Sequence[str],
                     recording: str | None) -> list[Text]:
    """The step under way: its load, phase and requests in flight (step k/n, elapsed and ETA are in the
    panel's title); once the test ended, how, and what `q` writes."""
    chunks: list[Text] = []
    if state.finished:
        word = PHASE_TEXT.get(state.phase, state.phase)
        chunks.append(Text(word, style=palette.critical if state.phase == "failed" else "bold"))
        if state.phase == "failed" and state.message:
            chunks.append(Text(state.message, style=palette.critical))
        elif state.capacity is not None and state.capacity.reason and state.capacity.reason not in state.capacity.sentence:
            chunks.append(Text(state.capacity.reason))  # why it stopped, unless the verdict below says it
        if state.slo_text:
            chunks.append(Text.assemble(("SLO ", palette.muted), state.slo_text))
        where = " and ".join(files) if files else "this terminal"
        chunks.append(Text(f"q quits and writes the report to {where}", style="bold"))
        if recording:
            chunks.append(Text(f"recorded to {recording}", style=palette.muted))
        return chunks
    if state.step_index is not None:
        chunks.append(Text(format_level(state.mode, state.level), style="bold"))
    phase = Text(PHASE_TEXT.get(state.phase, state.phase), style=palette.accent)
    left = state.time_left_s(now)
    if left is not None:
        phase.append(f", {fmt_duration(left)} left")
    chunks.append(phase)
    if state.in_flight:
        chunks.append(Text(f"{state.in_flight} in flight", style=palette.muted))
    elif state.phase in ("starting", "warmup"):
        chunks.append(Text("sending the first requests", style=palette.muted))
    if state.message and state.step_index is None:
        chunks.append(Text(state.message))
    if state.slo_text:  # what the SLO column judges by (whole: it wraps to the next line, never cut)
        chunks.append(Text.assemble(("SLO ", palette.muted), state.slo_text))
    return chunks


def render_status(state: LoadState, server: ServerMetrics | None, now: float, palette: Palette,
                  width: int = 200, files: Sequence[str] = (), recording: str | None = None) -> Text:
    """Where the test is; the running step's live figures (or the verdict once it ended); the server right
    now. Wrapped at `width` between figures, never inside one: a verdict is never cut."""
    width = max(20, width)
    blocks = [pack_chunks([_progress_chunks(state, now, palette, files, recording)], width, sep=" · ")]
    live = state.live
    if live is not None and live.requests and not state.finished:
        blocks.append(pack_chunks([[
            Text.assemble((f"live, last {state.live_recent}: ", palette.muted),
                          f"TTFT p50 {fmt_ms(live.ttft_ms.p50 if live.ttft_ms else None)}"
                          f" p95 {fmt_ms(live.ttft_ms.p95 if live.ttft_ms else None)}"),
            Text(f"TPOT {fmt_ms(live.tpot_ms.p50 if live.tpot_ms else None)}"),
            Text(f"E2E p95 {fmt_ms(live.e2el_ms.p95 if live.e2el_ms else None)}"),
            Text(f"{fmt_rate(live.output_throughput)} tok/s"),
            Text(f"{live.failed} error{'s' if live.failed != 1 else ''}", style=palette.critical if live.failed else ""),
        ]], width, sep=" · "))
    elif state.capacity is not None:  # the verdict, word-wrapped: never cut
        blocks.append(pack_chunks([[Text(w, style="bold") for w in state.capacity.sentence.split()]], width, sep=" "))
    else:
        blocks.append(Text("no counted request has finished yet", style=palette.muted))
    label = ("server now: ", palette.muted)
    if server is None or not server.ok:
        server_line = [Text.assemble(label, ("--" if server is None else server.status, palette.muted))]
    else:
        server_line = [Text.assemble(label, f"{fmt_count(server.requests_running)} running"),
                       Text(f"{fmt_count(server.requests_waiting)} waiting"),
                       Text(f"KV {fmt_pct(server.kv_cache_usage, fraction=True)}"),
                       Text(f"{fmt_count(server.preemptions_total)} preempted")]
        if server.server_ttft_ms is not None:
            server_line.append(Text(f"its TTFT p50 {fmt_ms_unit(server.server_ttft_ms.p50)}"))
    blocks.append(pack_chunks([server_line], width, sep=" · "))
    text = Text("\n").join(blocks)
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text


class LoadStepPanel(Vertical):
    """Status lines and the step table; each redrawn only when what it shows changed."""

    DEFAULT_CSS = """
    LoadStepPanel { height: auto; }
    LoadStepPanel #load-status { height: auto; max-height: 8; }
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
             *, force: bool = False, files: Sequence[str] = (), recording: str | None = None) -> None:
        """`files`: where the report goes when the test ends (--json, --csv), named in its "done" line with
        the `recording`."""
        width = self.content_size.width or 80
        status_key = (state.seq, server, int(now), id(palette), width, tuple(files), recording)
        if status_key != self._status_key or force:
            self._status_key = status_key
            status = self.query_one("#load-status", Static)
            text = render_status(state, server, now, palette, width, files, recording)
            # the line count changes as the figures wrap: lay out again only then
            status.update(text, layout=text.plain.count("\n") != str(status.content).count("\n"))
        table_key = (state.steps, state.live if not state.finished else None, state.knee_index, state.capacity,
                     width, id(palette))
        if table_key != self._table_key or force:
            self._table_key = table_key
            self.query_one("#load-steps", Static).update(render_steps(state, width, palette))
