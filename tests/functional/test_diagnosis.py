"""Each common first-contact mistake against real loopback servers: its own error kind, and the message that
fixes it, the same in `once --json`, the table, the exporter's counters and a recording."""

from __future__ import annotations

import json

import pytest

from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.cli import run_cli
from tests.support.ports import free_port

FAST = ("--samples", "2", "--interval", "50ms", "--no-discover", "--deadline", "20s")


@pytest.fixture(scope="module")
def sim():
    with start_sim_in_thread(SimConfig(model="sim-a", ttft_ms=2, itl_ms=1)) as server:
        yield server


@pytest.fixture(scope="module")
def keyed_sim():
    with start_sim_in_thread(SimConfig(model="sim-k", ttft_ms=2, itl_ms=1, api_key="sk-diagnosis-4242")) as server:
        yield server


def once_json(capsys, *args: str) -> tuple[int, dict]:
    result = run_cli(capsys, "once", *args, *FAST, "--json")
    doc = json.loads(result.stdout)
    (endpoint,) = doc["endpoints"]
    return result.returncode, endpoint | {"_doc": doc}


def test_nothing_listening_is_refused_every_time_never_http_404(capsys, tmp_path):
    port = free_port()
    recording = tmp_path / "down.lpxrec"
    code, e = once_json(capsys, f"127.0.0.1:{port}", "--record", str(recording))
    assert code == 1 and e["status"] == "down"
    assert e["probes"]["errors"] == {"refused": 2}
    assert e["last_error"] == f"refused: nothing listens on 127.0.0.1:{port} — is the server running?"
    # the recording keeps the same kind and words
    exported = run_cli(capsys, "export", str(recording), "--what", "probes")
    probes = [json.loads(line) for line in exported.stdout.splitlines()]
    assert [p["error"] for p in probes] == ["refused", "refused"]
    assert all("nothing listens on" in json.dumps(p) for p in probes)


def test_the_table_says_the_same(capsys):
    port = free_port()
    result = run_cli(capsys, "once", f"127.0.0.1:{port}", *FAST)
    assert f"last error: refused: nothing listens on 127.0.0.1:{port} — is the server running?" in result.stdout
    assert "http_404" not in result.stdout


def test_https_to_a_plain_http_server(capsys, sim):
    code, e = once_json(capsys, f"https://127.0.0.1:{sim.port}/v1")
    assert e["probes"]["errors"] == {"tls": 2}
    assert e["last_error"] == (f"tls: use http://127.0.0.1:{sim.port}/v1: 127.0.0.1:{sim.port} answers plain HTTP, "
                               "not TLS")


def test_a_key_protected_server_without_a_key(capsys, keyed_sim):
    code, e = once_json(capsys, keyed_sim.url)
    assert code == 1 and e["probes"]["errors"] == {"http_401": 2}
    assert e["last_error"].startswith("http_401: the server wants an API key: pass --api-key-env NAME, the environment "
                                      "variable that holds it (or api_key_env in the config file)")


def test_a_key_protected_server_with_a_wrong_key_and_with_the_right_one(capsys, keyed_sim, monkeypatch):
    monkeypatch.setenv("DIAG_KEY", "sk-not-the-one-000")
    _, e = once_json(capsys, keyed_sim.url, "--api-key-env", "DIAG_KEY")
    assert e["probes"]["errors"] == {"http_401": 2}
    assert e["last_error"].startswith("http_401: the server refused the key in $DIAG_KEY: check it")
    out = capsys.readouterr()
    assert "sk-not-the-one-000" not in json.dumps(e["_doc"]) + out.out + out.err
    monkeypatch.setenv("DIAG_KEY", "sk-diagnosis-4242")
    code, e = once_json(capsys, keyed_sim.url, "--api-key-env", "DIAG_KEY")
    assert code == 0 and e["probes"]["ok"] == 2


def test_a_wrong_base_path(capsys, sim):
    code, e = once_json(capsys, f"http://127.0.0.1:{sim.port}/api")
    assert e["probes"]["errors"] == {"http_404": 2}
    assert e["last_error"].startswith(f"http_404: GET /api/models: try http://127.0.0.1:{sim.port}/v1 — the base URL "
                                      "is probably wrong (OpenAI-compatible servers serve /v1)")


def test_a_model_typo_lists_the_models_the_server_serves(capsys, sim):
    code, e = once_json(capsys, sim.url, "--model", "sim-aa")
    assert e["probes"]["errors"] == {"http_404": 2}
    assert e["last_error"] == ("http_404: the server does not serve model 'sim-aa'; it serves sim-a: pass one with "
                               "--model (or model in the config file)")
    (port,) = [p for p in e["_doc"]["ports"] if p["port"] == sim.port]
    assert port["status"] == "model_mismatch"
    assert port["detail"].startswith("the server does not serve model 'sim-aa'; it serves sim-a")
    assert "stop it" not in port["detail"] and "stale" not in port["detail"]


def test_exporter_counts_the_real_kind():
    from tests.support.prometheus import exported, scrape
    from tests.support.waiting import wait_for

    def errors(text: str) -> dict[str, float]:
        counts = {}
        for line in text.splitlines():
            if line.startswith("lpxtop_probe_errors_total{"):
                kind = line.split('kind="', 1)[1].split('"', 1)[0]
                counts[kind] = float(line.rsplit(" ", 1)[1])
        return counts

    port = free_port()
    with exported(f"http://127.0.0.1:{port}/v1") as (exporter, _engine):
        counts = wait_for(lambda: (c := errors(scrape(exporter).text)).get("refused", 0) >= 3 and c, timeout=15)
    assert counts["http_404"] == 0 and sum(counts.values()) == counts["refused"]
