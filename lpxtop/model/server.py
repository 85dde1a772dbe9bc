"""The server's own view of itself, normalized across inference servers (owned by engine/servers.py)."""

from __future__ import annotations

from dataclasses import dataclass

SERVER_KINDS = ("vllm", "sglang", "tgi", "llamacpp", "triton", "lmdeploy", "ollama", "openai", "unknown")


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


@dataclass(frozen=True)
class ServerLatency:
    """Server-side latency quantiles in ms, from histogram bucket deltas over the window.

    Like Prometheus' ``histogram_quantile``: linear interpolation inside the bucket, so the
    resolution is the server's bucket layout, not the true value. `count` is the number of
    observations in the window.
    """

    p50: float | None
    p99: float | None
    count: float

    def to_json(self) -> dict:
        return {"p50": _round(self.p50, 3), "p99": _round(self.p99, 3), "count": self.count}


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
            "requests_running": self.requests_running,
            "requests_waiting": self.requests_waiting,
            "kv_cache_usage": _round(self.kv_cache_usage),
            "preemptions_total": self.preemptions_total,
            "prompt_tokens_per_s": _round(self.prompt_tokens_per_s, 2),
            "generation_tokens_per_s": _round(self.generation_tokens_per_s, 2),
            "vram_bytes": self.vram_bytes,
            "size_bytes": self.size_bytes,
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

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict:
        def lat(x: ServerLatency | None) -> dict | None:
            return x.to_json() if x is not None else None

        return {
            "kind": self.kind,
            "status": self.status,
            "requests_running": self.requests_running,
            "requests_waiting": self.requests_waiting,
            "kv_cache_usage": _round(self.kv_cache_usage),
            "preemptions_total": self.preemptions_total,
            "variant": self.variant,
            "models": list(self.models),
            "requests_swapped": self.requests_swapped,
            "preemptions_per_s": _round(self.preemptions_per_s, 3),
            "prompt_tokens_per_s": _round(self.prompt_tokens_per_s, 2),
            "generation_tokens_per_s": _round(self.generation_tokens_per_s, 2),
            "finished_requests_per_s": _round(self.finished_requests_per_s, 3),
            "server_ttft_ms": lat(self.server_ttft_ms),
            "server_itl_ms": lat(self.server_itl_ms),
            "server_tpot_ms": lat(self.server_tpot_ms),
            "server_e2e_ms": lat(self.server_e2e_ms),
            "server_queue_ms": lat(self.server_queue_ms),
            "prefix_cache_hit_rate": _round(self.prefix_cache_hit_rate),
            "spec_decode_acceptance_rate": _round(self.spec_decode_acceptance_rate),
            "outcomes": dict(self.outcomes),
            "window_s": _round(self.window_s, 1),
            "restarted": self.restarted,
            "restart_count": self.restart_count,
            "last_restart_time": self.last_restart_time,
            "models_loaded": self.models_loaded,
            "vram_bytes": self.vram_bytes,
            "per_model": [m.to_json() for m in self.per_model],
            "scraped_at": self.scraped_at,
            "scrape_ms": _round(self.scrape_ms, 1),
        }
