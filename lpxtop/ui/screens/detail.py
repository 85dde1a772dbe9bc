"""The endpoint detail screen: charts over the window, the last errors, and the probe's settings."""

from __future__ import annotations

import json
import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, VerticalScroll
from textual.css.query import NoMatches
from textual.widgets import DataTable, Static, TabbedContent, TabPane, Tabs

from lpxtop.humanize import fmt_ago, fmt_ms_unit, fmt_pct, fmt_rate
from lpxtop.model.snapshot import EndpointView, Snapshot
from lpxtop.ui.formatting import pack_chunks, truncate
from lpxtop.ui.palette import Palette
from lpxtop.ui.screens.base import SnapshotScreen
from lpxtop.ui.screens.help import HelpPage, detail_help
from lpxtop.ui.widgets.agent_panel import AgentPanel
from lpxtop.ui.widgets.chain_panel import ChainPanel
from lpxtop.ui.widgets.charts import PlotextChart, endpoint_charts
from lpxtop.ui.widgets.endpoints_table import STATUS_SYMBOLS, error_pct, gap_text, server_ttft_mean_ms
from lpxtop.ui.widgets.key_bar import KeyBar
from lpxtop.ui.widgets.server_latency import server_latency_text

CHART_REDRAW_S = 2.0
CHART_IDS = ("chart-ttft", "chart-e2e", "chart-itl", "chart-tokens", "chart-queue", "chart-kv")
WIDE = 150


def render_summary(view: EndpointView | None, name: str, now: float, palette: Palette, width: int = 200) -> Text:
    """Who the endpoint is, then its headline figures, laid out in lines `width` cells wide without ever
    cutting a figure in two: what does not fit goes to the next line."""
    if view is None:
        return Text(f"{name}: this endpoint is no longer in the snapshot (removed or renamed). Esc goes back.",
                    style=palette.warning)
    head = [Text(f"{STATUS_SYMBOLS.get(view.status, '?')} {view.key} {view.status}", style=palette.status(view.status)),
            Text(view.config.display_url),
            Text(view.model or "model unknown", style="bold" if view.model else palette.muted),
            Text(view.server_kind, style=palette.muted)]
    if view.config.discovered:
        head.append(Text("(discovered)", style=palette.muted))
    p = view.ttft_ms
    tps = view.output_tokens_per_s
    figures = [Text(f"TTFT p50 {fmt_ms_unit(p.p50 if p else None)} p99 {fmt_ms_unit(p.p99 if p else None)}"),
               Text(f"tok/s {fmt_rate(tps.p50 if tps else None)}{'~' if view.output_tokens_approx else ''}"),
               Text(f"error {fmt_pct(error_pct(view))}")]
    if view.errors:
        figures.append(Text("(" + ", ".join(f"{k} {n}" for k, n in sorted(view.errors.items())) + ")",
                            style=palette.critical))
    if view.ttft_gap.value_ms is not None:
        gap = gap_text(view)
        how = f" (exact: {view.ttft_gap.probes} probes' own server spans)" if view.ttft_gap.method == "joined_spans" else ""
        figures.append(Text(f"outside engine {gap}{'' if gap.endswith('s') else ' ms'}{how}", style=palette.accent))
    server_mean = server_ttft_mean_ms(view)
    if server_mean is not None:
        figures.append(Text(f"server TTFT mean {fmt_ms_unit(server_mean)}", style=palette.muted))
    probes = Text(f"probes {view.probes_sent} sent, {view.probes_ok} ok, {view.probes_failed} failed",
                  style=palette.muted)
    if view.probes_client_limited:  # lpxtop itself was late during these: left out of the percentiles
        probes.append(f", {view.probes_client_limited} client-limited", style=palette.warning)
    figures.append(probes)
    return pack_chunks((head, figures), max(20, width))


