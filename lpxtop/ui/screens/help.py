"""The help screen: the keys of the screen it was opened on, from tables that the tests check against the
bindings, and what that screen's columns and marks mean.

Each screen says what its help holds (`help_page()`); `?` on the app opens it. Rows wrap at the dialog's
width and the dialog scrolls, so nothing is cut on an 80×24 terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

REPLAY = "replay:"  # rows whose description starts so are shown only in `lpxtop replay`

# Keys of the app itself, on every screen but the load test's: (keys as shown, what they do, demo only).
QUIT_ROWS: tuple[tuple[str, str, bool], ...] = (
    ("q / Ctrl+C", "quit", False),
    ("?", "this help (Esc or ? closes it; ↑ ↓ PgUp PgDn scroll it)", False),
)
APP_ROWS: tuple[tuple[str, str, bool], ...] = (
    ("p", "pause or resume probing", False),
    ("r", "reset statistics (empty every window)", False),
    ("+ / -", "+ probes less often, - more often (interval ×1.5 / ÷1.5, 0.25–60 s)", False),
    ("t", "cycle the colour theme", False),
    ("g", "demo: toggle a load surge on the simulated servers", True),
    ("b", "bookmark this moment with a note (while recording: --record)", False),
)
REPLAY_ROWS: tuple[tuple[str, str, bool], ...] = (
    ("space", f"{REPLAY} play / pause the recording (p too)", False),
    ("← →", f"{REPLAY} step 10 s back / forward", False),
    ("shift+← shift+→", f"{REPLAY} step 1 min back / forward", False),
    ("[ ]", f"{REPLAY} slower / faster (+ and - too, as in live: + slower)", False),
    ("n N", f"{REPLAY} next / previous alert, restart, load step or bookmark", False),
    ("a", f"{REPLAY} next alert", False),
    ("j", f"{REPLAY} jump to a time (14:03:20, +3m, -30s)", False),
    ("< >", f"{REPLAY} the recording's start / end", False),
    ("c", f"{REPLAY} the comparison with the second recording (--compare B)", False),
)

# The main screen's keys. The single list: help shows it, tests compare it with the bindings, so a new
# key cannot be left out of the help.
KEY_HELP: tuple[tuple[str, str, bool], ...] = (
    *QUIT_ROWS,
    ("↑ ↓ PgUp PgDn", "move in a table (the mouse works too)", False),
    ("Enter", "endpoint detail: charts, recent errors, probe settings (or click a row twice)", False),
    ("Esc", "back / close / clear the filter", False),
    ("s", "next sort column (name, status, TTFT p99, error %, queue, tok/s, worst first)", False),
    ("I", "invert the sort order (as htop); the title and the column header show the sort: ▼ ▲", False),
    ("/", "filter endpoints by name, model, URL or server (Enter keeps it, Esc clears it)", False),
    ("1 2 3 4", "show or hide a panel: endpoints, GPU, host, ports (the others take its room)", False),
    ("Tab", "move between the endpoints table and the ports table", False),
    ("T", "send SIGTERM to the process selected in the ports panel (asks first)", False),
    ("K", "send SIGKILL to the process selected in the ports panel (asks first)", False),
    *APP_ROWS,
    *REPLAY_ROWS,
)

# The detail screen's keys: ← → switch tabs there, whatever has the focus (in a replay too: shift+← →
# still step the time).
DETAIL_KEY_HELP: tuple[tuple[str, str, bool], ...] = (
    *QUIT_ROWS,
    ("Esc", "back to the endpoints", False),
    ("← →", "previous / next tab (Charts, Server, Errors, Settings; Agent for agent steps)", False),
    ("Tab", "move the focus into a tab's content", False),
    ("↑ ↓ PgUp PgDn", "scroll the tab, or move in the errors table", False),
    *APP_ROWS,
    *(row for row in REPLAY_ROWS if row[0] != "← →"),
)

LEGEND = (
    "● up  ◐ degraded  ✖ down  … pending   ◇ discovered endpoint\n"
    "Times are in ms unless marked s. TTFT50/99: time to first token p50/p99; ITL50: inter-token latency; "
    "TPOT50: time per output token; E2E99: whole request p99; tok/s: decode rate p50; Q w/r: server "
    "queue waiting/running; KV: KV-cache used; Step50/95: agent step p50/p95 (only when an endpoint runs "
    "agent steps); Gap: time outside the engine (network, proxy, HTTP server): the probes' TTFT minus the "
    "server's own for the same requests, `~` an estimate, exact per probe with --traces-listen (each probe "
    "against its own server span); `--` where nothing compares (the detail screen's "
    "Server tab says why). `--`: the value is not known.\n"
    "A narrow terminal drops columns from the right of this list first: model, TPOT, gap, trend, E2E, "
    "ITL; the queue and KV stay."
)

DETAIL_LEGEND = (
    "Charts: TTFT and E2E of each probe over the window (x: seconds ago, ending now) with their p50 and "
    "p99 lines; the distribution of inter-token gaps (ms); decode tokens/s; the server's queue and KV cache "
    "from its /metrics.\n"
    "Server: the server's own latency (exact means, estimated quantiles with their ranges) and the time "
    "outside the engine. Chain (with --traces-listen): each probe joined to the server's own span of it: "
    "to server, queue, prefill, server TTFT, outside, decode as p50/p95/p99, and a bar per recent probe. "
    "Errors: the window's failed probes, newest first. Settings: the probe's settings "
    "(never the API key)."
)


@dataclass(frozen=True)
class HelpPage:
    """What one screen's help shows."""

    title: str
    rows: tuple[tuple[str, str], ...]
    legend: str = ""


def key_rows(demo: bool, replay: bool = False,
             table: Sequence[tuple[str, str, bool]] = KEY_HELP) -> list[tuple[str, str]]:
    """The keys help shows: demo-only keys only in the demo, replay keys only in a replay."""
    return [(k, d) for k, d, demo_only in table
            if (demo or not demo_only) and (replay or not d.startswith(REPLAY))]


def main_help(demo: bool, replay: bool) -> HelpPage:
    return HelpPage("lpxtop keys", tuple(key_rows(demo, replay)), LEGEND)


def detail_help(demo: bool, replay: bool) -> HelpPage:
    return HelpPage("endpoint detail keys", tuple(key_rows(demo, replay, DETAIL_KEY_HELP)), DETAIL_LEGEND)


def render_rows(rows: Sequence[tuple[str, str]]) -> Table:
    """Keys in bold on the left, what they do on the right, wrapped under itself."""
    table = Table(box=None, show_header=False, padding=(0, 2, 0, 0), expand=True)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(ratio=1)
    for keys, description in rows:
        table.add_row(keys, description)
    return table


class HelpScreen(ModalScreen[None]):
    """Lists a screen's keys and what its columns mean; scrolls when it is taller than the terminal."""

    BINDINGS = [
        Binding("escape,question_mark,q", "dismiss", "close", show=False),
    ]

    def __init__(self, page: HelpPage) -> None:
        super().__init__()
        self.page = page

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body") as body:
            body.border_title = self.page.title
            body.border_subtitle = "↑ ↓ scroll · Esc closes"
            yield Static(render_rows(self.page.rows), id="help-keys")
            if self.page.legend:
                yield Static(Text(self.page.legend), id="help-legend")

    def on_mount(self) -> None:
        self.query_one("#help-body").focus()  # ↑ ↓ PgUp PgDn scroll it at once
