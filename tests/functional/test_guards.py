"""What keeps lpxtop up against servers nobody controls: no crash, no hang past a stated bound, valid
JSON whatever the numbers. Every case is a real socket: a small hostile server, or the simulated one."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from lpxtop.cli.entry import main
from lpxtop.engine.runner import Engine, EngineSettings
from lpxtop.engine.system.discovery import discover
from lpxtop.engine.window import EndpointWindow
from lpxtop.jsonout import dumps
from tests.support.cli import run_cli
from tests.support.hostile_http import HostileServer, hang, models, send, stream, trickle
from tests.support.hostile_values import HOSTILE_FLOATS, poisoned
from tests.support.sim import endpoint
from tests.support.snapshot_data import fixed_snapshot


def _strict_json(text: str):
    """json.loads that refuses NaN and Infinity, as jq, Go and browsers do."""

    def refuse(constant: str):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _first_sample(engine: Engine, timeout: float = 10.0) -> float:
    """Seconds from start to the first finished probe."""
    seen = threading.Event()
    engine.add_listener(lambda e: seen.set() if type(e).__name__ == "SampleEvent" else None)
    began = time.monotonic()
    with engine:
        assert seen.wait(timeout), "no probe finished"
        return time.monotonic() - began


def test_the_first_probe_does_not_wait_for_models_when_the_model_is_given():
    stop = threading.Event()
    with HostileServer({"GET /v1/models": hang(30, stop), "POST /v1/chat/completions": stream()}) as server:
        try:
            took = _first_sample(Engine([endpoint(server.url, model="m")], EngineSettings(scrape_metrics=False)))
        finally:
            stop.set()
    assert took < 2.0  # the models check (bounded at 5 s) runs beside the probe, not before it


def test_a_sample_the_statistics_cannot_take_does_not_stop_the_probe_loop(monkeypatch):
    original = EndpointWindow.add
    calls = {"n": 0}

    def add(self, sample):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OverflowError("int too large to convert to float")  # as a 400-digit token count did
        original(self, sample)

    monkeypatch.setattr(EndpointWindow, "add", add)
    with HostileServer({"GET /v1/models": models("m"), "POST /v1/chat/completions": stream()}) as server:
        engine = Engine([endpoint(server.url, model="m", interval_s=0.05)], EngineSettings(scrape_metrics=False))
        with engine:
            deadline = time.monotonic() + 10
            while calls["n"] < 4 and time.monotonic() < deadline:
                time.sleep(0.02)
    assert calls["n"] >= 4  # the loop went on after the failure


def test_once_ends_within_its_deadline_when_models_trickle(capsys):
    stop = threading.Event()
    body = json.dumps({"data": [{"id": "m"}]}).encode()
    routes = {"GET /v1/models": trickle(body, 0.5, stop=stop), "POST /v1/chat/completions": stream(),
              "GET /metrics": trickle(b"vllm:num_requests_running 1\n", 0.5, stop=stop)}
    with HostileServer(routes) as server:
        began = time.monotonic()
        try:
            out = run_cli(capsys, "once", server.url, "--deadline", "1", "--json", "--no-discover")
        finally:
            stop.set()
        took = time.monotonic() - began
    doc = _strict_json(out.stdout)
    assert out.returncode == 1, out.stderr
    (e,) = doc["endpoints"]
    assert e["status"] == "down" and e["last_error"].startswith("deadline: no probe could start"), e
    assert took < 1 + 1.5, took  # the deadline, plus the port check and the report


def test_discovery_ends_by_its_deadline_whatever_the_candidates_do():
    stop = threading.Event()
    body = json.dumps({"data": [{"id": "m"}]}).encode()
    with HostileServer({"GET /v1/models": trickle(body, 0.5, stop=stop)}) as slow, \
            HostileServer({"GET /v1/models": hang(30, stop)}) as silent:
        began = time.monotonic()
        try:
            found = asyncio.run(discover(timeout_s=10.0, extra_ports=[slow.port, silent.port], include_usual=False,
                                         deadline_s=0.5))
        finally:
            stop.set()
        took = time.monotonic() - began
    # (other servers running on this machine may be found too; these two never are)
    assert not {e.port for e in found} & {slow.port, silent.port}
    assert took < 0.5 + 1.5, took  # a process scan before, the cancellation after


@pytest.mark.parametrize("flag", ["--interval", "--timeout", "--first-token-timeout", "--connect-timeout"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e300", "0", "-1"])
def test_absurd_seconds_on_the_command_line_are_usage_errors(flag, value, capsys):
    assert main(["once", "127.0.0.1:1", f"{flag}={value}"]) == 2
    err = capsys.readouterr().err
    assert "must be between 10ms and 1h" in err or "not a finite duration" in err or "not a duration" in err


def test_absurd_numbers_for_other_flags_are_usage_errors(capsys):
    for args in (["once", "127.0.0.1:1", "--deadline", "nan"], ["127.0.0.1:1", "--refresh", "inf"],
                 ["once", "127.0.0.1:1", "--window", "inf"], ["once", "127.0.0.1:1", "--gpu-mem-warning", "nan"],
                 ["once", "127.0.0.1:1", "--samples", "99999999999"]):
        assert main(args) == 2, args
    assert capsys.readouterr().err.count("usage:") == 5


@pytest.mark.parametrize("hostile", HOSTILE_FLOATS, ids=repr)
def test_json_is_valid_whatever_number_any_field_holds(hostile):
    snapshot = poisoned(fixed_snapshot(), hostile, ints=True)
    text = dumps(snapshot.to_json(), indent=2)
    doc = _strict_json(text)
    assert doc["schema"] == 1 and len(doc["endpoints"]) == 3


METRICS_PAGE = b"""\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} +Inf
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} NaN
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} -Inf
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 1e400
"""


def test_once_json_is_valid_and_the_table_prints_against_hostile_numbers(capsys):
    usage = {"prompt_tokens": 10**400, "completion_tokens": 10**400, "total_tokens": -1}
    routes = {"GET /v1/models": models("m"), "POST /v1/chat/completions": stream("a b c", usage=usage),
              "GET /metrics": lambda h: send(h, 200, METRICS_PAGE, "text/plain; version=0.0.4")}
    with HostileServer(routes) as server:
        out = run_cli(capsys, "once", server.url, "--samples", "2", "--json", "--no-discover")
        table = run_cli(capsys, "once", server.url, "--samples", "1", "--no-discover")
    assert out.returncode in (0, 1) and "Traceback" not in out.stderr, out.stderr
    doc = _strict_json(out.stdout)
    assert doc["endpoints"][0]["probes"]["sent"] == 2
    assert table.returncode in (0, 1) and "Traceback" not in table.stderr, table.stderr
    assert "ENDPOINT" in table.stdout
