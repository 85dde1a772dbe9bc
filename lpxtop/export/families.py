"""Every family the exporter serves that is read off an endpoint's view: a new figure is one line here.

Names follow Prometheus' conventions: `lpxtop_` first, base units (seconds, bytes, ratios 0..1),
`_total` for counters. Each per-endpoint family has the labels `host`, `endpoint`, `model`,
`server_kind` (state.ENDPOINT_LABELS), and never one per request or per error message.

A value of None leaves the series out for that scrape (the server does not expose the figure, or
it is not known yet): absent, never a made-up 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from lpxtop.model.server_gap import METHODS as GAP_METHODS
from lpxtop.model.snapshot import EndpointView


@dataclass(frozen=True)
class EndpointFigure:
    """One per-endpoint gauge or counter read from the snapshot's `EndpointView`."""

    name: str
    help: str
    value: Callable[[EndpointView], float | None]
    counter: bool = False  # a counter the server keeps (it may reset when the server restarts)


def _server(attr: str) -> Callable[[EndpointView], float | None]:
    def value(view: EndpointView) -> float | None:
        server = view.server
        if server is None or not server.ok:
            return None
        x = getattr(server, attr, None)
        return None if x is None else float(x)

    return value


def _server_latency(attr: str, field: str) -> Callable[[EndpointView], float | None]:
    def value(view: EndpointView) -> float | None:
        server = view.server
        latency = getattr(server, attr, None) if server is not None and server.ok else None
        x = getattr(latency, field, None) if latency is not None else None
        return None if x is None else x / 1000.0

    return value


@dataclass(frozen=True)
class LabelledEndpointFigure:
    """A per-endpoint gauge with one more label, whose values come from a fixed set (never from outside)."""

    name: str
    help: str
    label: str
    label_values: tuple[str, ...]  # every value the label may take
    values: Callable[[EndpointView], Iterable[tuple[str, float]]]


def ttft_gap_seconds(view: EndpointView) -> list[tuple[str, float]]:
    """The dashboard's Gap: the probes' TTFT minus the server's own for the same requests, with how it was
    found (model/server_gap.py: `probe_only` exact, `window_means` a bounded estimate); nothing when
    lpxtop shows nothing (no comparable quantities: the dashboard says why)."""
    gap = view.ttft_gap
    if gap.value_ms is None or gap.method not in GAP_METHODS:
        return []
    return [(gap.method, gap.value_ms / 1000.0)]


def _up(view: EndpointView) -> float:
    return 1.0 if view.status in ("up", "degraded") else 0.0


def _scrape_ok(view: EndpointView) -> float | None:
    return None if view.server is None else float(view.server.ok)


ENDPOINT_FIGURES: tuple[EndpointFigure, ...] = (
    EndpointFigure("lpxtop_endpoint_up", "1 while the endpoint answers probes (status up or degraded), "
                   "0 when down or before its first probe finished.", _up),
    EndpointFigure("lpxtop_probe_window_error_ratio", "Failed share of the probes in lpxtop's rolling window "
                   "(the dashboard's Err%).", lambda v: v.error_rate),
    EndpointFigure("lpxtop_server_metrics_up", "1 when the last scrape of the server's own metrics "
                   "(/metrics, or Ollama's /api/ps) worked.", _scrape_ok),
    EndpointFigure("lpxtop_server_requests_waiting", "Requests waiting in the server's queue, as lpxtop "
                   "normalized it (vLLM num_requests_waiting, SGLang num_queue_reqs, TGI queue_size, ...).",
                   _server("requests_waiting")),
    EndpointFigure("lpxtop_server_requests_running", "Requests the server is running now (vLLM "
                   "num_requests_running, SGLang num_running_reqs, TGI batch_current_size, ...).",
                   _server("requests_running")),
    EndpointFigure("lpxtop_server_kv_cache_usage_ratio", "KV cache in use, 0..1, as the server reports it.",
                   _server("kv_cache_usage")),
    EndpointFigure("lpxtop_server_prompt_tokens_per_second", "Prompt tokens the server processed per second "
                   "(its counter's rate between lpxtop's last two scrapes).", _server("prompt_tokens_per_s")),
    EndpointFigure("lpxtop_server_generation_tokens_per_second", "Tokens the server generated per second "
                   "(its counter's rate between lpxtop's last two scrapes).", _server("generation_tokens_per_s")),
    EndpointFigure("lpxtop_server_ttft_p50_seconds", "The server's own TTFT median over the window, from its "
                   "histogram's buckets (within one bucket of the true value).", _server_latency("server_ttft_ms", "p50")),
    EndpointFigure("lpxtop_server_ttft_p99_seconds", "The server's own TTFT p99 over the window, from its "
                   "histogram's buckets.", _server_latency("server_ttft_ms", "p99")),
    # Exact: the growth of the server's histogram sum over the growth of its count in the window (Δsum/Δcount)
    *(EndpointFigure(f"lpxtop_server_{name}_mean_seconds", f"The server's own mean {what} over the window: "
                     "exact (the growth of its histogram's sum over the growth of its count), unlike the "
                     "bucket-bound quantiles.", _server_latency(attr, "mean"))
      for name, attr, what in (
          ("ttft", "server_ttft_ms", "time to first token"),
          ("queue_time", "server_queue_ms", "time requests waited in its queue"),
          ("prefill_time", "server_prefill_ms", "prefill time (scheduled to first token)"),
          ("decode_time", "server_decode_ms", "decode time (first token to last)"),
          ("itl", "server_itl_ms", "inter-token latency"),
          ("tpot", "server_tpot_ms", "time per output token"),
          ("e2e", "server_e2e_ms", "end-to-end request latency"),
      )),
    EndpointFigure("lpxtop_server_preemptions", "Preemptions the server counted (its own counter: it resets "
                   "when the server restarts).", _server("preemptions_total"), counter=True),
    EndpointFigure("lpxtop_endpoint_energy_joules_per_output_token", "Energy of the endpoint's GPUs per output "
                   "token over the last minute: the growth of their energy counters over the growth of the "
                   "server's generated-token counter in the same interval (GPUs serving several endpoints: over "
                   "all their tokens). Absent when either counter is missing or no token was generated.",
                   lambda v: v.energy.joules_per_output_token if v.energy is not None else None),
)

