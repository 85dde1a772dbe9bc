"""First contact, as a new user meets it: the real `lpxtop` in a real terminal (tmux, at 80x24 and at 120x40)
and `lpxtop once --json`, against real servers on loopback (`lpxtop sim` processes), for the commonest
mistakes: a stopped server, a key-protected server without a key, https:// to plain HTTP, a wrong base
path, a model typo, a key typed on the command line; and for no GPU, Ctrl+C (dashboard, replay, fleet
view), NO_COLOR and one process serving several endpoints. Each asserts what the screen and the JSON say.

The dashboard's last error has lines of its own under the endpoints table, wrapped whole: the tests read
it back (joined across its lines) and find the JSON's `last_error` there, word for word, at both sizes.
The detail screen's Errors tab (Enter, then → →) shows it too. The helpers are in terminal.py and
conftest.py (the `terminal` fixture).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
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


def once_doc(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    """`lpxtop once ARGS --json` as a process: (exit status, the document)."""
    result = subprocess.run(
        [sys.executable, "-m", "lpxtop", "once", *args, "--json", "--samples", "2", "--interval", "100ms",
         "--no-discover", "--deadline", "30s"],
        capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})},
    )
    return result.returncode, json.loads(result.stdout)


def once_json(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict, dict]:
    """`lpxtop once ARGS --json` on one endpoint: (exit status, the endpoint, the whole document)."""
    code, doc = once_doc(*args, env=env)
    (endpoint,) = doc["endpoints"]
    return code, endpoint, doc


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


def error_lines(screen: str) -> str:
    """The dashboard's last error, from `last error:` to the endpoints panel's bottom border, its lines
    joined (the panel's borders and padding dropped)."""
    lines = screen.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("│ last error: ")), None)
    if start is None:
        return ""
    block = []
    for line in lines[start:]:
        if not line.startswith("│"):
            break
        block.append(line.strip("│ "))
    return " ".join(block)


def squeezed(text: str) -> str:
    """`text` without any whitespace: a message wrapped at any width compares equal to itself whole."""
    return "".join(text.split())


def shows_error(screen: str, name: str, message: str) -> bool:
    """Whether `screen` shows endpoint `name` and its last error `message` whole (wrapped, never cut)."""
    return name in screen and squeezed(f"last error: {message}") in squeezed(error_lines(screen))


def check_dashboard(term: Terminal, *, name: str, message: str, errors80: str) -> tuple[str, str]:
    """The main screen at 80x24 with the last error `message` (the JSON's `last_error`) whole on its
    wrapped lines, the Errors tab there, then the main screen at 120x40, the message whole again.
    Returns the two main screens."""
    small = term.wait_until(lambda s: shows_error(s, name, message), f"{name}'s last error, whole, at 80x24")
    assert not any(line.rstrip("│ ").endswith("…") for line in small.splitlines() if "last error" in line)
    errors_tab(term, errors80)
    term.resize(120, 40)
    large = term.wait_until(lambda s: shows_error(s, name, message), f"{name}'s last error, whole, at 120x40")
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
    small, large = check_dashboard(term, name=name, message=e["last_error"], errors80=f"nothing listens on {name}")
    for screen in (small, large):
        assert "http_404" not in screen and "✖" in screen


def test_a_key_protected_server_without_a_key(terminal, keyed_sim):
    advice = ("the server wants an API key: pass --api-key-env NAME, the environment variable that holds it "
              "(or api_key_env in the config file)")
    code, e, _ = once_json(keyed_sim.url)
    assert code == 1 and e["probes"]["errors"] == {"http_401": 2}
    assert e["last_error"].startswith(f"http_401: {advice}")

    term = dashboard(terminal, keyed_sim.url)
    small, large = check_dashboard(term, name=f"127.0.0.1:{keyed_sim.port}", message=e["last_error"],
                                   errors80="the server wants an API key")
    assert SERVER_KEY not in small + large


def test_a_key_protected_server_with_its_key_from_the_environment(terminal, keyed_sim):
    """What the advice says to do works: the key in a variable, named by --api-key-env."""
    env = {"ACC_KEY": SERVER_KEY}
    term = terminal(keyed_sim.url, "--no-discover", "--api-key-env", "ACC_KEY", cols=80, rows=24, env=env)
    name = f"127.0.0.1:{keyed_sim.port}"
    screen = term.wait_until(lambda s: name in s and "endpoints ●1" in s, "a measured probe")
    assert error_lines(screen) == "" and SERVER_KEY not in screen


def test_https_to_a_plain_http_server(terminal, sim):
    url = f"https://127.0.0.1:{sim.port}/v1"
    code, e, _ = once_json(url)
    assert e["probes"]["errors"] == {"tls": 2}
    assert e["last_error"] == f"tls: use {sim.url}: 127.0.0.1:{sim.port} answers plain HTTP, not TLS"

    term = dashboard(terminal, url)
    check_dashboard(term, name=f"127.0.0.1:{sim.port}", message=e["last_error"], errors80="use http://127.0.0.1")


