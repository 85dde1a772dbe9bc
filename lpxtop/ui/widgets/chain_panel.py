"""The detail screen's Chain tab: where each probe's milliseconds went, from the server's own span of it.

With `--traces-listen` (lpxtop/engine/traces), each probe is joined to the span its server sent for it:
the tab shows the probes joined (and why others were not), each segment's p50/p95/p99 over the window
(to the server, the queue, prefill, the server's TTFT, the time outside it, decode), the server's whole
population of requests (the load, other users) beside them, and a stacked bar per recent probe: its
client TTFT cut into to-server, queue, prefill, the rest of the server's TTFT and the way back.
Each bar's parts add up to that probe's TTFT, exactly (the server's TTFT + outside = the client's).
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from lpxtop.humanize import UNKNOWN, fmt_ago, fmt_ms
from lpxtop.model.chain import ChainSummary, JoinedRequest
from lpxtop.model.probe import Percentiles
from lpxtop.model.snapshot import EndpointView
from lpxtop.ui.formatting import truncate
from lpxtop.ui.palette import Palette

ROWS = (  # (field, label, what it is)
    ("to_server_ms", "to server", "send → the server's arrival stamp (one clock: this host)"),
    ("queue_ms", "queue", "waiting for a slot in the batch"),
    ("prefill_ms", "prefill", "scheduled → first token"),
    ("server_ttft_ms", "server TTFT", "the server's arrival → its first token"),
    ("outside_ms", "outside", "client TTFT − server TTFT: network, HTTP, tokenization, streaming"),
    ("decode_ms", "decode", "the server's first → last token"),
)
# the parts of one probe's client TTFT, in order, with their glyph (distinct without colour too)
PARTS = (("to server", "░"), ("queue", "▒"), ("prefill", "█"), ("server other", "▓"), ("back", "░"))
MAX_BARS = 12
MIN_BAR = 10
LABEL = 11  # " 1m00s ago "


def _part_styles(palette: Palette) -> dict[str, str]:
    colors = [f"rgb({r},{g},{b})" for r, g, b in palette.chart]
    return {"to server": colors[4 % len(colors)], "queue": colors[1 % len(colors)], "prefill": colors[0],
            "server other": colors[2 % len(colors)], "back": colors[4 % len(colors)]}


def ttft_parts(r: JoinedRequest) -> list[tuple[str, float]] | None:
    """One probe's client TTFT as its parts (ms, each ≥ 0 for drawing), or None without the server's
    queue, prefill and TTFT. Without a to-server figure (another host's clock) the way there and back is
    one part, "back"."""
    if r.client_ttft_ms is None or r.outside_ms is None or r.server_ttft_ms is None or r.queue_ms is None \
            or r.prefill_ms is None:
        return None
    to_server = r.to_server_ms if r.to_server_ms is not None else 0.0
    other = r.server_ttft_ms - r.queue_ms - r.prefill_ms
    back = r.outside_ms - to_server
    return [("to server", max(0.0, to_server)), ("queue", max(0.0, r.queue_ms)), ("prefill", max(0.0, r.prefill_ms)),
            ("server other", max(0.0, other)), ("back", max(0.0, back))]


def _cells(parts: list[tuple[str, float]], total: float, width: int) -> list[tuple[str, int]]:
    """Whole cells per part, by largest remainder, `width` cells standing for `total` ms."""
    if total <= 0:
        return [(name, 0) for name, _ in parts]
    exact = [(name, ms / total * width) for name, ms in parts]
    counts = {name: int(v) for name, v in exact}
    target = min(width, round(sum(v for _, v in exact)))
    for name, _ in sorted(exact, key=lambda nv: nv[1] - int(nv[1]), reverse=True)[: max(0, target - sum(counts.values()))]:
        counts[name] += 1
    return [(name, counts[name]) for name, _ in parts]


def _p(p: Percentiles | None, attr: str) -> str:
    return UNKNOWN if p is None else fmt_ms(getattr(p, attr))


def render_chain(view: EndpointView, now: float, palette: Palette, width: int = 100) -> Text:
    """The Chain tab's text."""
    text = Text(no_wrap=True, overflow="ellipsis")
    chain = view.chain
    if chain is None:
        text.append("No server spans: start lpxtop with --traces-listen 127.0.0.1:4318 and point the server at it "
                    "(vLLM: --otlp-traces-endpoint http://127.0.0.1:4318/v1/traces; docs/traces.md).",
                    style=palette.muted)
        return text
    _head(text, chain, palette)
    text.append(f"\n  {'ms':<14}{'p50':>7} {'p95':>7} {'p99':>7}\n", style=palette.muted)
    for name, label, note in ROWS:
        p = getattr(chain, name)
        text.append(f"  {label:<14}")
        style = palette.accent if name == "outside_ms" and p is not None else ""
        text.append(f"{_p(p, 'p50'):>7} {_p(p, 'p95'):>7} {_p(p, 'p99'):>7}", style=style)
        if name == "to_server_ms" and p is None and chain.probes_joined:
            note = "not measured: the server is another host (two clocks)"
        text.append(f"   {truncate(note, max(0, width - 42))}\n", style=palette.muted)
    population = chain.all_requests
    text.append("\n  the server's whole population ", style="bold")
    if population.count:
        text.append(f"({population.count} requests it traced, the probes', a load's and other users')  ",
                    style=palette.muted)
        parts = [f"{label} p50 {_p(p, 'p50')} p95 {_p(p, 'p95')}" for label, p in
                 (("queue", population.queue_ms), ("prefill", population.prefill_ms), ("decode", population.decode_ms))]
        text.append("\n  " + " · ".join(parts) + "\n")
    else:
        text.append("no span of other requests in the window\n", style=palette.muted)
    text.append_text(_bars(chain, now, palette, width))
    return text


def _head(text: Text, chain: ChainSummary, palette: Palette) -> None:
    servers = sorted({r.server for r in chain.recent})
    text.append("server spans  ", style="bold")
    text.append(f"{chain.probes_joined} probes joined", style=palette.ok if chain.probes_joined else palette.muted)
    text.append(f" · {chain.probes_unjoined} unjoined", style=palette.warning if chain.probes_unjoined else palette.muted)
    if chain.probes_pending:
        text.append(f" · {chain.probes_pending} awaiting their span", style=palette.muted)
    if servers:
        text.append(f"   from {', '.join(servers)} (OTLP)", style=palette.muted)
    if chain.unjoined_reasons:
        text.append("\n  unjoined: " + ", ".join(f"{k.replace('_', ' ')} {n}" for k, n in
                                                 sorted(chain.unjoined_reasons.items())), style=palette.warning)
    if not chain.probes_joined and not chain.probes_unjoined:
        text.append("\n  no probe joined yet: spans come seconds after each request (vLLM batches them)",
                    style=palette.muted)


def _bars(chain: ChainSummary, now: float, palette: Palette, width: int) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    rows = [(r, parts) for r in reversed(chain.recent) if (parts := ttft_parts(r)) is not None][:MAX_BARS]
    text.append("\n  recent probes, newest first: their TTFT as\n  ", style="bold")
    styles = _part_styles(palette)
    measured = any(r.to_server_ms is not None for r, _ in rows)
    for name, glyph in PARTS:
        if name == "to server" and not measured:
            continue
        label = ("outside" if not measured else "way back") if name == "back" else name
        text.append(f"{glyph} ", style=styles[name])
        text.append(f"{label}  ", style=palette.muted)
    text.append("\n")
    if not rows:
        text.append("  no joined probe with its queue, prefill and TTFT yet\n", style=palette.muted)
        return text
    bar = max(MIN_BAR, width - 2 - LABEL - 10)
    longest = max(r.client_ttft_ms or 0.0 for r, _ in rows)
    for r, parts in rows:
        text.append(f"  {fmt_ago(r.wall_time, now):>{LABEL - 1}} ", style=palette.muted)
        share = (r.client_ttft_ms or 0.0) / longest if longest > 0 else 0.0
        for (name, count), (_, glyph) in zip(_cells(parts, sum(ms for _, ms in parts), round(bar * share)), PARTS):
            text.append(glyph * count, style=styles[name])
        text.append(f" {fmt_ms(r.client_ttft_ms)} ms\n")
    return text


class ChainPanel(Static):
    """The Chain tab's content; redrawn when the endpoint's chain or the width changed."""

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self._key: tuple | None = None

    def show(self, view: EndpointView, now: float, palette: Palette, force: bool = False) -> None:
        width = self.content_size.width or self.size.width or 100
        key = (view.chain, int(now), id(palette), width)
        if key == self._key and not force:
            return
        self._key = key
        self.update(render_chain(view, now, palette, width))
