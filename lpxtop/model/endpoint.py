"""What lpxtop knows about one endpoint before probing it."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode, urlsplit

from lpxtop.textsafe import register_credential, register_secret

DEFAULT_PROMPT = "Write one short sentence about the sea."
# APIs of agent platforms: one request per agent step, the platform runs the model calls and tools itself
# (lpxtop/engine/agent/dify.py, difyworkflow.py, coze.py). Probed by agent steps only.
PLATFORM_APIS = ("dify", "dify-workflow", "coze")
# Query parameters whose value is a credential (Gemini's `key=`, signed URLs' `sig=`).
SECRET_PARAM = re.compile(r"(?i)(^|[-_])(key|token|secret|sig|signature|password|auth)$")
# Configured headers whose values are not credentials: every other header's value is registered as a secret.
PLAIN_HEADERS = frozenset(
    ("accept", "accept-encoding", "accept-language", "cache-control", "connection", "content-type", "user-agent")
)


@dataclass(frozen=True)
class EndpointConfig:
    """One OpenAI-compatible endpoint to probe.

    `url` is the API base, ending in `/v1` (``http://127.0.0.1:8000/v1``), with the query that every
    request carries when there is one (Azure's ``?api-version=...``). Of the API key, the fields hold only
    the name of the environment variable that holds it: the key is read once, as the configuration is built
    (`__post_init__`), into `sent_headers`, which no field, repr, comparison, JSON, export or recording holds.
    """

    name: str
    url: str
    model: str | None = None
    # "chat" -> /chat/completions, "completions" -> /completions; agent platforms (PLATFORM_APIS): "dify" -> a
    # Dify app's /chat-messages, "dify-workflow" -> a Dify workflow's /workflows/run, "coze" -> a Coze bot's /v3/chat
    api: str = "chat"
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
    # The agent-step probe (lpxtop/engine/agent): "chat" and/or "agent"; a Dify app (api "dify") is agent only.
    probes: tuple[str, ...] = ("chat",)
    tool_choice: str = "required"  # "required", "auto", or the name of one tool
    tools_file: str | None = None  # JSON tools (and prompt, results); default: a small built-in set
    tool_latency_s: float = 0.0  # how long the agent step's tool takes to "run"
    chain_steps: int = 5  # steps in the chain whose budget is shown
    # Extra top-level fields of the request body, e.g. (("ignore_eos", True),) so a load test's output
    # length is fixed on servers that honour it (vLLM, llama.cpp). Values are JSON values.
    extra_body: tuple[tuple[str, object], ...] = ()
    bot_id: str | None = None  # a Coze bot (api "coze")
    # A Dify workflow's `inputs` (api "dify-workflow"): its Start node's variables. Values are JSON values.
    inputs: tuple[tuple[str, object], ...] = ()

    def __post_init__(self) -> None:
        sent, key_set = _resolve_credentials(self.api_key_env, self.headers)
        object.__setattr__(self, "_sent_headers", sent)
        object.__setattr__(self, "_api_key_set", key_set)

    @property
    def sent_headers(self) -> dict[str, str]:
        """The headers every request to the endpoint carries: the configured ones, and `Authorization: Bearer`
        with the key from `api_key_env` (which wins over a configured one). Never to be shown or stored."""
        return dict(self._sent_headers)  # type: ignore[attr-defined]

    @property
    def api_key_missing(self) -> bool:
        """`api_key_env` names a variable that was unset or empty when the configuration was built."""
        return self.api_key_env is not None and not self._api_key_set  # type: ignore[attr-defined]

    @property
    def is_platform(self) -> bool:
        """An agent platform (a Dify app or workflow, a Coze bot): one request per step, no /v1/models."""
        return self.api in PLATFORM_APIS

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

    def api_url(self, path: str) -> str:
        """The URL of an API route (``/chat/completions``, ``/models``) under `url`, with its query."""
        base, _, query = self.url.partition("?")
        return base.rstrip("/") + path + (f"?{query}" if query else "")

    @property
    def display_url(self) -> str:
        """`url` to show: the values of credential-like query parameters (``key=``, ``sig=``) masked."""
        base, _, query = self.url.partition("?")
        if not query:
            return self.url
        pairs = [(k, "***" if SECRET_PARAM.search(k) else v) for k, v in parse_qsl(query, keep_blank_values=True)]
        return f"{base}?{urlencode(pairs, safe='*')}"

    @property
    def effective_metrics_url(self) -> str:
        return self.metrics_url or f"{self.origin}/metrics"

    def to_json(self) -> dict:
        """Settings safe to show or export: the API key is never included, only its variable's name."""
        return {
            "name": self.name,
            "url": self.display_url,
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
            "probes": list(self.probes),
            **({"tool_choice": self.tool_choice, "tools_file": self.tools_file, "tool_latency_s": self.tool_latency_s,
                "chain_steps": self.chain_steps} if "agent" in self.probes else {}),
            **({"bot_id": self.bot_id} if self.api == "coze" else {}),
            # the inputs' names only: their values are the user's data
            **({"inputs": sorted(k for k, _ in self.inputs)} if self.api == "dify-workflow" else {}),
        }


def _resolve_credentials(
    api_key_env: str | None, headers: tuple[tuple[str, str], ...]
) -> tuple[tuple[tuple[str, str], ...], bool]:
    """The headers an endpoint sends and whether its key was found: the one place an endpoint's credentials are
    read (the key from the environment) and registered with `textsafe`, whole and after a scheme such as
    "Bearer" on its own, so that a server that echoes the request back cannot get them shown or stored."""
    if not api_key_env and not headers:
        return (), False
    for name, value in headers:
        if name.lower() not in PLAIN_HEADERS:
            register_credential(value)
    key = os.environ.get(api_key_env) if api_key_env else None
    if not key:
        return headers, False
    register_secret(key)
    sent = dict(headers)
    sent["Authorization"] = f"Bearer {key}"  # the named key wins over a stray configured header
    return tuple(sent.items()), True