def test_a_wrong_base_path(terminal, sim):
    url = f"http://127.0.0.1:{sim.port}/api"
    code, e, _ = once_json(url)
    assert e["probes"]["errors"] == {"http_404": 2}
    assert e["last_error"].startswith(f"http_404: GET /api/models: try {sim.url} — the base URL is probably wrong "
                                      "(OpenAI-compatible servers serve /v1)")

    term = dashboard(terminal, url)
    check_dashboard(term, name=f"127.0.0.1:{sim.port}", message=e["last_error"],
                    errors80="GET /api/models: try http://")


def test_a_model_typo_lists_the_models_the_server_serves(terminal, sim):
    advice = f"the server does not serve model 'acc-modl'; it serves {MODEL}: pass one with --model"
    code, e, doc = once_json(sim.url, "--model", "acc-modl")
    assert e["probes"]["errors"] == {"http_404": 2}
    assert e["last_error"].startswith(f"http_404: {advice}")
    (port,) = [p for p in doc["ports"] if p["port"] == sim.port]
    assert port["status"] == "model_mismatch" and port["detail"].startswith(advice)
    assert "stop it" not in port["detail"] and "stale" not in port["detail"]

    term = dashboard(terminal, sim.url, "--model", "acc-modl")
    small, large = check_dashboard(term, name=f"127.0.0.1:{sim.port}", message=e["last_error"],
                                   errors80="does not serve model")
    for screen in (small, large):
        assert "stop it" not in screen and "stale server" not in screen


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
@pytest.mark.parametrize("form", [("--api-key", TYPED_KEY), (f"--api-key={TYPED_KEY}",)], ids=["separate", "equals"])
def test_a_key_typed_on_the_command_line_is_refused_and_never_shown(terminal, sim, form, size):
    cols, rows = size
    term = terminal(sim.url, "--no-discover", *form, cols=cols, rows=rows)
    assert term.exit_status() == 2
    screen = term.screen()
    assert "every user of this machine can read a command line" in screen
    assert "--api-key-env OPENAI_API_KEY" in screen
    assert TYPED_KEY not in screen

    result = subprocess.run([sys.executable, "-m", "lpxtop", "once", sim.url, *form, "--json"],
                            capture_output=True, text=True, timeout=60, env={**os.environ})
    assert result.returncode == 2 and result.stdout == ""
    assert TYPED_KEY not in result.stderr and "--api-key-env" in result.stderr


# No GPU


def test_no_gpu_is_one_line_and_the_room_goes_to_the_other_panels(terminal, tmp_path):
    env = {"LPXTOP_SYSFS_ROOT": str(tmp_path / "no-sysfs")}  # no AMD GPU either, whatever this machine has
    name = f"127.0.0.1:{free_port()}"
    _, _, doc = once_json(name, env=env)
    if doc["gpus"] or doc["gpu_status"] == "ok":
        pytest.skip("this machine has a GPU: the no-GPU screen is for machines without one")
    status = doc["gpu_status"]
    assert status.startswith("unavailable: ") and doc["gpus"] == []

    term = terminal(name, "--no-discover", cols=80, rows=24, env=env)
    for cols, rows in ((80, 24), (120, 40)):
        term.resize(cols, rows)
        screen = term.wait_until(
            lambda s, cols=cols: squeezed(f"GPU {status}") in squeezed(s)
            and any(line.startswith("╭─ Ports") and len(line.rstrip()) == cols for line in s.splitlines()),
            f"the GPU's reason, whole, and the ports panel the whole width at {cols}x{rows}")
        lines = screen.splitlines()
        assert not any("╭─ GPU" in line for line in lines)  # no panel for it
        reason = [i for i, line in enumerate(lines) if line.startswith(" GPU unavailable: ")]
        assert len(reason) == 1 and sum(squeezed(status) in squeezed(" ".join(lines[i:i + k]))
                                        for i in reason for k in (1, 2)) >= 1  # on one line or two
        host = next(line for line in lines if line.startswith("╭─ Host"))
        assert len(host.rstrip()) == cols  # the host panel takes the whole width too
    term.keys("2")  # hides the line, and its room goes to the other panels
    term.wait_until(lambda s: "GPU unavailable" not in s, "the GPU line hidden by 2")


# Ctrl+C quits, as q does


def quits_on_ctrl_c(term: Terminal, ready) -> None:
    """Wait for `ready(screen)` at 80x24 and again at 120x40, then type Ctrl+C: the program exits 0, as
    with q, without Textual's "press ctrl+q" notice."""
    term.wait_until(ready, "the first screen at 80x24")
    term.resize(120, 40)
    term.wait_until(ready, "the screen at 120x40")
    term.keys("C-c")
    assert term.exit_status() == 0
    assert "ctrl+q" not in term.screen()


def test_ctrl_c_quits_the_dashboard(terminal, sim):
    name = f"127.0.0.1:{sim.port}"
    quits_on_ctrl_c(dashboard(terminal, sim.url), lambda s: name in s and "endpoints ●1" in s)


def test_ctrl_c_quits_the_dashboard_from_the_detail_screen(terminal, sim):
    term = dashboard(terminal, sim.url)
    term.wait_for(f"127.0.0.1:{sim.port}", "endpoints ●1")
    term.keys("Enter")
    quits_on_ctrl_c(term, lambda s: "Errors" in s and "Charts" in s)


