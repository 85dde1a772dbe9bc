"""Each injected fault produces the right wire behaviour; faults can be set at run time over HTTP."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest

from lpxtop.sim import SimConfig, SimHandle, start_sim_in_thread
from tests.support.sim import chat_body, stream

FAST = {"model": "sim-test", "ttft_ms": 5.0, "itl_ms": 3.0}


@pytest.fixture
def sim() -> Iterator[SimHandle]:
    with start_sim_in_thread(SimConfig(**FAST)) as handle:
        yield handle


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10.0) as c:
        yield c


def _chat(sim: SimHandle, client: httpx.Client, **kw) -> object:
    return stream(client, sim.url + "/chat/completions", chat_body(**kw))


def test_cut_closes_the_connection_mid_stream(sim: SimHandle, client: httpx.Client) -> None:
    sim.server.set_faults(count=1, cut_after_tokens=2)
    result = _chat(sim, client, max_tokens=8)
    assert result.status == 200
    assert result.error == "RemoteProtocolError"  # body never completed
    assert "[DONE]" not in [data for _, data in result.events]
    record = sim.server.record_for(result.response_id)
    assert record is not None and record.outcome == "cut"
    assert [(k, n) for _, k, n in record.events] == [("role", 0), ("content", 1), ("content", 1)]
    assert len(result.events) == 3  # everything written before the cut arrived
    # Only the next request was faulty.
    again = _chat(sim, client, max_tokens=3)
    assert again.error is None and again.events[-1][1] == "[DONE]"


def test_cut_on_a_non_streaming_request_drops_the_connection(sim: SimHandle, client: httpx.Client) -> None:
    sim.server.set_faults(count=1, cut_after_tokens=0)
    with pytest.raises(httpx.RemoteProtocolError):
        client.post(sim.url + "/chat/completions", json=chat_body(stream=False))


def test_stall_keeps_the_connection_open_then_goes_on(sim: SimHandle, client: httpx.Client) -> None:
    sim.server.set_faults(count=1, stall_after_tokens=2, stall_s=0.4)
    result = _chat(sim, client, max_tokens=5)
    assert result.error is None and result.events[-1][1] == "[DONE]"
    received = [t for t, _ in result.events]
    gaps_s = [(b - a) / 1e9 for a, b in zip(received, received[1:])]
    record = sim.server.record_for(result.response_id)
    assert record is not None
    sent = [t for t, _, _ in record.events]  # the same clock as `received` (the sim runs in this process)
    # role, content, content, <stall>, content ... The stall is measured from when the server sent the
    # event before it: the client's own gap can come out shorter when that event reached it late (seen
    # with both cores loaded: 0.3999 s).
    assert (sent[3] - sent[2]) / 1e9 >= 0.4
    assert (received[3] - sent[2]) / 1e9 >= 0.4
    assert max(gaps_s[:2]) < 0.3


def test_stall_runs_into_the_clients_read_timeout(sim: SimHandle) -> None:
    sim.server.set_faults(count=1, stall_after_tokens=1, stall_s=5.0)
    with httpx.Client(timeout=httpx.Timeout(10.0, read=0.3)) as short:
        result = stream(short, sim.url + "/chat/completions", chat_body(max_tokens=5))
    assert result.error == "ReadTimeout"
    assert len(result.events) == 2  # role and one token


def test_error_event_ends_the_stream_without_done(sim: SimHandle, client: httpx.Client) -> None:
    sim.server.set_faults(count=1, error_event_after_tokens=1)
    result = _chat(sim, client, max_tokens=8)
    assert result.status == 200 and result.error is None  # a clean end of body, like llama.cpp
    last = json.loads(result.events[-1][1])
    assert set(last) == {"error"}
    assert set(last["error"]) == {"message", "type", "code"} and last["error"]["code"] == 500
    assert "[DONE]" not in [data for _, data in result.events]
    record = sim.server.record_for(result.response_id)
    assert record is not None and record.outcome == "error_event"
    assert [k for _, k, _ in record.events] == ["role", "content", "error"]


def test_first_token_delay_slows_only_the_first_token(client: httpx.Client) -> None:
    # the role chunk sent on admission marks when the request was scheduled
    with start_sim_in_thread(SimConfig(**FAST, role_chunk_at="admitted")) as sim:
        sim.server.set_faults(count=1, first_token_delay_ms=300)
        result = _chat(sim, client, max_tokens=6)
        record = sim.server.record_for(result.response_id)
    assert record is not None
    role_at, first_token_at = record.times_ns("role")[0], record.times_ns("content")[0]
    assert (role_at - record.t_received_ns) / 1e6 < 150  # admitted at once
    assert (first_token_at - record.t_received_ns) / 1e6 >= 300
    tokens = record.times_ns("content", "finish")
    assert max((b - a) / 1e6 for a, b in zip(tokens, tokens[1:])) < 150


def test_bad_json_sends_one_malformed_data_line(sim: SimHandle, client: httpx.Client) -> None:
    sim.server.set_faults(count=1, bad_json=True)
    result = _chat(sim, client, max_tokens=4)
    payloads = [data for _, data in result.events]
    broken = []
    for data in payloads[:-1]:
        try:
            json.loads(data)
        except json.JSONDecodeError:
            broken.append(data)
    assert len(broken) == 1 and broken[0].startswith("{")
    assert payloads[1] == broken[0]  # right before the first content chunk
    assert payloads[-1] == "[DONE]"
    assert result.json_events()[-1]["usage"]["completion_tokens"] == 4


def test_empty_finishes_without_content(sim: SimHandle, client: httpx.Client) -> None:
    sim.server.set_faults(count=1, empty=True)
    result = _chat(sim, client, max_tokens=8)
    chunks = result.json_events()
    # the role chunk, then a finish-only chunk (`delta: {}`): no token event at all
    assert [c["choices"][0]["delta"] for c in chunks[:-1]] == [{"role": "assistant", "content": ""}, {}]
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"]["completion_tokens"] == 0
    assert result.events[-1][1] == "[DONE]"


def test_slow_headers_delay_the_response_headers(sim: SimHandle, client: httpx.Client) -> None:
    sim.server.set_faults(count=1, slow_headers_s=0.3)
    start = time.perf_counter()
    with client.stream("POST", sim.url + "/chat/completions", json=chat_body(max_tokens=2)) as response:
        headers_after = time.perf_counter() - start
        response.read()
    assert response.status_code == 200
    assert headers_after >= 0.3


@pytest.mark.parametrize(
    ("faults", "status", "code"),
    [
        ({"rate_limit": True}, 429, "rate_limit_exceeded"),
        ({"forbidden": True}, 403, "forbidden"),
        ({"fail_rate": 1.0}, 500, 500),
    ],
)
def test_http_error_faults(sim: SimHandle, client: httpx.Client, faults: dict, status: int, code) -> None:
    sim.server.set_faults(count=1, **faults)
    response = client.post(sim.url + "/chat/completions", json=chat_body())
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code
    if status == 429:
        assert response.headers["retry-after"] == "2"
    record = sim.server.record_for(response.headers["x-sim-response-id"])
    assert record is not None and record.outcome == f"http_{status}" and record.events == []
    assert client.post(sim.url + "/chat/completions", json=chat_body(stream=False)).status_code == 200


def test_fail_rate_fails_a_share_of_requests(client: httpx.Client) -> None:
    with start_sim_in_thread(
        SimConfig(model="sim-test", ttft_ms=1, itl_ms=0.5, fail_rate=0.5, seed=7)
    ) as sim:
        statuses = [
            client.post(sim.url + "/chat/completions", json=chat_body(max_tokens=1, stream=False)).status_code
            for _ in range(30)
        ]
    assert set(statuses) == {200, 500}
    assert 5 <= statuses.count(500) <= 25


def test_api_key_guards_the_v1_paths_only(client: httpx.Client) -> None:
    secret = "sk-sim-test-secret"
    with start_sim_in_thread(SimConfig(**FAST, api_key=secret)) as sim:
        url = sim.url + "/chat/completions"
        missing = client.post(url, json=chat_body(stream=False))
        wrong = client.post(url, json=chat_body(stream=False), headers={"Authorization": "Bearer nope"})
        right = client.post(url, json=chat_body(stream=False), headers={"Authorization": f"Bearer {secret}"})
        models = client.get(sim.url + "/models")
        assert (missing.status_code, wrong.status_code, right.status_code, models.status_code) == (
            401,
            401,
            200,
            401,
        )
        assert missing.json()["error"]["code"] == "invalid_api_key"
        assert client.get(sim.base_url + "/metrics").status_code == 200
        assert client.get(sim.base_url + "/health").status_code == 200
        shown = client.get(sim.base_url + "/sim/faults").text
        assert secret not in shown and '"api_key":"set"' in shown


def test_faults_injected_over_http(sim: SimHandle, client: httpx.Client) -> None:
    base = sim.base_url
    posted = client.post(base + "/sim/faults", json={"count": 2, "error_event_after_tokens": 0})
    assert posted.status_code == 200
    assert posted.json()["pending"] == [{"count": 2, "error_event_after_tokens": 0}]
    first, second, third = (_chat(sim, client, max_tokens=3) for _ in range(3))
    assert "error" in json.loads(first.events[-1][1]) and "error" in json.loads(second.events[-1][1])
    assert third.events[-1][1] == "[DONE]"
    assert client.get(base + "/sim/faults").json()["pending"] == []

    # Without count the fault stands until reset.
    assert client.post(base + "/sim/faults", json={"rate_limit": True}).status_code == 200
    assert client.get(base + "/sim/faults").json()["faults"]["rate_limit"] is True
    assert client.post(sim.url + "/chat/completions", json=chat_body()).status_code == 429
    assert client.post(sim.url + "/chat/completions", json=chat_body()).status_code == 429
    assert client.post(base + "/sim/reset").status_code == 200
    assert client.get(base + "/sim/faults").json()["faults"]["rate_limit"] is False
    assert client.post(sim.url + "/chat/completions", json=chat_body(stream=False)).status_code == 200

    bad = client.post(base + "/sim/faults", json={"no_such_fault": 1})
    assert bad.status_code == 400 and "no_such_fault" in bad.json()["error"]["message"]
    assert client.post(base + "/sim/faults", json={"cut_after_tokens": "two"}).status_code == 400


def test_records_are_readable_over_http(sim: SimHandle, client: httpx.Client) -> None:
    result = _chat(sim, client, max_tokens=2)
    record = client.get(f"{sim.base_url}/sim/records/{result.response_id}").json()
    assert [kind for _, kind, _ in record["events"]] == ["role", "content", "finish", "usage", "done"]
    assert client.get(sim.base_url + "/sim/records/chatcmpl-unknown").status_code == 404


def test_stopping_with_a_stalled_stream_is_quick(client: httpx.Client) -> None:
    sim = start_sim_in_thread(SimConfig(**FAST, stall_after_tokens=1, stall_s=60.0))
    with client.stream("POST", sim.url + "/chat/completions", json=chat_body(max_tokens=5)) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")  # role
        assert next(lines) == ""
        assert '"content":" ' in next(lines)  # the one token before the stall
        start = time.perf_counter()
        sim.stop()
        assert time.perf_counter() - start < 3.0
        with pytest.raises(httpx.HTTPError):
            for _ in lines:
                pass
