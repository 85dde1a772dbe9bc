"""The GPU panel: per device utilisation, memory bar, temperature, power against its limit, the clock-throttle
word (pwr-cap, thermal ...), joules per output token of the endpoints it serves, and the processes on it.

Fields beyond the first model (power limit, MIG, lost, notes, process users) are read with getattr so
the panel keeps working while the GPU model grows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.text import Text
from textual.widgets import Static

from lpxtop.humanize import UNKNOWN, fmt_bytes, fmt_joules, fmt_pct
from lpxtop.model.gpu import GpuDevice, GpuSnapshot
from lpxtop.model.snapshot import EndpointView
from lpxtop.ui.formatting import bar_text, join_lines, level, ratio, truncate
from lpxtop.ui.palette import Palette

MAX_PROCESSES = 4  # per device; the rest are summed in one line


_VENDOR_WORDS = {"nvidia": "NVIDIA", "amd": "AMD"}


def energy_by_device(endpoints: Sequence[EndpointView]) -> dict[str, float]:
    """Device key → joules per output token of the endpoint(s) it serves (engine/gpu/accel/energy.py)."""
    out: dict[str, float] = {}
    for view in endpoints:
        energy = getattr(view, "energy", None)
        if energy is not None and energy.joules_per_output_token is not None:
            for key in energy.gpus:
                out.setdefault(key, energy.joules_per_output_token)
    return out


def _device_lines(dev: GpuDevice, width: int, thresholds: Mapping[str, tuple[float, float]], palette: Palette,
                  indent: str = "", energy: Mapping[str, float] | None = None,
                  served: Mapping[str, tuple[str, ...]] | None = None) -> list[Text]:
    lines: list[Text] = []
    head = Text(no_wrap=True, overflow="ellipsis")
    label = getattr(dev, "label", f"GPU {dev.index}")
    util = fmt_pct(dev.util_pct)
    temp = f"{dev.temp_c:.0f}°C" if dev.temp_c is not None else UNKNOWN
    limit = getattr(dev, "power_limit_w", None)
    power = UNKNOWN if dev.power_w is None else (f"{dev.power_w:.0f}/{limit:.0f}W" if limit else f"{dev.power_w:.0f}W")
    word = getattr(dev, "throttle_word", None)
    # with a throttle word the columns give up their padding, so that an 80-column panel keeps the word whole
    cols = (f" {util}", f" {temp}", f" {power}", f" {word}") if word else (f" {util:>4}", f" {temp:>5}", f" {power:>9}")
    right = "".join(cols)
    vendor = _VENDOR_WORDS.get(getattr(dev, "vendor", ""), "")
    name = dev.name if not vendor or dev.name.upper().startswith(vendor) else f"{vendor} {dev.name}"
    head.append(indent + label + " ", style="bold")
    head.append(truncate(name, max(4, width - len(indent) - len(label) - 1 - len(right))))
    pad = width - head.cell_len - len(right)
    if pad > 0:
        head.append(" " * pad)
    head.append(cols[0], style=palette.muted if dev.util_pct is None else "")
    head.append(cols[1], style=palette.for_level(level(dev.temp_c, "gpu_temp_c", thresholds)))
    head.append(cols[2], style=palette.muted if dev.power_w is None else "")
    if word:
        head.append(cols[3], style=palette.warning)  # why the clocks are held down (power cap, thermal ...)
    lines.append(head)
    if getattr(dev, "lost", False):
        lines.append(Text(indent + "  GPU lost (fell off the bus): it needs a reset or a reboot", style=palette.critical))
        return lines
    frac = ratio(dev.mem_used_bytes, dev.mem_total_bytes)
    mem = Text(no_wrap=True, overflow="ellipsis")
    amount = f" {fmt_bytes(dev.mem_used_bytes)}/{fmt_bytes(dev.mem_total_bytes)} {fmt_pct(frac, fraction=True):>4}"
    joules = (energy or {}).get(dev.key) if not dev.is_mig else None
    if joules is not None:
        amount += f" {fmt_joules(joules)}J/tok"
        if width - len(indent) - 6 - len(amount) < 6:  # a narrow panel: the total goes before the bar does
            amount = f" {fmt_bytes(dev.mem_used_bytes)} {fmt_pct(frac, fraction=True):>4} {fmt_joules(joules)}J/tok"
    bar_width = max(4, width - len(indent) - 6 - len(amount))
    mem.append(indent + "  mem ", style=palette.muted)
    mem.append(bar_text(frac, bar_width), style=palette.for_level(level(frac, "gpu_mem", thresholds)))
    mem.append(amount)
    lines.append(mem)
    procs = sorted(dev.processes, key=lambda p: -(p.used_bytes or 0))
    for proc in procs[:MAX_PROCESSES]:
        line = Text(no_wrap=True, overflow="ellipsis")
        user = getattr(proc, "user", None)
        endpoint = getattr(proc, "endpoint", None)
        line.append(f"{indent}  {proc.pid:>7} ", style=palette.muted)
        line.append(f"{fmt_bytes(proc.used_bytes):>6} ")
        who = " ".join(x for x in (user, proc.name or "?") if x)
        line.append(who)
        if endpoint:  # every endpoint its server serves, not only the first
            line.append(f" → {', '.join((served or {}).get(endpoint, (endpoint,)))}", style=palette.accent)
        lines.append(line)
    if len(procs) > MAX_PROCESSES:
        rest = sum(p.used_bytes or 0 for p in procs[MAX_PROCESSES:])
        lines.append(Text(f"{indent}  +{len(procs) - MAX_PROCESSES} more processes ({fmt_bytes(rest)})", style=palette.muted))
    for note in getattr(dev, "notes", ()):
        lines.append(Text(indent + "  " + note, style=palette.muted, no_wrap=True, overflow="ellipsis"))
    for mig in getattr(dev, "mig_devices", ()):
        lines.extend(_device_lines(mig, width, thresholds, palette, indent + "  ", energy=energy, served=served))
    return lines


def no_gpu(gpu: GpuSnapshot) -> bool:
    """Nothing to show but why: no device read (no driver, no permission, no GPU). The screens then give
    the panel's room to the others and say why on one line (`GpuLine`)."""
    return gpu.status != "ok" and not gpu.devices and not gpu.simulated


