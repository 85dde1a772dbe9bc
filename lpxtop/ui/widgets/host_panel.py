"""The host panel: CPU, load, memory, swap and memory pressure (PSI), with `--` for what the OS lacks."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.widgets import Static

from lpxtop.humanize import UNKNOWN, fmt_bytes, fmt_pct
from lpxtop.model.host import HostSnapshot
from lpxtop.ui.formatting import bar_text, join_lines, level, ratio
from lpxtop.ui.palette import Palette

LABEL = 5  # "swap " and friends


def _bar_line(label: str, frac: float | None, amount: str, lvl: str, width: int, palette: Palette) -> Text:
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(f"{label:<{LABEL}}", style=palette.muted)
    bar_width = max(3, width - LABEL - len(amount) - 1)
    line.append(bar_text(frac, bar_width), style=palette.for_level(lvl))
    line.append(" " + amount)
    return line


def render_host_compact(host: HostSnapshot, width: int, thresholds: Mapping[str, tuple[float, float]],
                        palette: Palette) -> Text:
    """Three lines for short terminals: CPU and load, memory, swap and pressure."""
    cpu, load = host.cpu_pct, getattr(host, "load_avg", None)
    first = Text()
    first.append("CPU ", style=palette.muted)
    first.append(fmt_pct(cpu, digits=1), style=palette.for_level(level(cpu, "cpu_pct", thresholds)))
    cores = getattr(host, "cpu_count", None)
    if cores:
        first.append(f"/{cores}", style=palette.muted)
    first.append("  load ", style=palette.muted)
    first.append(" ".join(f"{x:.2f}" for x in load) if load else UNKNOWN)
    mem_frac = ratio(host.mem_used_bytes, host.mem_total_bytes)
    mem = _bar_line("mem", mem_frac, f"{fmt_bytes(host.mem_used_bytes)}/{fmt_bytes(host.mem_total_bytes)}",
                    level(mem_frac, "host_mem", thresholds), width, palette)
    swap_used, swap_total = getattr(host, "swap_used_bytes", None), getattr(host, "swap_total_bytes", None)
    swap_frac = ratio(swap_used, swap_total)
    pressure = getattr(host, "mem_pressure_avg10", None)
    third = Text()
    third.append("swap ", style=palette.muted)
    third.append(f"{fmt_bytes(swap_used)}/{fmt_bytes(swap_total)}" if swap_total else "none",
                 style=palette.for_level(level(swap_frac, "swap", thresholds)))
    third.append("  mem pressure ", style=palette.muted)
    third.append(fmt_pct(pressure, digits=1), style=palette.for_level(level(pressure, "mem_pressure", thresholds)))
    return join_lines([first, mem, third])


def render_host(host: HostSnapshot | None, width: int, thresholds: Mapping[str, tuple[float, float]],
                palette: Palette, height: int = 5, served: Mapping[str, tuple[str, ...]] | None = None) -> Text:
    """The panel's text for a content area `width` × `height` (5 lines, or 3 when short). `served`: each
    endpoint's name -> every endpoint its server process serves (a server's line names them all)."""
    if host is None:
        return Text("host: not collected yet", style=palette.muted)
    if height < 5:
        return render_host_compact(host, width, thresholds, palette)
    lines: list[Text] = []
    cpu = host.cpu_pct
    cores = getattr(host, "cpu_count", None)
    cpu_amount = fmt_pct(cpu, digits=1) + (f" of {cores}" if cores else "")
    cpu_frac = None if cpu is None else cpu / 100.0
    lines.append(_bar_line("CPU", cpu_frac, cpu_amount, level(cpu, "cpu_pct", thresholds), width, palette))
    load = getattr(host, "load_avg", None)
    load_line = Text(no_wrap=True, overflow="ellipsis")
    load_line.append(f"{'load':<{LABEL}}", style=palette.muted)
    load_line.append(" ".join(f"{x:.2f}" for x in load) if load else UNKNOWN)
    lines.append(load_line)
    mem_frac = ratio(host.mem_used_bytes, host.mem_total_bytes)
    lines.append(_bar_line("mem", mem_frac, f"{fmt_bytes(host.mem_used_bytes)}/{fmt_bytes(host.mem_total_bytes)}",
                           level(mem_frac, "host_mem", thresholds), width, palette))
    swap_used, swap_total = getattr(host, "swap_used_bytes", None), getattr(host, "swap_total_bytes", None)
    if swap_total == 0:
        swap_line = Text(f"{'swap':<{LABEL}}", style=palette.muted, no_wrap=True)
        swap_line.append("none configured", style=palette.muted)
        lines.append(swap_line)
    else:
        swap_frac = ratio(swap_used, swap_total)
        lines.append(_bar_line("swap", swap_frac, f"{fmt_bytes(swap_used)}/{fmt_bytes(swap_total)}",
                               level(swap_frac, "swap", thresholds), width, palette))
    pressure = getattr(host, "mem_pressure_avg10", None)
    psi = Text(no_wrap=True, overflow="ellipsis")
    psi.append("mem pressure ", style=palette.muted)
    psi.append(fmt_pct(pressure, digits=1), style=palette.for_level(level(pressure, "mem_pressure", thresholds)))
    psi.append(" stalled (10 s)", style=palette.muted)
    lines.append(psi)
    procs = getattr(host, "processes", ())
    if procs and height > 6:
        room = height - len(lines) - 1
        head = Text("servers  ", style=palette.muted)
        head.append("PID / CPU / RSS / endpoints", style=palette.muted)
        lines.append(head)
        for proc in list(procs)[:room]:
            # the figures first: a process serving many endpoints has a long list of names, cut at the end
            line = Text(no_wrap=True, overflow="ellipsis")
            line.append(f"  {getattr(proc, 'pid', '?')} ", style=palette.muted)
            status = getattr(proc, "status", "ok")
            if status != "ok":
                line.append(status, style=palette.warning)
            else:
                cpu_p = getattr(proc, "cpu_pct", None)
                line.append(f"{fmt_pct(cpu_p)} {fmt_bytes(getattr(proc, 'rss_bytes', None))}")
                children = getattr(proc, "children", 0)
                if children:
                    line.append(f" +{children} children", style=palette.muted)
            endpoint = getattr(proc, "endpoint", None) or "?"
            line.append(f"  {', '.join((served or {}).get(endpoint, (endpoint,)))}")
            lines.append(line)
    return join_lines(lines)


class HostPanel(Static):
    """Renders `snapshot.host`; redraws only when the data, the width or the theme changed."""

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self._key: tuple | None = None

    def show(self, host: HostSnapshot | None, thresholds: Mapping[str, tuple[float, float]], palette: Palette,
             *, force: bool = False, served: Mapping[str, tuple[str, ...]] | None = None) -> None:
        width = self.content_size.width or 38
        # Tall screens size the panel to its content: ask for room for every server process.
        tall = self.screen.has_class("-tall")
        height = 7 + len(getattr(host, "processes", ()) or ()) if tall else (self.content_size.height or 5)
        key = (host, width, height, id(palette), tuple(sorted((served or {}).items())))
        if key == self._key and not force:
            return
        # a new layout only when the number of lines changes (a server process came or went)
        relayout = tall and (force or self._key is None or self._key[2] != height)
        self._key = key
        self.update(render_host(host, width, thresholds, palette, height, served), layout=relayout)