def test_the_terminal_decides_the_size_whatever_columns_and_lines_say(terminal, sim):
    # a shell that exported COLUMNS and LINES at 80x24: the dashboard takes the terminal's size, and follows it
    term = terminal(sim.url, "--no-discover", cols=120, rows=40, env={"COLUMNS": "80", "LINES": "24"})

    def panel_across(width: int) -> Callable[[str], bool]:
        return lambda s: any(line.startswith("╭─ Endpoints") and len(line.rstrip()) == width for line in s.splitlines())

    term.wait_until(panel_across(120), "the endpoints panel across 120 columns")
    term.resize(100, 30)
    term.wait_until(panel_across(100), "the endpoints panel across 100 columns after a resize")


def test_ctrl_c_quits_a_replay(terminal):
    from tests.support.paths import FIXTURES

    term = terminal("replay", str(FIXTURES / "recordings" / "v1-sim.lpxrec"), cols=80, rows=24)
    quits_on_ctrl_c(term, lambda s: "REPLAY" in s and "vllm-sim-a" in s)


def test_ctrl_c_quits_the_fleet_view(terminal):
    prometheus = f"http://127.0.0.1:{free_port()}"  # nothing listens: the fleet view says so and keeps running
    term = terminal("fleet", "-p", prometheus, cols=80, rows=24)
    quits_on_ctrl_c(term, lambda s: "fleet" in s and "cannot reach Prometheus" in s)


# NO_COLOR: emphasis by attributes, never by a dimmer colour


def test_no_color_emphasises_by_bold_and_reverse_never_by_a_dimmer_colour(terminal):
    from tests.support.tmux_terminal import luminance

    name = f"127.0.0.1:{free_port()}"
    code, e, doc = once_json(name, env={"NO_COLOR": "1"})
    assert code == 1 and e["status"] == "down" and e["probes"]["errors"] == {"refused": 2}  # JSON: as ever

    term = terminal(name, "--no-discover", cols=80, rows=24, env={"NO_COLOR": "1"})
    for cols, rows in ((80, 24), (120, 40)):
        term.resize(cols, rows)
        # the header too: a capture can fall between the parts of a repaint (once under a busy suite)
        term.wait_until(lambda s: shows_error(s, name, e["last_error"]) and "✖" in s.partition("\n")[0],
                        f"the last error and the header's count of endpoints down at {cols}x{rows}")
        cells = term.styled()
        text = ["".join(c.char for c in row) for row in cells]
        y = next(i for i, line in enumerate(text) if line.startswith("│ last error: "))
        label = cells[y][2:len("│ last error:")]
        start = text[y].index("refused")
        message = [c for c in cells[y][start:] if c.char.strip() and c.char != "│"]
        assert message and all(c.bold and c.reverse and not c.dim for c in message), text[y]
        assert not any(c.reverse for c in label)  # plain text stays plain
        plain, critical = luminance(label[0].fg), luminance(message[0].fg)
        assert plain is None or critical is None or critical >= plain, (label[0].fg, message[0].fg)
        # the header's count of endpoints down: the same emphasis
        header = cells[0]
        x = text[0].index("✖")
        assert header[x].bold and header[x].reverse and not header[x].dim


# One process serving several endpoints


def test_a_process_serving_two_endpoints_is_one_row_naming_both(terminal, sim, tmp_path):
    config = tmp_path / "two.toml"
    config.write_text(f'[[endpoint]]\nname = "beta"\nurl = "{sim.url}"\n\n'
                      f'[[endpoint]]\nname = "alpha"\nurl = "{sim.url}"\n')
    _, doc = once_doc("--config", str(config))
    ports = {p["endpoint"]: p for p in doc["ports"]}
    assert ports["beta"]["pid"] == ports["alpha"]["pid"] == sim.proc.pid
    assert ports["beta"]["endpoints"] == ports["alpha"]["endpoints"] == ["beta", "alpha"]  # port order, not a-z
    (proc,) = [p for p in doc["host_metrics"]["processes"] if p["pid"] == sim.proc.pid]
    assert proc["endpoints"] == ["beta", "alpha"]

    term = terminal("--config", str(config), "--no-discover", cols=80, rows=24)
    serves = f"serves 2 endpoints: beta :{sim.port}, alpha :{sim.port}"
    screen = term.wait_until(lambda s: squeezed(serves) in squeezed(s), "the ports panel naming both endpoints")
    rows = [line for line in screen.splitlines() if line.startswith(f"│  {sim.port}")]  # the ports table's rows
    assert len(rows) == 1 and f"{sim.port}+1" in rows[0], rows  # one row for the process
    assert "python -m lpxtop sim" in rows[0] and sys.executable not in screen  # what runs, not the venv's path
    term.resize(120, 40)
    term.wait_until(lambda s: any(f" {sim.proc.pid} " in line and line.rstrip("│ ").endswith("  beta, alpha")
                                  for line in s.splitlines()), "the host panel naming both endpoints")
