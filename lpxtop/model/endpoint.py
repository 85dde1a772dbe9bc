"""What lpxtop knows about one endpoint before probing it."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

DEFAULT_PROMPT = "Write one short sentence about the sea."


@dataclass(frozen=True)
class EndpointConfig:
    """One OpenAI-compatible endpoint to probe.

    `url` is the API base, ending in `/v1` (``http://127.0.0.1:8000/v1``). The API key itself is
    never stored here: only the name of the environment variable that holds it.
    """

    name: str
    url: str
    model: str | None = None
    api: str = "chat"  # "chat" -> /chat/completions, "completions" -> /completions
    api_key_env: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    interval_s: float = 2.0
    # 16: about what a model writes for the default prompt (one short sentence), 15 token gaps a probe
    # (2,250 in a full 5-minute window). Each token is a wake-up of the probing thread, so this and
    # `interval_s` set most of lpxtop's own CPU; 32 costs ~0.3 % more of a core with 4 endpoints.
    max_tokens: int = 16
    prompt: str = DEFAULT_PROMPT
    random_prefix: bool = True
    timeout_s: float = 30.0  # whole request
    connect_timeout_s: float = 5.0
    first_token_timeout_s: float = 15.0
    metrics_url: str | None = None  # default: <scheme>://<host:port>/metrics
    metrics_interval_s: float = 2.0
    server_kind: str | None = None  # force a server kind instead of detecting it
    discovered: bool = False
    extra: tuple[tuple[str, str], ...] = field(default=())
    # Extra top-level fields of the request body, e.g. (("ignore_eos", True),) so a load test's output
    # length is fixed on servers that honour it (vLLM, llama.cpp). Values are JSON values.
    extra_body: tuple[tuple[str, object], ...] = ()

    @property
    def origin(self) -> str:
        """``scheme://host:port`` of the endpoint, without the API path."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""

    @property
    def port(self) -> int:
        parts = urlsplit(self.url)
        if parts.port is not None:
            return parts.port
        return 443 if parts.scheme == "https" else 80

    @property
    def effective_metrics_url(self) -> str:
        return self.metrics_url or f"{self.origin}/metrics"

    def to_json(self) -> dict:
        """Settings safe to show or export: the API key is never included, only its variable's name."""
        return {
            "name": self.name,
            "url": self.url,
            "model": self.model,
            "api": self.api,
            "api_key_env": self.api_key_env,
            "headers": sorted(k for k, _ in self.headers),  # header values may hold secrets
            "interval_s": self.interval_s,
            "max_tokens": self.max_tokens,
            "random_prefix": self.random_prefix,
            "timeout_s": self.timeout_s,
            "connect_timeout_s": self.connect_timeout_s,
            "first_token_timeout_s": self.first_token_timeout_s,
            "metrics_url": self.effective_metrics_url,
            "discovered": self.discovered,
        }
