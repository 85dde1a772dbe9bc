"""The sim as its own process: `python -m lpxtop.sim --port P`."""

from __future__ import annotations

import selectors
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from tests.support.ports import free_port
from tests.support.sim import chat_body, stream


def _readline(proc: subprocess.Popen, timeout_s: float) -> str:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout_s):
            raise TimeoutError(f"no output within {timeout_s} s")
    return proc.stdout.readline()


@pytest.fixture
def sim_process() -> Iterator[tuple[subprocess.Popen, int]]:
    port = free_port()
    args = [
        "--port",
        str(port),
        "--model",
        "proc-sim",
        "--ttft-ms",
        "2",
        "--itl-ms",
        "1",
        "--max-num-seqs",
        "3",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "lpxtop.sim", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def test_sim_process_serves_and_stops_on_sigterm(sim_process: tuple[subprocess.Popen, int]) -> None:
    proc, port = sim_process
    assert _readline(proc, 30.0) == f"lpxtop sim: serving proc-sim on http://127.0.0.1:{port}/v1\n"
    url = f"http://127.0.0.1:{port}"
    with httpx.Client(timeout=10) as client:
        assert client.get(url + "/health").status_code == 200
        result = stream(client, url + "/v1/chat/completions", chat_body(max_tokens=4, model="proc-sim"))
        assert result.json_events()[-1]["usage"]["completion_tokens"] == 4
        record = client.get(f"{url}/sim/records/{result.response_id}").json()
        assert record["outcome"] == "ok" and len(record["events"]) == len(result.events)
        state = client.get(url + "/sim/state").json()
        assert state["requests_running"] == 0 and state["records"] == 1
        assert (
            'vllm:num_requests_running{engine="0",model_name="proc-sim"}' in client.get(url + "/metrics").text
        )
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    assert proc.stderr is not None
    assert proc.stderr.read() == ""  # no access log, no warnings


def test_sim_process_reports_a_taken_port() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "lpxtop.sim", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "--port" in done.stderr


def test_sim_process_rejects_bad_flags() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lpxtop.sim", "--port", "0", "--tokens-per-chunk", "0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "tokens_per_chunk must be at least 1" in done.stderr
