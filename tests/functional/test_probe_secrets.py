"""Secrets and terminal control in server text: a server that echoes the request's
credentials back, in an error body and in an SSE error event, gets them shown nowhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lpxtop.engine.probe import fetch_models, run_probe
from lpxtop.http import HttpClient
from lpxtop.textsafe import scrub
from tests.support.hostile import HostileServer, Reply, Request
from tests.support.sim import endpoint

KEY = "sk-echo-" + "k3" * 12
HEADER_SECRET = "org-" + "z8" * 10
ESC = "\x1b]0;owned\x07\x1b[2J"


def echo(where: str) -> Reply | None:
    """Replies that carry the request's credentials back, raw (not only after "Bearer ")."""

    def reply(request: Request) -> Reply:
        auth = request.headers.get("authorization", "")
        raw_key = auth.removeprefix("Bearer ")
        org = request.headers.get("x-org-token", "")
        text = f"{ESC}key {raw_key} (sent as {auth!r}, org {org}) is not allowed"
        if request.path.endswith("/models"):
            body = {"data": [{"id": "m"}, {"id": f"m-{raw_key}"}]}
            return Reply([json.dumps(body).encode()], headers={"Content-Type": "application/json"}, framing="length")
        if where == "status" or not request.path.endswith("/completions"):
            body = {"error": {"message": text, "type": "invalid_request_error"}}
            return Reply([json.dumps(body).encode()], status="401 Unauthorized",
                         headers={"Content-Type": "application/json"}, framing="length")
        role = {"id": f"x{raw_key}", "model": f"m{ESC}", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
        tok = {"id": "x", "model": "m", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
        error = {"error": {"message": text, "code": 500}}
        return Reply([b"data: " + json.dumps(o).encode() + b"\n\n" for o in (role, tok, error)])

    return reply  # type: ignore[return-value]


@pytest.fixture
def key_env(monkeypatch):
    monkeypatch.setenv("LPXTOP_ECHO_KEY", KEY)
    return "LPXTOP_ECHO_KEY"


@pytest.mark.parametrize("where", ["status", "event"])
async def test_an_echoed_key_is_nowhere_in_the_sample(key_env, where):
    with HostileServer(echo(where)) as server:
        config = endpoint(server.url, model="m", api_key_env=key_env, headers=(("X-Org-Token", f"Token {HEADER_SECRET}"),))
        async with HttpClient() as client:
            sample = await run_probe(client, config)
            ids, _ = await fetch_models(client, config)
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"  # the key was sent
    assert sample.error_kind == ("http_401" if where == "status" else "error_event"), sample.error_text
    assert "is not allowed" in sample.error_message
    text = repr(sample) + repr(ids)
    for secret in (KEY, HEADER_SECRET):
        assert secret not in text
    assert "\x1b" not in text and "\x07" not in text


def test_config_header_values_are_registered_as_secrets_and_plain_ones_are_not():
    endpoint("http://127.0.0.1:1/v1", headers=(("X-Api-Key", "abcdef-123456"), ("Accept-Language", "en-US,en")))
    assert scrub("echo abcdef-123456 en-US,en") == "echo *** en-US,en"


def lpxtop(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lpxtop", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})


@pytest.mark.parametrize("where", ["status", "event"])
def test_an_echoed_key_is_nowhere_in_once_json_or_the_table(where):
    env = {"LPXTOP_ECHO_KEY": KEY, "LPXTOP_LOG": "DEBUG"}
    with HostileServer(echo(where)) as server:
        as_json = lpxtop("once", server.url, "--samples", "1", "--json", "--api-key-env", "LPXTOP_ECHO_KEY", env=env)
        table = lpxtop("once", server.url, "--samples", "1", "--api-key-env", "LPXTOP_ECHO_KEY", env=env)
    doc = json.loads(as_json.stdout)
    assert doc["endpoints"][0]["last_error"].startswith("http_401" if where == "status" else "error_event")
    assert "is not allowed" in table.stdout
    for result in (as_json, table):
        everything = result.stdout + result.stderr
        assert KEY not in everything
        assert "\x1b]" not in result.stdout and "\x07" not in result.stdout