LABELLED_FIGURES: tuple[LabelledEndpointFigure, ...] = (
    LabelledEndpointFigure(
        "lpxtop_ttft_gap_seconds", "Time outside the engine: the probes' TTFT minus the server's own TTFT for "
        "the same requests (network, HTTP front end, queueing before the engine's clock). `method`: joined_spans "
        "(exact: each probe against its own server span, --traces-listen), probe_only "
        "(exact: the server counted just the probes' first tokens between two reads) or window_means (an "
        "estimate from exact means, when the server's TTFTs lay in a narrow range). Absent when the two do not "
        "compare (the server queued other requests, no TTFT histogram...).",
        "method", GAP_METHODS, ttft_gap_seconds),
)

# The window's percentiles as the dashboard shows them (exact, linear interpolation over lpxtop's
# rolling window): for one endpoint's panel. Across endpoints use the histograms instead.
# The label is `percentile` (p50, p95, p99): `quantile` belongs to summaries, and these are gauges.
WINDOW_PERCENTILES: tuple[str, ...] = ("p50", "p95", "p99")
WINDOW_MEASURES: tuple[tuple[str, str, str], ...] = (
    ("ttft", "ttft_ms", "time to first token"),
    ("itl", "itl_ms", "inter-token latency"),
    ("tpot", "tpot_ms", "time per output token"),
    ("e2e", "e2e_ms", "end-to-end latency"),
)

HISTOGRAM_HELP = {
    "ttft": "Time to first token of lpxtop's probes: the first event carrying a token minus the moment "
            "the request was sent (as vllm bench serve).",
    "itl": "Gaps between consecutive token-bearing events of lpxtop's probes, every gap pooled.",
    "tpot": "Time per output token of each probe: (E2E - TTFT) / (output tokens - 1).",
    "e2e": "End-to-end latency of lpxtop's probes: the last token-bearing event minus the send.",
    "agent_step": "One agent step of lpxtop's agent probe (--probe agent): call 1's send to the answer's last "
                  "token, the tool's time included (an agent platform: the request to its answer's last token; a "
                  "Dify workflow: to workflow_finished).",
    "agent_tool_call": "Time to tool call of lpxtop's agent steps: call 1's send to the last fragment of the "
                       "tool call's arguments (an agent platform: to its tool decision).",
    "chain_queue": "Time lpxtop's probes waited in the server's queue, from each probe's own server span "
                   "(--traces-listen; vLLM's gen_ai.latency.time_in_queue).",
    "chain_prefill": "The server's prefill of lpxtop's probes, from each probe's own server span (--traces-listen).",
    "chain_outside": "Time outside the server's TTFT clock for each of lpxtop's probes: its TTFT minus the TTFT in "
                     "its own server span (network, HTTP front end, tokenization, streaming; --traces-listen).",
}
