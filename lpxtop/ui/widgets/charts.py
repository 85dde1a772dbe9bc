"""plotext charts rendered into a Static, sized to the widget.

plotext keeps one global figure; every build starts and ends with `figure.clear()` so no setting or
series leaks from one chart into the next (or into anything else that uses plotext). The built matrix
is turned into Rich text with `Text.from_ansi`. Charts are pure data (`ChartSpec`), so a widget
redraws only when its spec, its size or the theme changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rich.text import Text
from textual.widgets import Static

from lpxtop.humanize import fmt_ms, fmt_rate
from lpxtop.model.snapshot import EndpointView
from lpxtop.ui.formatting import pack_chunks

RGB = tuple[int, int, int]
MIN_WIDTH, MIN_HEIGHT = 20, 7  # a plot needs its axes, its labels and a few rows between them


# plotext draws nothing sensible from NaN or ±Inf, and fails on some: every chart's numbers pass here.
# Beyond this magnitude a plot of milliseconds, tokens/s or requests means nothing either.
PLOT_LIMIT = 1e15


def _plottable(value: object) -> bool:
    try:
        return isinstance(value, int | float) and math.isfinite(value) and abs(value) < PLOT_LIMIT
    except OverflowError:
        return False


@dataclass(frozen=True)
class Series:
    """A line over (x, y) points; `color` indexes the palette's chart colours. Points whose x or y is
    not a finite number (a server's +Inf gauge) are dropped."""

    label: str
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    color: int = 0

    def __post_init__(self) -> None:
        if not all(_plottable(x) and _plottable(y) for x, y in zip(self.xs, self.ys)) or len(self.xs) != len(self.ys):
            kept = [(x, y) for x, y in zip(self.xs, self.ys) if _plottable(x) and _plottable(y)]
            object.__setattr__(self, "xs", tuple(x for x, _ in kept))
            object.__setattr__(self, "ys", tuple(y for _, y in kept))


@dataclass(frozen=True)
class Level:
    """A horizontal reference line (a percentile) across the chart."""

    label: str
    y: float
    color: int = 3


@dataclass(frozen=True)
class ChartSpec:
    """Everything a chart shows. `histogram` draws `hist_values` in `bins` buckets instead of lines."""

    title: str
    series: tuple[Series, ...] = ()
    levels: tuple[Level, ...] = ()
    histogram: bool = False
    hist_values: tuple[float, ...] = ()
    bins: int = 20
    y_min: float | None = None
    y_max: float | None = None
    x_label: str = ""
    empty_message: str = "no data yet"
    integer_y: bool = False  # the y axis counts things (requests): whole-number ticks only
    time_x: bool = True  # x is seconds relative to now (≤ 0): ticks read "30 … now"

    def __post_init__(self) -> None:
        # the same guard for the histogram's values, the reference lines and the axis limits
        if not all(_plottable(v) for v in self.hist_values):
            object.__setattr__(self, "hist_values", tuple(v for v in self.hist_values if _plottable(v)))
        if not all(_plottable(lvl.y) for lvl in self.levels):
            object.__setattr__(self, "levels", tuple(lvl for lvl in self.levels if _plottable(lvl.y)))
        for name in ("y_min", "y_max"):
            value = getattr(self, name)
            if value is not None and not _plottable(value):
                object.__setattr__(self, name, None)

    @property
    def empty(self) -> bool:
        if self.histogram:
            return not self.hist_values
        return not any(s.ys for s in self.series)


def nice_ticks(lo: float, hi: float, count: int, integer: bool = False) -> list[float]:
    """About `count` round tick values (steps of 1, 2, 2.5 or 5 × 10^k) covering lo..hi; whole numbers
    only when `integer` (no 0.25 on a request count)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0]
    if hi <= lo:
        hi = lo + (1.0 if integer or lo == 0 else abs(lo) * 0.1)
    raw = (hi - lo) / max(1, count - 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * 0.999)
    if integer:
        step = max(1.0, float(math.ceil(step)))
    first = math.floor(lo / step + 1e-9) * step
    ticks = []
    value = first
    while value <= hi + step * 1e-9 and len(ticks) < 50:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < hi - step * 1e-9:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def tick_text(value: float) -> str:
    """A tick label as a person writes the number, at most 5 characters: 0.12, 3.4, 45.6, 780, 1250,
    12.3k (never plotext's 7.8e2)."""
    v = abs(value)
    if v >= 99_950:
        return f"{value / 1000:.0f}k"
    if v >= 10_000:
        return f"{value / 1000:.1f}k"
    if v >= 100 or float(value).is_integer():
        return f"{value:.0f}"
    if v >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}".rstrip("0").rstrip(".") if v >= 0.01 else f"{value:.2g}"


def seconds_ago_text(value: float) -> str:
    """An x tick on a time axis: seconds before now, and `now` at 0."""
    return "now" if abs(value) < 1e-9 else f"{-value:g}"


def _y_range(spec: ChartSpec) -> tuple[float, float]:
    ys = [y for s in spec.series for y in s.ys] + [lvl.y for lvl in spec.levels]
    lo = spec.y_min if spec.y_min is not None else min(ys, default=0.0)
    hi = spec.y_max if spec.y_max is not None else max(ys, default=1.0)
    return lo, hi


def _histogram(values: tuple[float, ...], bins: int) -> tuple[list[float], list[int], float]:
    """(bin centres, counts, bin width) over the values' range."""
    lo, hi = min(values), max(values)
    width = (hi - lo) / bins if hi > lo else 1.0
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - lo) / width)) if hi > lo else 0] += 1
    return [lo + (i + 0.5) * width for i in range(bins)], counts, width


