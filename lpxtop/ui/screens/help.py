"""The help screen: every key, in one table that the tests check against the bindings."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

REPLAY = "replay:"  # rows whose description starts so are shown only in `lpxtop replay`

# (keys as shown, what they do, demo only). The single list of keys: help shows it, tests compare it
# with the bindings, so a new key cannot be left out of the help.
KEY_HELP: tuple[tuple[str, str, bool], ...] = (
    ("q", "quit", False),
    ("?", "this help (Esc or ? closes it)", False),
    ("↑ ↓ PgUp PgDn", "move in a table (the mouse works too)", False),
    ("Enter", "endpoint detail: charts, recent errors, probe settings (or click a row twice)", False),
    ("Esc", "back / close / clear the filter", False),
    ("p", "pause or resume probing", False),
    ("r", "reset statistics (empty every window)", False),
    ("+ / -", "probe less / more often (interval ×1.5 / ÷1.5, 0.25–60 s)", False),
    ("s", "cycle the sort column (name, status, TTFT p99, error %, queue, tok/s)", False),
    ("/", "filter endpoints by name, model, URL or server (Enter keeps it, Esc clears it)", False),
    ("1 2 3 4", "show or hide a panel: endpoints, GPU, host, ports", False),
    ("t", "cycle the colour theme", False),
    ("Tab", "move between the endpoints table and the ports table", False),
    ("T", "send SIGTERM to the process selected in the ports panel (asks first)", False),
    ("K", "send SIGKILL to the process selected in the ports panel (asks first)", False),
    ("g", "demo: toggle a load surge on the simulated servers", True),
    ("b", "bookmark this moment with a note (while recording: --record)", False),
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

LEGEND = (
    "● up  ◐ degraded  ✖ down  … pending   ◇ discovered endpoint\n"
    "Times are in ms unless marked s. TTFT50/99: time to first token p50/p99; ITL50: inter-token latency;\n"
    "TPOT50: time per output token; E2E99: whole request p99; tok/s: decode rate p50; Q w/r: server\n"
    "queue waiting/running; KV: KV-cache used; Gap: time outside the engine (network, proxy, HTTP server):\n"
    "the probes' TTFT minus the server's own for the same requests, `~` an estimate; `--` where nothing\n"
    "compares (the detail screen's Server tab says why). `--`: the value is not known."
)


def key_rows(demo: bool, replay: bool = False) -> list[tuple[str, str]]:
    """The keys help shows: demo-only keys only in the demo, replay keys only in a replay."""
    return [(k, d) for k, d, demo_only in KEY_HELP
            if (demo or not demo_only) and (replay or not d.startswith(REPLAY))]


class HelpScreen(ModalScreen[None]):
    """Lists every key and what the columns mean."""

    BINDINGS = [
        Binding("escape,question_mark,q", "dismiss", "close", show=False),
    ]

    def __init__(self, demo: bool = False, replay: bool = False) -> None:
        super().__init__()
        self.demo = demo
        self.replay = replay

    def compose(self) -> ComposeResult:
        rows = key_rows(self.demo, self.replay)
        width = max(len(k) for k, _ in rows) + 2
        table = Text()
        for i, (keys, description) in enumerate(rows):
            table.append(("\n" if i else "") + f"{keys:<{width}}", style="bold")
            table.append(description)
        with VerticalScroll(id="help-body") as body:
            body.border_title = "lpxtop keys"
            body.border_subtitle = "Esc closes"
            yield Static(table, id="help-keys")
            yield Static(Text(LEGEND), id="help-legend")