def settings_text(view: EndpointView) -> str:
    """The probe's settings as EndpointConfig.to_json() gives them (never the API key), plus server status,
    lpxtop's own pool wait and where the server redirects the probes."""
    lines = [f"{key:<22} {json.dumps(value)}" for key, value in view.config.to_json().items()]
    if view.server is not None:
        lines.append("")
        lines.append(f"{'server metrics':<22} {view.server.status}")
    wait = view.pool_wait_ms
    if wait is not None:
        lines.append("")
        label = "lpxtop's own pool wait"
        lines.append(f"{label:<22} p99 {wait.p99:.1f} ms, max {wait.max:.1f} ms over "
                     f"{wait.count} probes (a wait for lpxtop's own connections; not in TTFT)")
    if view.redirected_to:
        lines.append(f"{'redirected to':<22} {view.redirected_to} (each probe is redirected: point lpxtop there "
                     "to save the hop)")
    return "\n".join(lines)


class DetailScreen(SnapshotScreen):
    """One endpoint, by name; follows new snapshots while it is on top."""

    BINDINGS = [
        Binding("escape", "back", "back"),
        # Tabs switch with ← → whatever has the focus (a chart's scroll area, the errors table): priority
        # bindings, checked before the focused widget's own.
        Binding("left", "tab(-1)", "tab", key_display="←", priority=True, show=False),
        Binding("right", "tab(1)", "tab", key_display="← →", priority=True),
    ]

    def __init__(self, endpoint_name: str) -> None:
        super().__init__()
        self.endpoint_name = endpoint_name
        self._errors_key: tuple | None = None
        self._settings_key: object = None
        self._server_key: object = None
        self._charts_drawn_at = float("-inf")
        self._chain_tab = False

    def compose(self) -> ComposeResult:
        yield Static("", id="detail-summary")
        with TabbedContent(id="detail-tabs"):
            with TabPane("Charts", id="tab-charts"), VerticalScroll(id="charts-scroll"), Grid(id="charts"):
                for chart_id in CHART_IDS:
                    yield PlotextChart(id=chart_id)
            with TabPane("Server", id="tab-server"), VerticalScroll():
                yield Static("", id="server-latency")
            with TabPane("Errors", id="tab-errors"):
                yield DataTable(id="errors-table", cursor_type="row")
            with TabPane("Settings", id="tab-settings"):
                yield Static("", id="settings", markup=False)
        yield KeyBar()

    async def on_mount(self) -> None:
        table = self.query_one("#errors-table", DataTable)
        table.add_column("When", key="when", width=10)
        table.add_column("Class", key="class", width=20)
        table.add_column("HTTP", key="http", width=4)
        table.add_column("Message", key="message")
        self.set_class(self.size.width >= WIDE, "-wide")
        snap = self.app.snapshot  # type: ignore[attr-defined]
        await self._add_agent_tab(snap)
        view = next((v for v in snap.endpoints if v.key == self.endpoint_name), None) if snap else None
        if view is not None and view.chain is not None:
            await self._add_chain_tab()
        self.begin_drawing()

    def _add_chain_tab(self):
        """A Chain tab (the probes joined to their server spans) for an endpoint with a chain, after Server."""
        self._chain_tab = True
        tabs = self.query_one("#detail-tabs", TabbedContent)
        pane = TabPane("Chain", VerticalScroll(ChainPanel(id="chain-panel", markup=False)), id="tab-chain")
        return tabs.add_pane(pane, after="tab-server")

    async def _add_agent_tab(self, snap: Snapshot | None) -> None:
        """An Agent tab for an endpoint with the agent-step probe, first when it has no chat probe."""
        view = next((v for v in snap.endpoints if v.key == self.endpoint_name), None) if snap else None
        if view is None or view.agent is None:
            return
        tabs = self.query_one("#detail-tabs", TabbedContent)
        agent_only = "chat" not in view.config.probes
        pane = TabPane("Agent", VerticalScroll(AgentPanel(id="agent-panel", markup=False)), id="tab-agent")
        await tabs.add_pane(pane, before="tab-charts" if agent_only else "tab-server")
        if agent_only:
            tabs.active = "tab-agent"

    def on_resize(self) -> None:
        self.set_class(self.size.width >= WIDE, "-wide")

    def draw(self, force: bool) -> None:
        snap = self._snap
        assert snap is not None
        try:
            summary = self.query_one("#detail-summary", Static)
        except NoMatches:
            return  # the app is closing and has taken the screen's widgets down: nothing to draw on
        palette = self.app.palette  # type: ignore[attr-defined]
        view = next((v for v in snap.endpoints if v.key == self.endpoint_name), None)
        summary.update(render_summary(view, self.endpoint_name, snap.wall_time, palette,
                                      summary.content_size.width or self.size.width - 2))
        if view is None:
            return
        now = time.monotonic()
        if force or now - self._charts_drawn_at >= CHART_REDRAW_S:
            # Six plotext charts cost more than the rest of the screen: redraw them every 2 s at most.
            try:
                charts = [(self.query_one(f"#{chart_id}", PlotextChart), spec)
                          for chart_id, spec in endpoint_charts(view, snap.wall_time).items()]
            except NoMatches:
                # the tabs mount their panes a moment after this screen: draw once they are there
                self.call_after_refresh(self.rerender, force)
                return
            self._charts_drawn_at = now
            for chart, spec in charts:
                chart.set_spec(spec)
                if force:
                    chart.redraw(force=True)
        self._show_errors(view, snap.wall_time, palette, force)
        for panel in self.query(AgentPanel):
            panel.show(view, snap.wall_time, palette)
        if view.chain is not None and not self._chain_tab:
            self._add_chain_tab()  # a receiver that came up after the screen opened
        for chain_panel in self.query(ChainPanel):
            chain_panel.show(view, snap.wall_time, palette, force)
        server_key = (view.server, view.ttft_gap, id(palette))
        if server_key != self._server_key or force:
            self._server_key = server_key
            self.query_one("#server-latency", Static).update(server_latency_text(view, palette))
        settings_key = (view.config, view.server.status if view.server else None, view.pool_wait_ms,
                        view.redirected_to)
        if settings_key != self._settings_key or force:
            self._settings_key = settings_key
            self.query_one("#settings", Static).update(settings_text(view))

    def _show_errors(self, view: EndpointView, now: float, palette: Palette, force: bool) -> None:
        errors = view.recent_errors
        key = (errors, now, id(palette))
        if key == self._errors_key and not force:
            return
        self._errors_key = key
        table = self.query_one("#errors-table", DataTable)
        table.clear()
        for sample in reversed(errors):  # newest first
            table.add_row(
                fmt_ago(sample.wall_time, now),
                Text(sample.error_kind or "?", style=palette.critical),
                str(sample.http_status) if sample.http_status is not None else "--",
                truncate(sample.error_message or "", 200),
            )
        if not errors and view.errors and not view.samples:
            # a source that keeps counts by class, not probes (the fleet view reads Prometheus)
            for kind, count in sorted(view.errors.items(), key=lambda kv: -kv[1]):
                table.add_row("window", Text(kind, style=palette.critical), "--",
                              f"{count} in the window (per-probe messages are in that host's lpxtop)")
        elif not errors:
            table.add_row("", Text("no errors in the window", style=palette.muted), "", "")

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_tab(self, step: int) -> None:
        """The previous (-1) or next (1) tab as the tab bar shows them (an added Agent tab in its place),
        wrapping round."""
        bar = self.query_one("#detail-tabs", TabbedContent).query_one(Tabs)
        if step > 0:
            bar.action_next_tab()
        else:
            bar.action_previous_tab()

    def help_page(self) -> HelpPage:
        app = self.app
        return detail_help(demo=app.is_demo, replay=app.timeline is not None)  # type: ignore[attr-defined]
