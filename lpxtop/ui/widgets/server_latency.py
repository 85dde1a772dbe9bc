"""The server's own latency figures for the detail screen: exact means, quantiles as the estimates they
are (`~` and the range the true value is in), and the time outside the engine with how it was found."""

from __future__ import annotations

from rich.text import Text

from lpxtop.humanize import UNKNOWN, fmt_ms, fmt_signed_ms
from lpxtop.model.server import ServerLatency
from lpxtop.model.snapshot import EndpointView
from lpxtop.ui.palette import Palette

# (ServerMetrics field, label, what it times), in the order a request goes through them
ROLES = (
    ("server_ttft_ms", "TTFT", "arrival → first token"),
    ("server_queue_ms", "queue", "waiting for a slot"),
    ("server_prefill_ms", "prefill", "scheduled → first token"),
    ("server_decode_ms", "decode", "first token → last"),
    ("server_inference_ms", "inference", "scheduled → last"),
    ("server_e2e_ms", "E2E", "arrival → last token"),
    ("server_itl_ms", "ITL", "each token gap"),
    ("server_tpot_ms", "TPOT", "per request, per token"),
)
METHOD_TEXT = {
    "joined_spans": "exact: each probe's TTFT minus the server's TTFT in its own span (--traces-listen)",
    "probe_only": "exact: the probes were the server's only requests between two reads of its histogram",
    "window_means": "estimate: the probes' mean TTFT minus the server's exact mean, its TTFTs all in a narrow range",
}


def ms_text(value: float | None) -> str:
    """fmt_ms, with two significant digits under 1 ms (an idle queue's 0.017 ms is not 0.0)."""
    if value is None or value >= 1.0:
        return fmt_ms(value)
    return "0" if value <= 0 else f"{value:.2g}"


def estimate_text(value: float | None, span: tuple[float, float | None] | None) -> str:
    """`~12 (10–20)`: an estimated quantile and the range it is certainly in (`…` when unbounded above)."""
    if value is None:
        return UNKNOWN
    if span is None:
        return "~" + ms_text(value)
    low, high = span
    return f"~{ms_text(value)} ({ms_text(low)}–{ms_text(high) if high is not None else '…'})"


def latency_rows(view: EndpointView) -> list[tuple[str, str, str, str, str, str]]:
    """(figure, count, mean, p50, p99, max at most) for each histogram the server has."""
    rows = []
    for field, label, _ in ROLES:
        latency: ServerLatency | None = getattr(view.server, field, None) if view.server is not None else None
        if latency is None:
            continue
        rows.append((
            label,
            f"{latency.count:.0f}",
            ms_text(latency.mean),
            estimate_text(latency.p50, latency.p50_range),
            estimate_text(latency.p99, latency.p99_range),
            UNKNOWN if latency.max_at_most is None else "≤" + ms_text(latency.max_at_most),
        ))
    return rows


def gap_lines(view: EndpointView) -> tuple[str, str]:
    """The time outside the engine and how it was found, or why there is none."""
    gap = view.ttft_gap
    if gap.value_ms is None:
        return f"time outside the engine {UNKNOWN}", gap.reason or ""
    if gap.estimate:
        figure = f"time outside the engine ~{fmt_signed_ms(gap.value_ms)} ms " \
                 f"(certainly {fmt_signed_ms(gap.low_ms)}…{fmt_signed_ms(gap.high_ms)} ms)"
    else:
        figure = f"time outside the engine {fmt_signed_ms(gap.value_ms)} ms"
    probes = f"{gap.probes} probe{'s' if gap.probes != 1 else ''}"
    return figure, f"{METHOD_TEXT.get(gap.method or '', gap.method or '')} ({probes})"


def server_latency_text(view: EndpointView, palette: Palette) -> Text:
    """The Server tab: a small table of the server's latency histograms over its window, then the gap."""
    text = Text(no_wrap=True, overflow="ellipsis")
    server = view.server
    if server is None:
        text.append("no server metrics for this endpoint (server_kind openai, or scraping is off)", style=palette.muted)
        return text
    window = f" over {server.window_s:.0f} s" if server.window_s else ""
    text.append(f"{server.kind}'s own latency{window} (ms)", style="bold")
    text.append("  mean: exact (Δsum/Δcount) · ~: estimated from buckets (the range it is certainly in)\n",
                style=palette.muted)
    rows = latency_rows(view)
    if not server.ok:
        text.append(server.status + "\n", style=palette.warning)
    elif not rows:
        text.append(f"{server.kind} exposes no latency histograms\n", style=palette.muted)
    else:
        header = ("", "count", "mean", "p50", "p99", "max")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        for i, row in enumerate([header, *rows]):
            cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
            text.append("  ".join(cells).rstrip() + "\n", style=palette.muted if i == 0 else "")
    figure, how = gap_lines(view)
    text.append("\n")
    text.append(figure, style=palette.accent if view.ttft_gap.value_ms is not None else palette.muted)
    text.append("\n  " + how + "\n", style=palette.muted)
    for note in server.notes:
        text.append(f"note: {note}\n", style=palette.warning)
    return text
