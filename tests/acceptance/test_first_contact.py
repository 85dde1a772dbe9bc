"""First contact, as a new user meets it: the real `lpxtop` in a real terminal (tmux, 80x24 and 120x40)
and `lpxtop once --json`, against real servers on loopback (`lpxtop sim` processes), for the commonest
mistakes: a stopped server, a key-protected server without a key, https:// to plain HTTP, a wrong base
path, a model typo, and a key typed on the command line. Each asserts what the screen and the JSON say.

The dashboard's error line is short at 80 columns; the detail screen's Errors tab (Enter, then → →) shows
the message itself. The helpers are in terminal.py and conftest.py (the `terminal` fixture).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.ports import free_port
from tests.support.tmux_terminal import WAIT_S, Terminal

MODEL = "acc-model"
SERVER_KEY = "sk-acceptance-server-5e1f"  # the simulated server's own key (its --api-key, as vLLM's)
TYPED_KEY = "sk-typed-on-the-command-line-77c3"


@dataclass
class Sim:
    port: int
    proc: subprocess.Popen

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@contextlib.contextmanager
def sim_process(*flags: str) -> Iterator[Sim]:
    """`lpxtop sim` as its own process (the ports panel then knows it for the server it is)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "lpxtop", "sim", "--port", str(port), "--model", MODEL,
                             "--ttft-ms", "5", "--itl-ms", "1", *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            assert proc.poll() is None and time.monotonic() < deadline, "the simulator did not start"
            time.sleep(0.05)
        yield Sim(port, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="module")
def sim(require_tmux) -> Iterator[Sim]:
    with sim_process() as server:
        yield server


@pytest.fixture(scope="module")
def keyed_sim(require_tmux) -> Iterator[Sim]:
    with sim_process("--api-key", SERVER_KEY) as server:
        yield server


def once_json(*args: str) -> tuple[int, dict, dict]:
    """`lpxtop once ARGS --json` as a process: (exit status, the endpoint, the whole document)."""
    result = subprocess.run(
        [sys.executable, "-m", "lpxtop", "once", *args, "--json", "--samples", "2", "--interval", "100ms",
         "--no-discover", "--deadline", "30s"],
        capture_output=True, text=True, timeout=60,
    )
    doc = json.loads(result.stdout)
    (endpoint,) = doc["endpoints"]
    return result.returncode, endpoint, doc


def dashboard(terminal, *args: str) -> Terminal:
    return terminal(*args, "--no-discover", cols=80, rows=24)


def errors_tab(term: Terminal, *needles: str) -> str:
    """Open the detail screen of the first endpoint and its Errors tab; the screen once `needles` show."""
    term.keys("Enter")
    term.wait_for("Errors")
    term.keys("Right")
    term.keys("Right")
    screen = term.wait_for(*needles)
    term.keys("Escape")
    return screen


def check_dashboard(term: Terminal, *, name: str, line80: str, errors80: str, line120: str) -> tuple[str, str]:
    """The main screen at 80x24 (the error line's start), the Errors tab there (the message), and the main
    screen at 120x40 (more of the message on the error line). Returns the two main screens."""
    small = term.wait_for(name, f"last error: {line80}")
    errors_tab(term, errors80)
    term.resize(120, 40)
    large = term.wait_for(name, f"last error: {line120}")
    return small, large


def test_a_stopped_server(terminal):
    port = free_port()
    name = f"127.0.0.1:{port}"
    advice = f"nothing listens on {name} — is the server running?"
    code, e, doc = once_json(name)
    assert code == 1 and e["status"] == "down"
    assert e["probes"]["errors"] == {"refused": 2}  # never http_404
    assert e["last_error"] == f"refused: {advice}"
    assert [(p["status"], p["detail"]) for p in doc["ports"]] == [("down", advice)]

    term = dashboard(terminal, name)
    small, large = check_dashboard(term, name=name, line80="refused", errors80=f"nothing listens on {name}",
                                   line120=f"refused: nothing listens on {name}")
    for screen in (small, large):
        assert "http_404" not in screen and "✖" in screen


