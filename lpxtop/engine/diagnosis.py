"""What a failed request means, and what to do about it: the one mapping from cause to message.

A probe, an agent call or `GET /models` that fails keeps its own error kind (`refused`, `tls`,
`http_401` …: engine/probe/errors.py classifies the transport's failure). This module writes the message that
goes with it, in the words a person acts on: nothing listens on HOST:PORT — is the server running?;
`https://` to a plain-HTTP server → use `http://`; 401/403 → the key, and how to give it
(`--api-key-env NAME`); a 404 on the API's paths → the base URL (OpenAI-compatible servers serve
`/v1`); a model the server does not serve → the ones it does. The message is written once, where the
failure becomes a Sample, so the dashboard's row and error line, the detail screen's Errors tab,
`once`'s table and JSON, the exporter and recordings all say the same.

The server's own words, when it sent any, are kept after the advice. Nothing here reads a key.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import urlsplit

from lpxtop.model.endpoint import EndpointConfig

MODELS_REQUEST = "GET /models"
MAX_LISTED_MODELS = 5
# OpenSSL's words when the other side answered a TLS handshake with plain HTTP (1.1: "wrong version number";
# 3.2+: "record layer failure"; "packet length too long", "http request" in others).
_PLAIN_HTTP_MARKERS = ("wrong version number", "wrong_version_number", "record layer failure", "packet length too long",
                       "http request", "http_request", "unknown protocol")
_SERVER_WORDS = re.compile(r"^HTTP \d{3}(?: on [A-Z]+ \S+)?: ?(.*)$", re.DOTALL)
_MODEL_WORDS = re.compile(r"\bmodel", re.IGNORECASE)


def explain(
    kind: str,
    message: str,
    endpoint: EndpointConfig,
    *,
    status: int | None = None,
    request: str | None = None,
    model: str | None = None,
) -> str:
    """The message for a failure of `kind` at `endpoint`, with what to do; `message` as the classifier
    wrote it (returned unchanged when this module knows no better).

    `request`: MODELS_REQUEST for `GET /models`, None for the probe's own request. `model`: the model the
    request asked for, when known."""
    where = _host_port(endpoint.url)
    if kind == "refused" and message.startswith("connection refused") and "proxy" not in message.lower():
        return nothing_listens(where)
    if kind == "tls" and _scheme(endpoint.url) == "https" and any(m in message.lower() for m in _PLAIN_HTTP_MARKERS):
        plain = "http" + endpoint.url[len("https"):]
        return f"use {plain}: {where} answers plain HTTP, not TLS"
    if kind == "dns" and "proxy" not in message.lower():
        host = urlsplit(endpoint.url).hostname or where
        why = message.removeprefix("name lookup failed: ")
        return f"cannot find the host {host!r} ({why}): check the host name in the URL"
    if kind in ("http_401", "http_403"):
        return _needs_key(kind, message, endpoint, status)
    if kind == "http_404":
        said = server_words(message)
        if request is None and said is not None and _MODEL_WORDS.search(said):
            asked = model or endpoint.model
            name = f" {asked!r}" if asked else ""
            return f"the server has no model{name}: {said} (pass a model it serves with --model)"
        return _wrong_path(endpoint, request, said)
    return message


def nothing_listens(where: str) -> str:
    """The refused endpoint's message (the ports panel's `down` line says the same)."""
    return f"nothing listens on {where} — is the server running?"


def model_matches(expected: str, served: Sequence[str]) -> bool:
    """Whether the configured model is among the served ids.

    Lenient about what servers add on their side: case, Ollama's default ``:latest`` tag, and an
    organisation prefix (``meta-llama/Llama-3-8B`` serves ``Llama-3-8B``, and the other way round).
    """

    def forms(model: str) -> set[str]:
        m = model.strip().lower().removesuffix(":latest")
        return {m, m.rsplit("/", 1)[-1]}

    wanted = forms(expected)
    return any(wanted & forms(s) for s in served)


def model_not_served(model: str, served: Sequence[str]) -> str:
    """A model the server does not serve (a typo in --model, most often): the ones it does serve."""
    listed = ", ".join(served[:MAX_LISTED_MODELS]) + (f" and {len(served) - MAX_LISTED_MODELS} more"
                                                      if len(served) > MAX_LISTED_MODELS else "")
    return (f"the server does not serve model {model!r}; it serves {listed}: pass one with --model "
            "(or model in the config file)")


def no_model_listed(endpoint: EndpointConfig) -> str:
    """GET /models answered, with an empty list: the probe has no model to ask for."""
    return (f"GET {_path(endpoint.url)}/models listed no model: load one into the server, or name it with "
            "--model (or model in the config file)")


def server_words(message: str) -> str | None:
    """What the server itself said in an `HTTP nnn: …` message (None when the message is lpxtop's own)."""
    found = _SERVER_WORDS.match(message)
    return found.group(1).strip() if found else None


def _needs_key(kind: str, message: str, endpoint: EndpointConfig, status: int | None) -> str:
    code = status or int(kind[len("http_"):])
    said = server_words(message)
    tail = f" (the server said: {said})" if said else ""
    variable = endpoint.api_key_env
    if variable is None:
        return ("the server wants an API key: pass --api-key-env NAME, the environment variable that holds it "
                f"(or api_key_env in the config file){tail}")
    if endpoint.api_key_missing:
        return f"the server wants an API key, and ${variable} is not set (or empty): export it where lpxtop starts{tail}"
    if code == 401:
        return f"the server refused the key in ${variable}: check it{tail}"
    return f"the key in ${variable} is not allowed here (this endpoint, or this model){tail}"


def _wrong_path(endpoint: EndpointConfig, request: str | None, said: str | None) -> str:
    path = _path(endpoint.url)
    what = f"GET {path}/models" if request == MODELS_REQUEST else f"POST {path}{_api_route(endpoint)}"
    tail = f" (the server said: {said})" if said else ""
    origin = _origin(endpoint.url)
    if endpoint.api == "coze":
        return (f"POST {origin}{_coze_path(path)}/v3/chat: is this a Coze API host? (https://api.coze.com, "
                f"https://api.coze.cn or a Coze Studio host; lpxtop adds /v3/chat){tail}")
    if endpoint.is_platform:
        return (f"{what}: is this Dify's service API? (its base URL ends in /v1, e.g. https://api.dify.ai/v1; "
                f"--api dify for an app, dify-workflow for a workflow){tail}")
    if path.rstrip("/") != "/v1":
        return (f"{what}: try {origin}/v1 — the base URL is probably wrong (OpenAI-compatible servers serve "
                f"/v1){tail}")
    if request == MODELS_REQUEST:
        return (f"{what}: this server lists no models there: is it an OpenAI-compatible API? "
                f"(or name the model with --model){tail}")
    return f"{what}: is this the server's OpenAI-compatible API? (--api completions for /v1/completions){tail}"


def _coze_path(path: str) -> str:
    for suffix in ("/v3/chat", "/v3", "/v1"):
        if path.endswith(suffix):
            return path[: -len(suffix)]
    return path


def _api_route(endpoint: EndpointConfig) -> str:
    return {"completions": "/completions", "dify": "/chat-messages", "dify-workflow": "/workflows/run",
            "coze": "/v3/chat"}.get(endpoint.api, "/chat/completions")


def _scheme(url: str) -> str:
    return urlsplit(url).scheme


def _path(url: str) -> str:
    return urlsplit(url).path.rstrip("/")


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _host_port(url: str) -> str:
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return parts.netloc
    host = parts.hostname or parts.netloc
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
