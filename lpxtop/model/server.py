"""The server's own view of itself, normalized across inference servers (owned by engine/scrape/servers.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

SERVER_KINDS = ("vllm", "sglang", "tgi", "llamacpp", "triton", "lmdeploy", "ollama", "openai", "unknown")


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def _round(x: float | None, digits: int = 4) -> float | None:
    # JSON has no Infinity or NaN: a value that is not finite is unknown (None)
    return None if x is None or not math.isfinite(x) else round(x, digits)


@dataclass(frozen=True)
class ServerLatency:
    """Server-side latency over the window, in ms, from the server's histogram (bucket and sum deltas).

    `mean` is exact: the growth of the histogram's sum over the growth of its count (Δsum/Δcount), the
    same figure `vllm bench serve`'s mean compares with. `p50`/`p99` are estimates: the bucket layout
    only says which bucket an observation fell in. Each is Prometheus' ``histogram_quantile`` clamped
    into `p50_range`/`p99_range`, every value the true quantile can have given the buckets and the
    sum (see server_histograms.estimate_quantile). `max_at_most` bounds the slowest observation (None:
    some fell in the ``+Inf`` bucket and the sum does not bound them). `count` is the number of
    observations in the window.
    """

    p50: float | None
    p99: float | None
    count: float
    mean: float | None = None
    p50_range: tuple[float, float | None] | None = None
    p99_range: tuple[float, float | None] | None = None
    min_at_least: float | None = None
    max_at_most: float | None = None

    def to_json(self) -> dict:
        def span(r: tuple[float, float | None] | None) -> list | None:
            return None if r is None else [_round(r[0], 3), _round(r[1], 3)]

        return {
            "p50": _round(self.p50, 3),
            "p99": _round(self.p99, 3),
            "count": self.count,
            "mean": _round(self.mean, 3),
            "estimate": True,  # p50/p99 are estimates within their ranges; mean and count are exact
            "p50_range": span(self.p50_range),
            "p99_range": span(self.p99_range),
            "max_at_most": _round(self.max_at_most, 3),
        }


@dataclass(frozen=True)
class TtftInterval:
    """The server's TTFT histogram between two of its reads: what the client/engine gap pairs probes with.

    `start_ns` is when the earlier read's answer arrived and `end_ns` when the later one was asked for
    (``time.perf_counter_ns()``, the clock probes are stamped with), so every request the server
    observed in between started after `start_ns` or was already running. `count`/`sum_ms` are the
    histogram's growth (None when the layout changed or the sum is missing).
    """

    start_ns: int
    end_ns: int
    count: float | None
    sum_ms: float | None


@dataclass(frozen=True)
class ModelServerMetrics:
    """One model's share of a server that serves several (labels ``model_name``/``model``).

    Engines and tensor-parallel ranks of the same model are summed for counters and for the
    running/waiting gauges; `kv_cache_usage` is the fullest engine's (max), since that engine
    is the one that starts preempting first.
    """

    model: str
    engines: int = 1  # label sets (engine / tp_rank / dp_rank ...) seen for this model
    requests_running: float | None = None
    requests_waiting: float | None = None
    kv_cache_usage: float | None = None
    preemptions_total: float | None = None
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    vram_bytes: float | None = None  # Ollama: size_vram of the loaded model
    size_bytes: float | None = None  # Ollama: whole size of the loaded model (VRAM + RAM)

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "engines": self.engines,
            "requests_running": _finite(self.requests_running),
            "requests_waiting": _finite(self.requests_waiting),
            "kv_cache_usage": _round(self.kv_cache_usage),
            "preemptions_total": _finite(self.preemptions_total),
            "prompt_tokens_per_s": _round(self.prompt_tokens_per_s, 2),
            "generation_tokens_per_s": _round(self.generation_tokens_per_s, 2),
            "vram_bytes": _finite(self.vram_bytes),
            "size_bytes": _finite(self.size_bytes),
        }


@dataclass(frozen=True)
class ServerMetrics:
    """One scrape of a server's metrics, turned into rates and windowed quantiles.

    None means the server does not expose that value (shown as `--`, never 0).
    `status` is "ok", or a one-line reason why there are no metrics ("no /metrics: HTTP 501 ...").
    Rates (`*_per_s`) come from counter deltas between the last two scrapes; quantiles, hit rates
    and outcomes from deltas over the scraper's window. The first scrape has no delta, so those
    are None until the second.
    """

    kind: str = "unknown"
    status: str = "ok"
    requests_running: float | None = None
    requests_waiting: float | None = None
    kv_cache_usage: float | None = None  # 0..1
    preemptions_total: float | None = None
    variant: str | None = None  # e.g. "v1" / "v0" for vLLM engines
    models: tuple[str, ...] = ()
    requests_swapped: float | None = None  # preempted right now (vLLM V0 swapped, SGLang retracted)
    preemptions_per_s: float | None = None
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    finished_requests_per_s: float | None = None
    server_ttft_ms: ServerLatency | None = None
    server_itl_ms: ServerLatency | None = None
    server_tpot_ms: ServerLatency | None = None
    server_e2e_ms: ServerLatency | None = None
    server_queue_ms: ServerLatency | None = None
    server_prefill_ms: ServerLatency | None = None  # scheduled → first token (vLLM)
    server_decode_ms: ServerLatency | None = None  # first token → last (vLLM)
    server_inference_ms: ServerLatency | None = None  # scheduled → last (vLLM, TGI)
    prefix_cache_hit_rate: float | None = None  # 0..1
    spec_decode_acceptance_rate: float | None = None  # 0..1
    outcomes: tuple[tuple[str, float], ...] = ()  # finished requests by reason over the window
    window_s: float | None = None  # span the windowed values cover (None on the first scrape)
    restarted: bool = False  # a counter went down within the window: the server restarted
    restart_count: int = 0
    last_restart_time: float | None = None  # wall clock (time.time()) of the last restart seen
    models_loaded: int | None = None  # Ollama: models in memory (/api/ps)
    vram_bytes: float | None = None  # Ollama: sum of size_vram
    per_model: tuple[ModelServerMetrics, ...] = ()
    scraped_at: float | None = None  # wall clock of this scrape
    scrape_ms: float | None = None  # how long the HTTP request took
    # What lpxtop set aside from this page and why ("vllm:num_requests_waiting is +Inf: shown as --")
    notes: tuple[str, ...] = ()
    # The TTFT histogram read by read over the window, oldest first (for the client/engine gap)
    ttft_intervals: tuple[TtftInterval, ...] = ()
    # The generated-token counter as read in this scrape (vllm:generation_tokens_total, summed over its
    # series): energy per output token divides the GPUs' energy by its growth (engine/gpu/accel/energy.py)
    generation_tokens_total: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self, ttft_gap: dict | None = None) -> dict:
        """JSON form; `ttft_gap` (TtftGap.to_json(), computed with the probes) goes in as "ttft_gap_ms"."""

        def lat(x: ServerLatency | None) -> dict | None:
            return x.to_json() if x is not None else None

        out = {
            "kind": self.kind,
            "status": self.status,
            "requests_running": _finite(self.requests_running),
            "requests_waiting": _finite(self.requests_waiting),
            "kv_cache_usage": _round(self.kv_cache_usage),
            "preemptions_total": _finite(self.preemptions_total),
            "variant": self.variant,
            "models": list(self.models),
            "requests_swapped": _finite(self.requests_swapped),
            "preemptions_per_s": _round(self.preemptions_per_s, 3),
            "prompt_tokens_per_s": _round(self.prompt_tokens_per_s, 2),
            "generation_tokens_per_s": _round(self.generation_tokens_per_s, 2),
            "finished_requests_per_s": _round(self.finished_requests_per_s, 3),
            "server_ttft_ms": lat(self.server_ttft_ms),
            "server_itl_ms": lat(self.server_itl_ms),
            "server_tpot_ms": lat(self.server_tpot_ms),
            "server_e2e_ms": lat(self.server_e2e_ms),
            "server_queue_ms": lat(self.server_queue_ms),
            "server_prefill_ms": lat(self.server_prefill_ms),
            "server_decode_ms": lat(self.server_decode_ms),
            "server_inference_ms": lat(self.server_inference_ms),
            "prefix_cache_hit_rate": _round(self.prefix_cache_hit_rate),
            "spec_decode_acceptance_rate": _round(self.spec_decode_acceptance_rate),
            "outcomes": dict(self.outcomes),
            "window_s": _round(self.window_s, 1),
            "restarted": self.restarted,
            "restart_count": self.restart_count,
            "last_restart_time": _finite(self.last_restart_time),
            "models_loaded": self.models_loaded,
            "vram_bytes": _finite(self.vram_bytes),
            "per_model": [m.to_json() for m in self.per_model],
            "scraped_at": _finite(self.scraped_at),
            "scrape_ms": _round(self.scrape_ms, 1),
            "notes": list(self.notes),
            "generation_tokens_total": _finite(self.generation_tokens_total),
        }
        if ttft_gap is not None:
            out["ttft_gap_ms"] = ttft_gap
        return out
