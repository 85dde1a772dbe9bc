"""The sweep charts of a load test: one point per finished step, latency and throughput against the load.

Two charts side by side, each with two y axes: TTFT p50/p95 in ms (left) with E2E p50/p95 in s (right), and output
tokens/s (left) with requests/s (right). A vertical line marks the knee (where throughput per unit of
latency peaks) and one the capacity (the highest step that met the SLO). Built with plotext like the detail
screen's charts (`widgets/charts.py`): the figure is cleared before and after every build, and a chart is
redrawn only when its data, its size or the theme changed.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Horizontal

from lpxtop.model.load import LoadState, StepResult, level_unit
from lpxtop.ui.widgets.charts import RGB, PlotView, nice_ticks, tick_text


@dataclass(frozen=True)
class Line:
    label: str
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    color: int
    right: bool = False  # on the right-hand y axis


@dataclass(frozen=True)
class Mark:
    """A vertical line at x: the knee or the capacity."""

    label: str
    x: float
    color: int


@dataclass(frozen=True)
class SweepSpec:
    title: str
    lines: tuple[Line, ...] = ()
    marks: tuple[Mark, ...] = ()
    x_label: str = ""
    left_unit: str = ""
    right_unit: str = ""
    empty_message: str = "one point per finished step"
    integer_x: bool = True  # the load is a whole number (concurrency, tokens); a request rate is not

    @property
    def empty(self) -> bool:
        return not any(line.ys for line in self.lines)


def _points(steps: list[StepResult], value) -> tuple[tuple[float, ...], tuple[float, ...]]:
    pts = [(s.level, value(s)) for s in steps]
    pts = [(x, y) for x, y in pts if y is not None]
    return tuple(x for x, _ in pts), tuple(y for _, y in pts)


def sweep_specs(state: LoadState) -> tuple[SweepSpec, SweepSpec]:
    """The latency chart and the throughput chart of `state`'s finished steps (ordered by load)."""
    steps = sorted((s for s in state.steps if s.status != "partial" or s.requests), key=lambda s: s.level)
    marks = []
    if state.knee_index is not None and state.knee_index < len(state.steps):
        marks.append(Mark("knee", state.steps[state.knee_index].level, 3))
    cap = state.capacity
    if cap is not None and cap.level is not None:
        marks.append(Mark("capacity", cap.level, 2))
    x_label = level_unit(state.mode)
    integer_x = state.mode != "rate"
    latency = SweepSpec(
        title="latency ms",
        lines=(
            Line("TTFT p50", *_points(steps, lambda s: s.ttft_ms.p50 if s.ttft_ms else None), 0),
            Line("p95", *_points(steps, lambda s: s.ttft_ms.p95 if s.ttft_ms else None), 1),
            Line("E2E p50 s (r)", *_points(steps, lambda s: s.e2el_ms.p50 / 1000 if s.e2el_ms else None), 2, True),
            Line("p95 (r)", *_points(steps, lambda s: s.e2el_ms.p95 / 1000 if s.e2el_ms else None), 4, True),
        ),
        marks=tuple(marks),
        x_label=x_label,
        left_unit="ms",
        right_unit="s",
        integer_x=integer_x,
    )
    throughput = SweepSpec(
        title="throughput",
        lines=(
            Line("output tok/s", *_points(steps, lambda s: s.output_throughput), 0),
            Line("req/s (r)", *_points(steps, lambda s: s.request_throughput), 1, True),
        ),
        marks=tuple(marks),
        x_label=x_label,
        left_unit="tok/s",
        right_unit="req/s",
        integer_x=integer_x,
    )
    return latency, throughput


