"""The load-test screen (`lpxtop load`): the step panel and the sweep charts above the server's GPU and host.

Rendered from the snapshot like the main screen: `show_snapshot` draws only what changed. The snapshot's
`load` part is the controller's state; the rest (the server's /metrics, GPU, host, alerts) is the live
engine's, whose own probes are off during a test. `q` and Ctrl-C stop the test at once; the CLI then
writes the report of the finished steps (the step under way marked partial).
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical

from lpxtop.humanize import fmt_duration
from lpxtop.model.load import LoadState
from lpxtop.model.snapshot import Snapshot
from lpxtop.ui.palette import Palette
from lpxtop.ui.screens.base import SnapshotScreen
from lpxtop.ui.screens.help import HelpPage
from lpxtop.ui.widgets.alerts_bar import AlertsBar
from lpxtop.ui.widgets.gpu_panel import GpuLine, GpuPanel, energy_by_device, no_gpu
from lpxtop.ui.widgets.header_bar import HeaderBar
from lpxtop.ui.widgets.host_panel import HostPanel
from lpxtop.ui.widgets.key_bar import KeyBar
from lpxtop.ui.widgets.load_chart import SweepCharts
from lpxtop.ui.widgets.load_steps import LoadStepPanel, load_title, marks_legend

# The load screen's keys, for its help (a test compares them with the bindings).
LOAD_KEY_HELP: tuple[tuple[str, str], ...] = (
    ("q / Ctrl+C", "stop the test at once and quit: the finished steps' report is written, the step under "
     "way is marked partial; once the test is done, quit and write the report"),
    ("?", "this help (Esc or ? closes it; ↑ ↓ PgUp PgDn scroll it)"),
    ("1", "show or hide the steps table: the sweep charts take its room (on a 24-row terminal the table "
     "fills the screen, and 1 shows the charts)"),
    ("2 3", "show or hide a panel: GPU, host (the charts take their room)"),
    ("t", "cycle the colour theme"),
)
LOAD_LEGEND = (
    "Per step, over its counted requests (sent in the measured window): ok / fail; req/s and tok/s over the\n"
    "measured duration (first send to last completion); TTFT, E2E, TPOT, ITL in ms unless marked s;\n"
    "queue↑ KV↑: the server's peak waiting requests and KV-cache use during the window; goodput: requests/s\n"
    "that met every per-request bound of the SLO. ✓ the capacity (highest step that met the SLO), ◆ the knee\n"
    "(most throughput per unit of latency, over the steps whose figures are trusted). Italic: the step under\n"
    "way, over its requests so far. SLO: met, missed (and which objectives), or client-limited: not judged,\n"
    "lpxtop itself was short of CPU in that step and its figures are not trusted.\n"
    "Progress: step k of n, the time since the first step began, and an estimate of the time left (ETA:\n"
    "the steps to come at the mean length of those done). The sweep charts put one point per finished step."
)
TALL = 36
INTERRUPTED = 130
SHORT = 30  # below this many rows the GPU and host panels give their room to the charts (2 / 3 bring them back)


def render_load_header(snap: Snapshot, load: LoadState, palette: Palette) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f" lpxtop {snap.version} ", style="bold")
    text.append("LOAD TEST ", style=palette.warning)
    text.append("│ ", style=palette.muted)
    text.append(snap.host_name)
    text.append(" │ ", style=palette.muted)
    text.append(load.target)
    if load.model:
        text.append(f" · {load.model}", style=palette.muted)
    text.append(" │ up ", style=palette.muted)
    text.append(fmt_duration(snap.wall_time - snap.started_at))
    return text


class LoadScreen(SnapshotScreen):
    """What a load test shows while it runs, and after it ends (until `q`)."""

    DEFAULT_CSS = """
    LoadScreen #load-panel { height: auto; max-height: 60%; }
    LoadScreen #sweep-panel { height: 1fr; min-height: 8; }
    LoadScreen.-short #load-panel { max-height: 100%; }
    LoadScreen.-short #sweep-panel { min-height: 0; }
    LoadScreen #load-lower { height: 9; }
    LoadScreen.-tall #load-lower { height: 12; }
    LoadScreen #load-lower #gpu-panel { width: 1fr; height: 1fr; }
    LoadScreen #load-lower #host-panel { width: 1fr; height: 1fr; }
    """

    BINDINGS = [
        Binding("q", "stop_test", "stop & quit"),  # Ctrl+C too: the app's priority binding calls `interrupt`
        Binding("1", "toggle_panel('load-panel')", "steps", show=False),
        Binding("2", "toggle_panel('gpu-panel')", "GPU", show=False),
        Binding("3", "toggle_panel('host-panel')", "host", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._hidden: set[str] = set()  # panels hidden with 2 / 3
        self._no_gpu = False  # no GPU to show: one line says why, the host panel takes the row

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        yield AlertsBar(id="alerts")
        with Vertical(id="load-panel", classes="panel"):
            yield LoadStepPanel(id="load-steps-panel")
        with Vertical(id="sweep-panel", classes="panel"):
            yield SweepCharts(id="sweep")
        yield GpuLine(id="gpu-line")
        with Horizontal(id="load-lower"):
            yield GpuPanel(id="gpu-panel", classes="panel")
            yield HostPanel(id="host-panel", classes="panel")
        yield KeyBar()

    def on_mount(self) -> None:
        # plotext's import takes ~0.2 s of CPU (0.8 s on a busy 2-core box): here, before the first frame and
        # so before the test starts (the CLI starts it once the screen is up), not when the first step ends
        # and the sweep is drawn, where it stalled the screen for a whole short step and took CPU from the
        # load generator in the middle of a measured window.
        import plotext  # noqa: F401

        self.query_one("#load-panel").border_title = "Load test"
        self.query_one("#sweep-panel").border_title = "Sweep: one point per finished step"
        self.query_one("#gpu-panel").border_title = "GPU"
        self.query_one("#host-panel").border_title = "Host"
        self._apply_size_classes()
        self._apply_panels()
        self.begin_drawing()

    def on_resize(self) -> None:
        self._apply_size_classes()
        self.call_after_refresh(self.rerender)

    def _apply_size_classes(self) -> None:
        self.set_class(self.size.height >= TALL, "-tall")
        short = self.size.height < SHORT
        self.query_one(AlertsBar).max_lines = 2 if short else 3
        if short != self.has_class("-short"):
            self.set_class(short, "-short")
            if self._mounted_once:
                self._apply_panels()

    def _apply_panels(self) -> None:
        """Show what is not hidden (a short terminal sets the GPU and host aside for the charts, until 2 or
        3 brings one back); without a GPU, one line says why and the host panel takes the row."""
        room = not self.has_class("-short")
        self.query_one("#load-panel").display = "load-panel" not in self._hidden
        gpu_wanted = room and "gpu-panel" not in self._hidden
        self.query_one("#gpu-panel").display = gpu_wanted and not self._no_gpu
        self.query_one("#gpu-line").display = gpu_wanted and self._no_gpu
        self.query_one("#host-panel").display = room and "host-panel" not in self._hidden
        self.query_one("#load-lower").display = (self.query_one("#gpu-panel").display
                                                 or self.query_one("#host-panel").display)

    def draw(self, force: bool) -> None:
        snap = self._snap
        assert snap is not None
        load = snap.load
        app = self.app
        palette = app.palette  # type: ignore[attr-defined]
        thresholds = app.thresholds  # type: ignore[attr-defined]
        if load is not None:
            self.query_one(HeaderBar).show(render_load_header(snap, load, palette))
            server = snap.endpoints[0].server if snap.endpoints else None
            capabilities = self.app.capabilities  # type: ignore[attr-defined]
            files = capabilities.load.report_files if capabilities.load is not None else ()
            recorder = capabilities.recorder
            recording = str(recorder.path) if recorder is not None and recorder.path is not None else None
            self.query_one(LoadStepPanel).show(load, server, snap.wall_time, palette, force=force, files=files,
                                               recording=recording)
            self.query_one(SweepCharts).show(load, force=force)
            panel = self.query_one("#load-panel")
            # the border's corners and gaps take 6 cells; before the first layout, no limit
            title = load_title(load, snap.wall_time, width=panel.size.width - 6 if panel.size.width else 200)
            if panel.border_title != title:
                panel.border_title = title
            legend = marks_legend(load)  # what the table's marks mean, once it shows any
            if panel.border_subtitle != legend:
                panel.border_subtitle = legend
        self.query_one(AlertsBar).show(snap.alerts, palette, force=force)
        if no_gpu(snap.gpu) != self._no_gpu:
            self._no_gpu = not self._no_gpu
            self._apply_panels()
        gpu = self.query_one(GpuPanel)
        if gpu.display:
            gpu.show(snap.gpu, thresholds, palette, force=force, energy=energy_by_device(snap.endpoints))
        line = self.query_one(GpuLine)
        if line.display:
            line.show(snap.gpu, palette, force=force)
        host = self.query_one(HostPanel)
        if host.display:
            host.show(snap.host, thresholds, palette, force=force)

    def help_page(self) -> HelpPage:
        return HelpPage("lpxtop load keys", LOAD_KEY_HELP, LOAD_LEGEND)

    def interrupt(self) -> bool:
        self.action_stop_test(True)
        return True

    def action_stop_test(self, interrupted: bool = False) -> None:
        load = self.app.capabilities.load  # type: ignore[attr-defined]
        if load is not None:
            load.stop()
        self.app.exit(return_code=INTERRUPTED if interrupted else 0)  # Ctrl-C: the shell's 130, as headless

    def action_toggle_panel(self, panel_id: str) -> None:
        if panel_id == "load-panel":  # the steps table: its room goes to the charts, whatever the height
            self._hidden ^= {panel_id}
        elif self.has_class("-short"):  # the panels were set aside for room: bring this one back alone
            self.remove_class("-short")
            self._hidden = ({"gpu-panel", "host-panel"} - {panel_id}) | (self._hidden & {"load-panel"})
        else:
            self._hidden ^= {panel_id}
        self._apply_panels()
        self.call_after_refresh(self.rerender)
