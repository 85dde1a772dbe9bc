"""Keys and terminal escapes in text lpxtop did not write: a real process's command line and a real
server's model ids and error messages reach the `once` table and JSON only masked and printable."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.cli import run_cli
from tests.support.hostile_http import HostileServer, models, send
from tests.support.ports import free_port

KEYS = ("sk-live-cmdline-AAAA1111", "sk-live-keys-BBBB2222", "hf_token_CCCC3333", "bearer-DDDD4444",
        "short-k-EEEE5555", "env-key-FFFF6666")
ESCAPES = ("\x1b]0;pwned\x07", "\x1b[2J", "\x1b[31m", "\x9b6n")


def _assert_clean(text: str) -> None:
    for key in KEYS:
        assert key not in text, key
    assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_a_process_command_line_with_keys_and_escapes_is_shown_masked(capsys, caplog):
    # A real process holds the port, with keys in every form on its command line and escapes around them.
    port = free_port()
    code = (f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); "
            "print('ready', flush=True); time.sleep(30)")
    argv = [sys.executable, "-c", code, "--api-key", KEYS[0], f"--api-keys={KEYS[1]}", "--hf-token", KEYS[2],
            "--bearer", KEYS[3], "-k", KEYS[4], *ESCAPES, "--port", str(port)]
    holder = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "OPENAI_API_KEY": KEYS[5]})
    try:
        assert holder.stdout.readline().strip() == "ready"
        common = ("once", f"127.0.0.1:{port}", "--samples", "1", "--model", "m", "--no-metrics", "--timeout", "0.5")
        table = run_cli(capsys, *common)
        doc = run_cli(capsys, *common, "--json")
    finally:
        holder.kill()
        holder.wait(5)
    _assert_clean(table.stdout + table.stderr)
    _assert_clean(doc.stdout + doc.stderr + caplog.text)
    parsed = json.loads(doc.stdout)
    (held,) = [p for p in parsed["ports"] if p["port"] == port]
    assert held["pid"] == holder.pid and "--api-key ***" in held["cmdline"] and "-k ***" in held["cmdline"]
    for text in _strings(parsed):
        _assert_clean(text)


def test_a_server_s_model_ids_and_error_messages_are_shown_clean(capsys, caplog, monkeypatch):
    key = "sk-live-probe-GGGG7777"
    evil_model = "\x1b[2Jevil\x1b]0;title\x07-model"

    def unauthorized(h) -> None:
        # echoes the request's Authorization header, with escapes, as some gateways do
        body = json.dumps({"error": {"message": f"bad key \x1b[31m{h.headers.get('Authorization')}\x1b[0m"}})
        send(h, 401, body.encode())

    routes = {"GET /v1/models": models(evil_model), "POST /v1/chat/completions": unauthorized}
    monkeypatch.setenv("LPXTOP_TEST_KEY", key)
    with HostileServer(routes) as server:
        common = ("once", server.url, "--samples", "1", "--no-metrics", "--api-key-env", "LPXTOP_TEST_KEY")
        table = run_cli(capsys, *common)
        doc = run_cli(capsys, *common, "--json")
    for out in (table, doc):
        assert out.returncode == 1, out.stderr
        assert key not in out.stdout + out.stderr + caplog.text
        assert "\x1b" not in out.stdout + out.stderr
    (e,) = json.loads(doc.stdout)["endpoints"]
    assert e["model"] == "evil-model" and e["last_error"].startswith("http_401")
    assert "***" in e["last_error"]
    assert "evil-model" in table.stdout