def build_sweep(spec: SweepSpec, width: int, height: int, colors: tuple[RGB, ...]) -> str:
    """The chart as ANSI text, `width` × `height` cells."""
    import plotext

    fig = plotext.figure
    fig.clear()
    try:
        fig.plot_size(width, height)
        fig.theme("simple")
        fig.legend(active=False)
        xs = [x for line in spec.lines for x in line.xs]
        x_low, x_high = (min(xs), max(xs)) if xs else (0.0, 1.0)
        spans: dict[bool, tuple[float, float]] = {}
        for line in spec.lines:
            if not line.xs:
                continue
            side = "right" if line.right else "left"
            lo, hi = spans.get(line.right, (min(line.ys), max(line.ys)))
            spans[line.right] = (min(lo, *line.ys), max(hi, *line.ys))
            marker = plotext.marker("hd", plotext.pixel(foreground=colors[line.color % len(colors)]))
            sig = fig.signal(list(line.xs), list(line.ys), marker=marker, yside=side)
            sig.lines()
            fig.draw(sig)
            if len(line.xs) == 1:  # one step: a dot is easy to miss, draw a short flat stroke
                half = max(0.5, abs(line.xs[0]) * 0.02)
                stroke = fig.signal([line.xs[0] - half, line.xs[0] + half], [line.ys[0]] * 2, marker=marker, yside=side)
                stroke.lines()
                fig.draw(stroke)
        for right, (a, b) in spans.items():  # round ticks, plain labels: plotext writes 2200 as "2.2e3"
            ticks = nice_ticks(a, b, max(3, min(5, height // 2)))
            ruler = fig.ruler("y", side="right" if right else "left")
            ruler.lim(min(a, ticks[0]), max(b, ticks[-1]))
            ruler.ticks(ticks, [tick_text(t) for t in ticks])
        lo, hi = spans.get(False, spans.get(True, (0.0, 1.0)))
        for mark in spec.marks:
            if not x_low <= mark.x <= x_high:
                continue
            marker = plotext.marker("hd", plotext.pixel(foreground=colors[mark.color % len(colors)]))
            sig = fig.signal([mark.x, mark.x], [lo, hi], marker=marker, yside="left" if False in spans else "right")
            sig.lines()
            fig.draw(sig)
        levels = sorted(set(xs))
        if levels and len(levels) <= max(2, width // 8):  # ticks at the steps' loads, when they fit
            fig.ruler("x").ticks(levels, [f"{v:g}" for v in levels])
        elif levels:  # too many steps to label each: round ticks (whole numbers for a concurrency)
            ticks = [t for t in nice_ticks(x_low, x_high, max(2, width // 10), integer=spec.integer_x)
                     if x_low <= t <= x_high]
            fig.ruler("x").ticks(ticks, [tick_text(t) for t in ticks])
        if spec.x_label:
            fig.label(spec.x_label)
        return fig.build().string()
    finally:
        fig.clear()


class SweepChart(PlotView):
    """One sweep chart: its lines and marks (knee, capacity) in the title, the plot below."""

    DEFAULT_CSS = """
    SweepChart { height: 1fr; min-height: 6; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def legend(self, spec: SweepSpec) -> list[tuple[str, int, str]]:
        return [("━", line.color, line.label) for line in spec.lines] + [("┃", m.color, m.label) for m in spec.marks]

    def plot(self, spec: SweepSpec, width: int, height: int, colors: list[RGB]) -> str:
        return build_sweep(spec, width, height, colors)


class SweepCharts(Horizontal):
    """The latency and throughput charts side by side."""

    DEFAULT_CSS = """
    SweepCharts { height: 1fr; min-height: 6; }
    SweepCharts SweepChart { width: 1fr; padding: 0 1 0 0; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._key: tuple | None = None

    def compose(self) -> ComposeResult:
        yield SweepChart(id="sweep-latency")
        yield SweepChart(id="sweep-throughput")

    def show(self, state: LoadState, *, force: bool = False) -> None:
        key = (state.steps, state.knee_index, state.capacity)
        if key == self._key and not force:
            return
        self._key = key
        latency, throughput = sweep_specs(state)
        self.query_one("#sweep-latency", SweepChart).set_spec(latency)
        self.query_one("#sweep-throughput", SweepChart).set_spec(throughput)
        if force:
            for chart in self.query(SweepChart):
                chart.redraw(force=True)
