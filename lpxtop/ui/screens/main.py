"""The main screen: header, alerts, endpoints table, and the GPU, host and ports panels."""

from __future__ import annotations

import signal as signal_module

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Input, Static

from lpxtop.model.ports import endpoints_by_process
from lpxtop.model.snapshot import EndpointView, Snapshot
from lpxtop.ui.screens.base import SnapshotScreen
from lpxtop.ui.screens.confirm import ConfirmSignalScreen
from lpxtop.ui.screens.help import HelpPage, main_help
from lpxtop.ui.widgets.alerts_bar import AlertsBar
from lpxtop.ui.widgets.endpoint_strip import EndpointStrip
from lpxtop.ui.widgets.endpoints_table import SORT_KEYS, EndpointsTable, filter_views, sort_label, sort_views
from lpxtop.ui.widgets.gpu_panel import GpuLine, GpuPanel, energy_by_device, no_gpu
from lpxtop.ui.widgets.header_bar import HeaderBar, render_header
from lpxtop.ui.widgets.host_panel import HostPanel
from lpxtop.ui.widgets.key_bar import KeyBar
from lpxtop.ui.widgets.ports_panel import PortsPanel
from lpxtop.ui.widgets.row_table import RowTable
from lpxtop.ui.widgets.timebar import TimeBar

EMPTY_MESSAGE = (
    "No endpoints to watch yet.\n"
    "Add one:      lpxtop http://127.0.0.1:8000/v1\n"
    "or a file:    lpxtop --config lpxtop.toml\n"
    "Just looking? lpxtop demo  (simulated servers, no GPU needed)"
)
PANELS = {"1": "endpoints-panel", "2": "gpu-panel", "3": "host-panel", "4": "ports-panel"}
WIDE = 150  # columns from which the lower panels get more room
TALL = 36  # rows from which the alerts bar may show more lines