def test_a_key_protected_server_without_a_key(terminal, keyed_sim):
    advice = ("the server wants an API key: pass --api-key-env NAME, the environment variable that holds it "
              "(or api_key_env in the config file)")
    code, e, _ = once_json(keyed_sim.url)
    assert code == 1 and e["probes"]["errors"] == {"http_401": 2}
    assert e["last_error"].startswith(f"http_401: {advice}")

    term = dashboard(terminal, keyed_sim.url)
    _, large = check_dashboard(term, name=f"127.0.0.1:{keyed_sim.port}", line80="http_401",
                               errors80="the server wants an API key", line120="http_401: the server wants an API key")
    assert SERVER_KEY not in large


def test_a_key_protected_server_with_its_key_from_the_environment(terminal, keyed_sim):
    """What the advice says to do works: the key in a variable, named by --api-key-env."""
    env = {"ACC_KEY": SERVER_KEY}
    term = terminal(keyed_sim.url, "--no-discover", "--api-key-env", "ACC_KEY", cols=80, rows=24, env=env)
    name = f"127.0.0.1:{keyed_sim.port}"
    screen = term.wait_until(lambda s: name in s and "● " in s and "last error: none" in s, "a measured probe")
    assert SERVER_KEY not in screen


def test_https_to_a_plain_http_server(terminal, sim):
    url = f"https://127.0.0.1:{sim.port}/v1"
    code, e, _ = once_json(url)
    assert e["probes"]["errors"] == {"tls": 2}
    assert e["last_error"] == f"tls: use {sim.url}: 127.0.0.1:{sim.port} answers plain HTTP, not TLS"

    term = dashboard(terminal, url)
    check_dashboard(term, name=f"127.0.0.1:{sim.port}", line80="tls", errors80="use http://127.0.0.1",
                    line120=f"tls: use {sim.url}: ")


def test_a_wrong_base_path(terminal, sim):
    url = f"http://127.0.0.1:{sim.port}/api"
    code, e, _ = once_json(url)
    assert e["probes"]["errors"] == {"http_404": 2}
    assert e["last_error"].startswith(f"http_404: GET /api/models: try {sim.url} — the base URL is probably wrong "
                                      "(OpenAI-compatible servers serve /v1)")

    term = dashboard(terminal, url)
    check_dashboard(term, name=f"127.0.0.1:{sim.port}", line80="http_404", errors80="GET /api/models: try http://",
                    line120="http_404: GET /api/models: try http://127.0.0.1:")


def test_a_model_typo_lists_the_models_the_server_serves(terminal, sim):
    advice = f"the server does not serve model 'acc-modl'; it serves {MODEL}: pass one with --model"
    code, e, doc = once_json(sim.url, "--model", "acc-modl")
    assert e["probes"]["errors"] == {"http_404": 2}
    assert e["last_error"].startswith(f"http_404: {advice}")
    (port,) = [p for p in doc["ports"] if p["port"] == sim.port]
    assert port["status"] == "model_mismatch" and port["detail"].startswith(advice)
    assert "stop it" not in port["detail"] and "stale" not in port["detail"]

    term = dashboard(terminal, sim.url, "--model", "acc-modl")
    _, large = check_dashboard(term, name=f"127.0.0.1:{sim.port}", line80="http_404",
                               errors80="does not serve model", line120="http_404: the server does not serve model")
    assert "stop it" not in large and "stale server" not in large


@pytest.mark.parametrize("form", [("--api-key", TYPED_KEY), (f"--api-key={TYPED_KEY}",)], ids=["separate", "equals"])
def test_a_key_typed_on_the_command_line_is_refused_and_never_shown(terminal, sim, form):
    term = dashboard(terminal, sim.url, *form)
    assert term.exit_status() == 2
    screen = term.screen()
    assert "every user of this machine can read a command line" in screen
    assert "--api-key-env OPENAI_API_KEY" in screen
    assert TYPED_KEY not in screen

    result = subprocess.run([sys.executable, "-m", "lpxtop", "once", sim.url, *form, "--json"],
                            capture_output=True, text=True, timeout=60, env={**os.environ})
    assert result.returncode == 2 and result.stdout == ""
    assert TYPED_KEY not in result.stderr and "--api-key-env" in result.stderr