def build_chart(spec: ChartSpec, width: int, height: int, colors: tuple[RGB, ...]) -> str:
    """The chart as ANSI text, exactly `width` × `height` cells. Ticks are round numbers written plainly;
    a time axis counts seconds back to `now`; a histogram draws no bar for an empty bin."""
    import plotext  # only once a detail screen opens: it costs ~7 MB that the main screen does not need

    fig = plotext.figure
    fig.clear()
    y_count = max(3, min(6, height // 2))
    x_count = max(2, min(7, width // 10))
    try:
        fig.plot_size(width, height)
        fig.theme("simple")
        fig.legend(active=False)  # the widget's title line names the series in their colours
        if spec.histogram:
            centres, counts, bin_width = _histogram(spec.hist_values, spec.bins)
            # Every bin, the empty ones at 0: plotext draws no bar for those (its own hist() filled the zero
            # row, which read as data). `width` is a share of the bins' spacing.
            marker = plotext.marker("full", plotext.pixel(foreground=colors[0]))
            fig.draw(fig.bar(centres, counts, width=0.9, marker=marker))
            low, high = centres[0] - bin_width / 2, centres[-1] + bin_width / 2
            x_ticks = nice_ticks(low, high, x_count)
            fig.ruler("x").lim(min(low, x_ticks[0]), max(high, x_ticks[-1]))
            fig.ruler("x").ticks(x_ticks, [tick_text(t) for t in x_ticks])
            y_ticks = nice_ticks(0.0, max(counts), y_count, integer=True)
            fig.ruler("y").lim(0.0, y_ticks[-1])
            fig.ruler("y").ticks(y_ticks, [tick_text(t) for t in y_ticks])
        else:
            x_low = min((min(s.xs) for s in spec.series if s.xs), default=0.0)
            x_high = max((max(s.xs) for s in spec.series if s.xs), default=1.0)
            if spec.time_x:
                x_high = max(x_high, 0.0)  # the axis ends at now
            for s in spec.series:
                if not s.xs:
                    continue
                marker = plotext.marker("hd", plotext.pixel(foreground=colors[s.color % len(colors)]))
                sig = fig.signal(list(s.xs), list(s.ys), marker=marker)
                sig.lines()
                fig.draw(sig)
            for lvl in spec.levels:
                # A two-point signal, not fig.line(): plotext's line() paints a background colour.
                marker = plotext.marker("hd", plotext.pixel(foreground=colors[lvl.color % len(colors)]))
                sig = fig.signal([x_low, x_high], [lvl.y, lvl.y], marker=marker)
                sig.lines()
                fig.draw(sig)
            y_low, y_high = _y_range(spec)
            y_ticks = nice_ticks(y_low, y_high, y_count, integer=spec.integer_y)
            y_ticks = [t for t in y_ticks if spec.y_max is None or t <= spec.y_max] or y_ticks
            fig.ruler("y").lim(min(y_low, y_ticks[0]), max(y_high, y_ticks[-1]))
            fig.ruler("y").ticks(y_ticks, [tick_text(t) for t in y_ticks])
            x_ticks = [t for t in nice_ticks(x_low, x_high, x_count) if x_low - 1e-9 <= t <= x_high + 1e-9]
            if x_high > x_low:
                fig.ruler("x").lim(x_low, x_high)
            if x_ticks:
                fig.ruler("x").ticks(x_ticks, [seconds_ago_text(t) if spec.time_x else tick_text(t) for t in x_ticks])
        if spec.x_label:
            fig.label(spec.x_label)
        return fig.build().string()
    finally:
        fig.clear()


def _hex(rgb: RGB) -> str:
    return "#{:02x}{:02x}{:02x}".format(*rgb)


class PlotView(Static):
    """A plot widget: a title line naming what is drawn in its colours, then the plot filling the rest.

    Subclasses say what their spec's legend is (`legend`) and how it is drawn (`plot`); drawing is
    skipped while the spec, the size and the palette are the same as last time.
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.spec = None
        self._key: tuple | None = None

    def set_spec(self, spec) -> None:
        """Show `spec`; nothing is drawn if it equals what is shown."""
        self.spec = spec
        self.redraw()

    def on_resize(self) -> None:
        self.redraw()

    def legend(self, spec) -> list[tuple[str, int, str]]:
        """(glyph, colour index, label) for each thing drawn."""
        raise NotImplementedError

    def plot(self, spec, width: int, height: int, colors: list[RGB]) -> str:
        """The plot as text with ANSI colours, `width` × `height` cells."""
        raise NotImplementedError

    def redraw(self, *, force: bool = False) -> None:
        spec = self.spec
        palette = getattr(self.app, "palette", None)
        width, height = self.content_size.width, self.content_size.height
        if spec is None or palette is None or width <= 0 or height <= 0:
            return
        key = (spec, width, height, id(palette))
        if key == self._key and not force:
            return
        self._key = key
        colors = palette.chart
        # The title's words and each legend entry are chunks: on a narrow chart they go on a second line
        # rather than being cut (`━ p…` hid which line was the p99).
        chunks = [Text(part, style="bold") for part in spec.title.split("  ")]
        for glyph, color, label in self.legend(spec):
            chunk = Text(f"{glyph} ", style=_hex(colors[color % len(colors)]))
            chunk.append(label)
            chunks.append(chunk)
        title = pack_chunks([chunks], width)
        rows = title.plain.count("\n") + 1
        if not spec.empty and (width < MIN_WIDTH or height - rows < MIN_HEIGHT):
            # no legend for a chart that is not drawn: its name and what to do, in the lines it has
            need = "wider" if width < MIN_WIDTH else "taller"
            short = pack_chunks([[Text(spec.title.split("  ")[0], style="bold"),
                                  Text(f"(needs a {need} terminal)", style=palette.muted)]], width)
            self.update(short, layout=False)
            return
        if spec.empty:
            self.update(Text("\n").join([title, Text(spec.empty_message, style=palette.muted)]), layout=False)
            return
        plot = Text.from_ansi(self.plot(spec, width, height - rows, colors), no_wrap=True)
        self.update(Text("\n").join([title, plot]), layout=False)


class PlotextChart(PlotView):
    """A time chart (ChartSpec): its series and levels in the title, the plot below."""

    DEFAULT_CSS = """
    PlotextChart { height: 1fr; min-height: 8; }
    """

    def legend(self, spec: ChartSpec) -> list[tuple[str, int, str]]:
        return [("━", s.color, s.label) for s in spec.series] + [("━", lvl.color, lvl.label) for lvl in spec.levels]

    def plot(self, spec: ChartSpec, width: int, height: int, colors: list[RGB]) -> str:
        return build_chart(spec, width, height, colors)


def _rel_times(times: list[float], now: float) -> tuple[float, ...]:
    return tuple(round(t - now, 3) for t in times)


def ttft_chart(view: EndpointView, now: float) -> ChartSpec:
    ok = [s for s in view.samples if s.ok and s.ttft_ms is not None]
    levels = ()
    if view.ttft_ms is not None:
        levels = (Level(f"p50 {fmt_ms(view.ttft_ms.p50)}", view.ttft_ms.p50, 2),
                  Level(f"p99 {fmt_ms(view.ttft_ms.p99)}", view.ttft_ms.p99, 4))
    return ChartSpec(
        title="TTFT ms",
        series=(Series("per probe", _rel_times([s.wall_time for s in ok], now), tuple(s.ttft_ms for s in ok), 0),),
        levels=levels,
        x_label="seconds ago",
    )


def e2e_chart(view: EndpointView, now: float) -> ChartSpec:
    ok = [s for s in view.samples if s.ok and s.e2e_ms is not None]
    levels = ()
    if view.e2e_ms is not None:
        levels = (Level(f"p50 {fmt_ms(view.e2e_ms.p50)}", view.e2e_ms.p50, 2),
                  Level(f"p99 {fmt_ms(view.e2e_ms.p99)}", view.e2e_ms.p99, 4))
    return ChartSpec(
        title="E2E ms",
        series=(Series("per probe", _rel_times([s.wall_time for s in ok], now), tuple(s.e2e_ms for s in ok), 1),),
        levels=levels,
        x_label="seconds ago",
    )


def itl_chart(view: EndpointView) -> ChartSpec:
    gaps = tuple(g for s in view.samples if s.ok for g in s.itl_ms)
    title = "ITL distribution (ms, probes pooled)"
    if view.itl_ms is not None:
        title += f"  p50 {fmt_ms(view.itl_ms.p50)}  p99 {fmt_ms(view.itl_ms.p99)}"
    return ChartSpec(title=title, histogram=True, hist_values=gaps, bins=20, x_label="ms between tokens; bars: gaps",
                     empty_message="no inter-token gaps yet", time_x=False)


def _decode_rate(sample) -> float | None:
    try:
        return sample.decode_tokens_per_s
    except (ArithmeticError, TypeError, ValueError):  # a token count no float holds, from a server's usage
        return None


def tokens_chart(view: EndpointView, now: float) -> ChartSpec:
    rates = [(s.wall_time, _decode_rate(s)) for s in view.samples]
    pts = [(t, r) for t, r in rates if r is not None]
    title = "decode tokens/s per probe"
    if view.output_tokens_per_s is not None:
        title += f"  (table p50 {fmt_rate(view.output_tokens_per_s.p50)})"
    return ChartSpec(
        title=title,
        series=(Series("tokens/s", _rel_times([t for t, _ in pts], now), tuple(v for _, v in pts), 2),),
        y_min=0.0,
        x_label="seconds ago",
    )


def queue_chart(view: EndpointView, now: float) -> ChartSpec:
    hist = view.server_history
    waiting = [(p.wall_time, p.requests_waiting) for p in hist if p.requests_waiting is not None]
    running = [(p.wall_time, p.requests_running) for p in hist if p.requests_running is not None]
    return ChartSpec(
        title="server queue",
        series=(
            Series("waiting", _rel_times([t for t, _ in waiting], now), tuple(v for _, v in waiting), 3),
            Series("running", _rel_times([t for t, _ in running], now), tuple(v for _, v in running), 0),
        ),
        y_min=0.0,
        integer_y=True,
        x_label="seconds ago",
        empty_message="the server exposes no queue metrics",
    )


def kv_chart(view: EndpointView, now: float) -> ChartSpec:
    pts = [(p.wall_time, p.kv_cache_usage * 100.0) for p in view.server_history if p.kv_cache_usage is not None]
    return ChartSpec(
        title="KV cache used %",
        series=(Series("KV %", _rel_times([t for t, _ in pts], now), tuple(v for _, v in pts), 1),),
        y_min=0.0,
        y_max=100.0,
        x_label="seconds ago",
        empty_message="the server exposes no KV-cache metric",
    )


def _range(view: EndpointView, key: str, now: float, color: int, label: str, scale: float = 1.0) -> Series:
    points = next((r.points for r in view.ranges if r.key == key), ())
    return Series(label, _rel_times([t for t, _ in points], now), tuple(v * scale for _, v in points), color)


def range_charts(view: EndpointView, now: float) -> dict[str, ChartSpec]:
    """The same six charts from a store's time series (the fleet view's Prometheus query_range): each
    point is a histogram_quantile over the chart's rate window, not a single probe."""
    x = "seconds ago"
    return {
        "chart-ttft": ChartSpec("TTFT ms (Prometheus, histogram_quantile)",
                                (_range(view, "ttft_p50_ms", now, 2, "p50"), _range(view, "ttft_p99_ms", now, 4, "p99")),
                                x_label=x),
        "chart-e2e": ChartSpec("E2E ms (Prometheus, histogram_quantile)",
                               (_range(view, "e2e_p50_ms", now, 1, "p50"), _range(view, "e2e_p99_ms", now, 4, "p99")),
                               x_label=x),
        "chart-itl": ChartSpec("ITL ms (Prometheus, histogram_quantile)",
                               (_range(view, "itl_p50_ms", now, 0, "p50"), _range(view, "itl_p99_ms", now, 4, "p99")),
                               x_label=x, empty_message="no inter-token gaps in Prometheus yet"),
        "chart-tokens": ChartSpec("decode tokens/s (1 / TPOT p50)", (_range(view, "decode_tokens_per_s", now, 2,
                                                                            "tokens/s"),), y_min=0.0, x_label=x),
        "chart-queue": ChartSpec("server queue", (_range(view, "requests_waiting", now, 3, "waiting"),
                                                  _range(view, "requests_running", now, 0, "running")),
                                 y_min=0.0, x_label=x, empty_message="the server exposes no queue metrics",
                                 integer_y=True),
        "chart-kv": ChartSpec("KV cache used %", (_range(view, "kv_cache_usage", now, 1, "KV %", 100.0),),
                              y_min=0.0, y_max=100.0, x_label=x, empty_message="the server exposes no KV-cache metric"),
    }


def endpoint_charts(view: EndpointView, now: float) -> dict[str, ChartSpec]:
    """Every detail-screen chart for one endpoint, by widget id."""
    if not view.samples and getattr(view, "ranges", ()):
        return range_charts(view, now)
    return {
        "chart-ttft": ttft_chart(view, now),
        "chart-e2e": e2e_chart(view, now),
        "chart-itl": itl_chart(view),
        "chart-tokens": tokens_chart(view, now),
        "chart-queue": queue_chart(view, now),
        "chart-kv": kv_chart(view, now),
    }