HIDE_HINT = "  (2 hides this line)"


def render_gpu_line(gpu: GpuSnapshot, palette: Palette, width: int = 200) -> Text:
    """The one line that stands for the GPU panel when there is no GPU to show: why, never cut (a reason
    longer than the line wraps), and how to hide it when that fits too."""
    text = Text()
    text.append("GPU ", style="bold")
    text.append(gpu.status, style=palette.muted)
    if text.cell_len + len(HIDE_HINT) <= width:
        text.append(HIDE_HINT, style=palette.muted)
    return text


class GpuLine(Static):
    """Why there is no GPU panel, across the screen's width; redrawn only when the reason changes."""

    DEFAULT_CSS = """
    GpuLine { height: auto; max-height: 3; padding: 0 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self._key: tuple | None = None

    def show(self, gpu: GpuSnapshot, palette: Palette, *, force: bool = False) -> None:
        width = self.content_size.width or self.app.size.width - 2
        key = (gpu.status, id(palette), width)
        if key != self._key or force:
            self._key = key
            self.update(render_gpu_line(gpu, palette, width))


def render_gpu(gpu: GpuSnapshot, width: int, thresholds: Mapping[str, tuple[float, float]], palette: Palette,
               energy: Mapping[str, float] | None = None,
               served: Mapping[str, tuple[str, ...]] | None = None) -> Text:
    """The panel's text for a content area `width` cells wide; `energy`: energy_by_device's J/token.
    `served`: each endpoint's name -> every
    endpoint its server process serves (a process line names them all)."""
    if gpu.status != "ok" and not gpu.devices:
        return Text(f"GPU: {gpu.status}", style=palette.muted, no_wrap=True, overflow="ellipsis")
    lines: list[Text] = []
    if gpu.simulated:
        lines.append(Text("Simulated GPU (demo)", style=palette.warning))
    if gpu.status != "ok":
        lines.append(Text(gpu.status, style=palette.warning, no_wrap=True, overflow="ellipsis"))
    for dev in gpu.devices:
        lines.extend(_device_lines(dev, width, thresholds, palette, energy=energy, served=served))
    if not gpu.devices:
        lines.append(Text("no GPU found", style=palette.muted))
    return join_lines(lines)


class GpuPanel(Static):
    """Renders `snapshot.gpu`; redraws only when the GPU data, the width or the theme changed."""

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self._key: tuple | None = None

    def show(self, gpu: GpuSnapshot, thresholds: Mapping[str, tuple[float, float]], palette: Palette,
             *, force: bool = False, served: Mapping[str, tuple[str, ...]] | None = None,
             energy: Mapping[str, float] | None = None) -> None:
        width = self.content_size.width or 40
        rounded = tuple(sorted((k, round(v, 2)) for k, v in (energy or {}).items()))
        key = (gpu, width, id(palette), tuple(sorted((served or {}).items())), rounded)
        if key == self._key and not force:
            return
        self._key = key
        subtitle = "Simulated GPU (demo)" if gpu.simulated else (getattr(gpu, "driver_version", None) or "")
        if self.border_subtitle != subtitle:  # setting it, even to the same text, repaints the whole panel
            self.border_subtitle = subtitle
        self.update(render_gpu(gpu, width, thresholds, palette, energy, served), layout=False)  # the panel's size is set by CSS