class MainScreen(SnapshotScreen):
    """Renders each new snapshot; hidden panels are skipped, unchanged widgets left alone."""

    BINDINGS = [
        Binding("enter", "open_detail", "detail"),
        Binding("s", "cycle_sort", "sort"),
        Binding("I", "invert_sort", "invert sort", show=False),
        Binding("slash", "filter", "filter", key_display="/"),
        Binding("escape", "clear_filter", "clear filter", show=False),
        Binding("1", "toggle_panel('1')", "endpoints", show=False),
        Binding("2", "toggle_panel('2')", "GPU", show=False),
        Binding("3", "toggle_panel('3')", "host", show=False),
        Binding("4", "toggle_panel('4')", "ports", show=False),
        Binding("T", "signal('TERM')", "SIGTERM", show=False),
        Binding("K", "signal('KILL')", "SIGKILL", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.sort_index = 0
        self.sort_reversed = False  # `I` (as htop): the sort's order inverted
        self.filter_text = ""
        self._size_class: tuple[bool, bool] | None = None
        self._message = EMPTY_MESSAGE  # what #empty-message shows
        self._hidden: set[str] = set()  # panels hidden with 1-4
        self._no_gpu = False  # no GPU to show: one line says why, the panel's room goes to the others

    @property
    def sort_key(self) -> str:
        return SORT_KEYS[self.sort_index][0]

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        yield AlertsBar(id="alerts")
        with Vertical(id="endpoints-panel", classes="panel"):
            yield EndpointsTable(id="endpoints")
            yield Static(EMPTY_MESSAGE, id="empty-message", markup=False)
            yield EndpointStrip(id="strip")
        yield GpuLine(id="gpu-line")
        with Horizontal(id="lower"):
            yield GpuPanel(id="gpu-panel", classes="panel")
            with Vertical(id="side"):
                yield HostPanel(id="host-panel", classes="panel")
                yield PortsPanel(id="ports-panel", classes="panel")
        if self.app.timeline is not None:  # type: ignore[attr-defined]
            yield TimeBar(id="timebar")
        yield Input(placeholder="filter endpoints (Enter keeps, Esc clears)", id="filter")
        yield KeyBar()

    def on_mount(self) -> None:
        default_sort = self.app.capabilities.default_sort  # type: ignore[attr-defined]  # the fleet: worst first
        keys = [k for k, _ in SORT_KEYS]
        if default_sort in keys:
            self.sort_index = keys.index(default_sort)
        self.query_one("#endpoints-panel").border_title = "Endpoints"
        self.query_one("#gpu-panel").border_title = "GPU"
        self.query_one("#host-panel").border_title = "Host"
        self.query_one("#ports-panel").border_title = "Ports & processes"
        self.query_one("#filter", Input).cursor_blink = not self.app.ssh  # type: ignore[attr-defined]
        self.query_one("#endpoints", EndpointsTable).focus()
        # No restyle per class here (each walks the screen's nodes, ~10 ms at start): Textual restyles the whole
        # screen when it resumes, which follows its mount (a ScreenResume with refresh_styles).
        self._apply_size_classes(update=False)
        self._apply_panels(update=False)
        self.begin_drawing()

    def on_resize(self) -> None:
        self._apply_size_classes()
        self.call_after_refresh(self.rerender)  # children have their new sizes after this refresh

    def _apply_size_classes(self, update: bool = True) -> None:
        wide, tall = self.size.width >= WIDE, self.size.height >= TALL
        if (wide, tall) == self._size_class:
            return
        self._size_class = (wide, tall)
        self.update_classes({"-wide": wide, "-tall": tall}, update=update)
        self.query_one(AlertsBar).max_lines = 5 if tall else 3

    # Rendering

    def visible_views(self) -> list[EndpointView]:
        """Endpoints after the filter and the sort, in display order."""
        if self._snap is None:
            return []
        return sort_views(filter_views(self._snap.endpoints, self.filter_text), self.sort_key,
                          reverse=self.sort_reversed)

    def draw(self, force: bool) -> None:
        snap = self._snap
        assert snap is not None
        app = self.app
        palette = app.palette  # type: ignore[attr-defined]
        thresholds = app.thresholds  # type: ignore[attr-defined]
        replay = app.timeline is not None  # type: ignore[attr-defined]
        recorder = app.recorder  # type: ignore[attr-defined]
        self.query_one(HeaderBar).show(
            render_header(
                snap,
                # a replay shows the recording's own state; the live app keeps what its keys set
                paused=snap.paused if replay else app.paused,  # type: ignore[attr-defined]
                interval_s=snap.interval_s if replay else app.interval_s,  # type: ignore[attr-defined]
                demo=app.is_demo,  # type: ignore[attr-defined]
                readonly=app.readonly and not replay,  # type: ignore[attr-defined]
                palette=palette,
                replay=replay,
                recording=None if recorder is None else ("on" if recorder.recording else "stopped"),
                interval_label=app.capabilities.interval_label,  # type: ignore[attr-defined]
            )
        )
        if replay:
            self.refresh_timebar(force=force)
        self.query_one(AlertsBar).show(snap.alerts, palette, force=force)
        if no_gpu(snap.gpu) != self._no_gpu:
            self._no_gpu = not self._no_gpu
            self._apply_panels()
        panel = self.query_one("#endpoints-panel")
        if panel.display:
            self._render_endpoints(snap, palette, thresholds, force)
        served = endpoints_by_process(snap.ports)
        gpu = self.query_one(GpuPanel)
        if gpu.display:
            gpu.show(snap.gpu, thresholds, palette, force=force, served=served,
                     energy=energy_by_device(snap.endpoints))
        line = self.query_one(GpuLine)
        if line.display:
            line.show(snap.gpu, palette, force=force)
        host = self.query_one(HostPanel)
        if host.display:
            host.show(snap.host, thresholds, palette, force=force, served=served)
        ports = self.query_one(PortsPanel)
        if ports.display:
            ports.show(snap.ports, snap.leftovers, palette, force=force)

    def timeline_moved(self) -> None:
        self.refresh_timebar()

    def refresh_timebar(self, force: bool = False) -> None:
        """A replay's time bar (position, play state, speed, marks), redrawn when it changes."""
        timeline = self.app.timeline  # type: ignore[attr-defined]
        if timeline is None or not self._mounted_once:
            return
        from lpxtop.record.timeparse import format_moment

        self.query_one(TimeBar).show(timeline.state(), self.app.palette, format_moment, force=force)  # type: ignore[attr-defined]

    def _render_endpoints(self, snap: Snapshot, palette, thresholds, force: bool) -> None:
        table = self.query_one(EndpointsTable)
        views = self.visible_views()
        message = self.query_one("#empty-message", Static)
        empty = self.app.capabilities.empty_message or EMPTY_MESSAGE  # type: ignore[attr-defined]
        text = empty if not snap.endpoints else f"No endpoint matches the filter {self.filter_text!r}: Esc clears it."
        starting = bool(views) and all(v.status == "pending" for v in snap.endpoints)
        if starting:
            # Before any probe has finished (the first frame comes before the engine starts): the endpoints it
            # was given, in a line. The table is laid out when the first figures come: drawn in the first frame,
            # its ~0.1 s of CPU made that frame, and so the figures, as much later (docs/first-contact.md).
            names = [v.name for v in snap.endpoints]
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            text = f"Probing {shown}: the first figures come with the first probe."
        listed = views  # the title counts them either way
        views = [] if starting else views
        if not views and text != self._message:  # an update lays the screen out again: only on a change
            self._message = text
            message.update(text)
        message.display = not views
        table.display = bool(views)
        table.show(views, thresholds, palette, sort=(self.sort_key, self.sort_reversed))
        strip = self.query_one(EndpointStrip)
        strip.display = bool(views)
        selected = table.selected_name
        view = next((v for v in views if v.key == selected), views[0] if views else None)
        strip.show(view, snap.wall_time, palette, force=force)
        panel = self.query_one("#endpoints-panel")
        title = f"Endpoints {len(listed)}/{len(snap.endpoints)} · sort: {sort_label(self.sort_key, self.sort_reversed)}"
        if self.filter_text:
            title += f" · filter: {self.filter_text}"
        if panel.border_title != title:  # setting it, even to the same text, repaints the whole panel
            panel.border_title = title

    def on_row_table_row_highlighted(self, event: RowTable.RowHighlighted) -> None:
        if event.table.id == "endpoints" and self._snap is not None:
            table = self.query_one(EndpointsTable)
            selected = table.selected_name
            view = next((v for v in self._snap.endpoints if v.key == selected), None)
            self.query_one(EndpointStrip).show(view, self._snap.wall_time, self.app.palette)  # type: ignore[attr-defined]

    def on_row_table_row_selected(self, event: RowTable.RowSelected) -> None:
        if event.table.id == "endpoints":
            event.stop()
            self.action_open_detail()

    # Actions

    def action_open_detail(self) -> None:
        from lpxtop.ui.screens.detail import DetailScreen

        name = self.query_one(EndpointsTable).selected_name
        if name is None:
            self.notify("No endpoint selected.", severity="warning")
            return
        self.app.push_screen(DetailScreen(name))

    def action_cycle_sort(self) -> None:
        self.sort_index = (self.sort_index + 1) % len(SORT_KEYS)
        self.sort_reversed = False
        self.rerender()

    def action_invert_sort(self) -> None:
        self.sort_reversed = not self.sort_reversed
        self.rerender()

    def help_page(self) -> HelpPage:
        app = self.app
        return main_help(demo=app.is_demo, replay=app.timeline is not None)  # type: ignore[attr-defined]

    def action_filter(self) -> None:
        field = self.query_one("#filter", Input)
        field.display = True
        field.focus()

    def action_clear_filter(self) -> None:
        field = self.query_one("#filter", Input)
        if not field.display and not self.filter_text:
            return
        field.value = ""
        field.display = False
        self.filter_text = ""
        self.query_one(EndpointsTable).focus()
        self.rerender()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.filter_text = event.value
            self.rerender()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            event.input.display = bool(event.value)
            self.query_one(EndpointsTable).focus()

    def action_toggle_panel(self, number: str) -> None:
        self._hidden ^= {PANELS[number]}
        self._apply_panels()
        self.call_after_refresh(self.rerender)

    def _apply_panels(self, update: bool = True) -> None:
        """Show what is not hidden; a hidden panel's room goes to the others. Without a GPU, one line
        across the screen says why, in the GPU panel's place (2 hides it too)."""
        shown = {p: p not in self._hidden for p in PANELS.values()}
        self.query_one("#endpoints-panel").display = shown["endpoints-panel"]
        self.query_one("#gpu-panel").display = shown["gpu-panel"] and not self._no_gpu
        self.query_one("#gpu-line").display = shown["gpu-panel"] and self._no_gpu
        self.query_one("#host-panel").display = shown["host-panel"]
        self.query_one("#ports-panel").display = shown["ports-panel"]
        self.query_one("#side").display = shown["host-panel"] or shown["ports-panel"]
        gpu_panel = shown["gpu-panel"] and not self._no_gpu
        lower = self.query_one("#lower")
        lower.display = gpu_panel or shown["host-panel"] or shown["ports-panel"]
        self.update_classes({
            "-lower-hidden": not lower.display,
            "-endpoints-hidden": not shown["endpoints-panel"],
            # Only the host panel (a few fixed lines) below: it keeps its own height, the table takes the rest.
            "-lower-small": bool(lower.display and not gpu_panel and not shown["ports-panel"]),
        }, update=update)

    def action_signal(self, name: str) -> None:
        """T / K: confirm, then signal the process selected in the ports panel."""
        sig = signal_module.SIGTERM if name == "TERM" else signal_module.SIGKILL
        if self.app.timeline is not None:  # type: ignore[attr-defined]
            self.notify("A replay cannot signal processes: they are the recording's, not this machine's now.",
                        title=f"SIG{name}", severity="warning")
            return
        reason = self.app.capabilities.refusals.get("signal")  # type: ignore[attr-defined]
        if reason:  # a source whose processes are not on this machine (the fleet view)
            self.notify(reason, title=f"SIG{name}", severity="warning")
            return
        ports = self.query_one(PortsPanel)
        row = ports.selected if ports.display else None
        if row is None or row.pid is None:
            self.notify(
                "Select a process with a PID in the ports panel first (4 shows the panel, Tab moves to it).",
                title=f"SIG{name}",
                severity="warning",
            )
            return
        app = self.app
        if app.readonly:  # type: ignore[attr-defined]
            self.notify(f"Refused: read-only mode (--readonly): process actions are disabled (PID {row.pid}).",
                        title=f"SIG{name}", severity="error")
            return
        try:
            from lpxtop.engine.system import actions
        except ImportError as exc:  # the actions module ships with the engine; degrade, never crash
            self.notify(f"Refused: process actions are unavailable ({exc}).", severity="error")
            return
        confirmation = actions.confirmation(row.pid, sig)
        body = confirmation.text
        if row.user and not confirmation.user:
            body += f"\n(listed as user {row.user})"

        def done(confirmed: bool | None) -> None:
            if not confirmed:
                return
            result = actions.send_signal(row.pid, sig, readonly=app.readonly,  # type: ignore[attr-defined]
                                         started_at=confirmation.started_at)
            self.notify(result.message, title=f"SIG{name}", severity="information" if result.ok else "error")

        app.push_screen(ConfirmSignalScreen(f"SIG{name} PID {row.pid}", body, confirmation.refusal), done)
