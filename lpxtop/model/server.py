"""The server's own view of itself, normalized across inference servers (owned by engine/servers.py)."""

from __future__ import annotations

from dataclasses import dataclass

SERVER_KINDS = ("vllm", "sglang", "tgi", "llamacpp", "triton", "lmdeploy", "ollama", "openai", "unknown")


@dataclass(frozen=True)
class ServerMetrics:
    """One scrape of a server's metrics, turned into rates and windowed quantiles.

    None means the server does not expose that value (shown as `--`, never 0).
    `status` is "ok", or a one-line reason why there are no metrics ("no /metrics: HTTP 501 ...").
    """

    kind: str = "unknown"
    status: str = "ok"
    requests_running: float | None = None
    requests_waiting: float | None = None
    kv_cache_usage: float | None = None  # 0..1
    preemptions_total: float | None = None

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "status": self.status,
            "requests_running": self.requests_running,
            "requests_waiting": self.requests_waiting,
            "kv_cache_usage": self.kv_cache_usage,
            "preemptions_total": self.preemptions_total,
        }
