"""The sim's wire format against the vLLM 0.32 capture, its endpoints, and the truth record."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterator

import httpx
import pytest

from lpxtop.sim import SimConfig, SimHandle, start_sim_in_thread
from tests.support.sim import chat_body, fixture_events, stream
from tests.support.waiting import wait_for

VLLM_SSE = "sse/vllm-0.32.0-chat-stream-include-usage.txt"
FAST = {"model": "sim-test", "ttft_ms": 5.0, "itl_ms": 3.0}


@pytest.fixture
def sim() -> Iterator[SimHandle]:
    with start_sim_in_thread(SimConfig(**FAST)) as handle:
        yield handle


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10.0) as c:
        yield c


def _fixture_chunks() -> tuple[list[dict], list[str]]:
    payloads = fixture_events(VLLM_SSE)
    return [json.loads(p) for p in payloads if p != "[DONE]"], payloads


def test_chat_stream_has_the_shape_of_the_vllm_capture(sim: SimHandle, client: httpx.Client) -> None:
    expected, expected_payloads = _fixture_chunks()
    result = stream(client, sim.url + "/chat/completions", chat_body(max_tokens=8))
    assert result.status == 200
    assert result.headers["content-type"].startswith("text/event-stream")
    assert "content-encoding" not in result.headers
    got = result.json_events()

    # Same sequence as the capture: role chunk, 7 content chunks, finish chunk, usage chunk, [DONE].
    assert len(got) == len(expected) == 10
    assert result.events[-1][1] == expected_payloads[-1] == "[DONE]"
    role, contents, finish, usage = got[0], got[1:-2], got[-2], got[-1]
    exp_role, exp_content, exp_finish, exp_usage = expected[0], expected[1], expected[-2], expected[-1]
    # Keys in the same order, at every level.
    assert list(role) == list(exp_role)
    assert list(role["choices"][0]) == list(exp_role["choices"][0])
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    for chunk in contents:
        assert list(chunk) == list(exp_content)
        assert list(chunk["choices"][0]) == list(exp_content["choices"][0])
        assert chunk["choices"][0]["delta"]["content"]  # no empty chunks unless asked for
    assert list(finish["choices"][0]) == list(exp_finish["choices"][0])
    assert finish["choices"][0]["finish_reason"] == "length"
    assert finish["choices"][0]["delta"]["content"]  # vLLM sends the last token in the finish chunk
    assert list(usage) == list(exp_usage)
    assert usage["choices"] == []
    assert list(usage["usage"]) == ["prompt_tokens", "total_tokens", "completion_tokens"]
    assert usage["usage"]["completion_tokens"] == 8
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + 8
    assert re.fullmatch(r"vllm-0\.32\.0-[0-9a-f]{8}", usage["system_fingerprint"])

    ids = {c["id"] for c in got}
    assert len(ids) == 1 and re.fullmatch(r"chatcmpl-[0-9a-f]{16}", ids.pop())
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{16}", exp_role["id"])
    assert {c["object"] for c in got} == {"chat.completion.chunk"}
    assert {c["model"] for c in got} == {"sim-test"}
    # Framing: `data: <compact json>\n\n` per event, nothing else, like the capture.
    assert result.raw.endswith(b"data: [DONE]\n\n")
    assert all(part.startswith(b"data: {") for part in result.raw.split(b"\n\n")[:-2])
    assert b'": ' not in result.raw and b'", "' not in result.raw


def test_without_include_usage_there_is_no_usage_chunk(sim: SimHandle, client: httpx.Client) -> None:
    result = stream(client, sim.url + "/chat/completions", chat_body(max_tokens=3, usage=False))
    got = result.json_events()
    assert [bool(c["choices"]) for c in got] == [True, True, True, True]
    assert "usage" not in got[-1]
    assert result.events[-1][1] == "[DONE]"


def test_completions_stream_uses_text_and_no_role_chunk(sim: SimHandle, client: httpx.Client) -> None:
    body = {"model": "sim-test", "prompt": "Once upon a time", "max_tokens": 4, "stream": True}
    body["stream_options"] = {"include_usage": True}
    result = stream(client, sim.url + "/completions", body)
    got = result.json_events()
    assert len(got) == 5  # 3 content, finish, usage
    assert {c["object"] for c in got} == {"text_completion"}
    assert re.fullmatch(r"cmpl-[0-9a-f]{16}", got[0]["id"])
    assert all(c["choices"][0]["text"] for c in got[:4])
    assert [c["choices"][0]["finish_reason"] for c in got[:4]] == [None, None, None, "length"]
    assert got[4]["choices"] == [] and got[4]["usage"]["completion_tokens"] == 4
    assert result.events[-1][1] == "[DONE]"


def test_non_streaming_chat_returns_one_body_with_usage(sim: SimHandle, client: httpx.Client) -> None:
    response = client.post(sim.url + "/chat/completions", json=chat_body(max_tokens=6, stream=False))
    assert response.status_code == 200
    data = response.json()
    assert data["object"] == "chat.completion"
    assert data["choices"][0]["message"]["role"] == "assistant"
    assert len(data["choices"][0]["message"]["content"].split()) == 6  # one word per token
    assert data["choices"][0]["finish_reason"] == "length"
    assert data["usage"]["completion_tokens"] == 6
    record = sim.server.record_for(data["id"])
    assert record is not None and record.outcome == "ok"
    assert [(kind, n) for _, kind, n in record.events] == [("body", 6)]


def test_stream_options_without_stream_is_a_400_like_vllm(sim: SimHandle, client: httpx.Client) -> None:
    body = chat_body(stream=False)
    body["stream_options"] = {"include_usage": True}
    response = client.post(sim.url + "/chat/completions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == 400


def test_max_tokens_beyond_the_context_is_a_400(client: httpx.Client) -> None:
    with start_sim_in_thread(SimConfig(model="sim-test", max_model_len=64)) as small:
        response = client.post(small.url + "/chat/completions", json=chat_body(max_tokens=100, stream=False))
    assert response.status_code == 400
    assert "maximum context length is 64 tokens" in response.json()["error"]["message"]


def test_tokens_per_chunk_groups_tokens(client: httpx.Client) -> None:
    with start_sim_in_thread(SimConfig(**FAST, tokens_per_chunk=4)) as sim:
        result = stream(client, sim.url + "/chat/completions", chat_body(max_tokens=10))
        record = sim.server.record_for(result.response_id)
    got = result.json_events()
    texts = [c["choices"][0]["delta"]["content"] for c in got[1:-1]]
    assert [len(t.split()) for t in texts] == [4, 4, 2]
    assert got[-1]["usage"]["completion_tokens"] == 10
    assert record is not None
    assert [(k, n) for _, k, n in record.events] == [
        ("role", 0), ("content", 4), ("content", 4), ("finish", 2), ("usage", 0), ("done", 0),
    ]  # fmt: skip


def test_empty_content_chunks_carry_their_text_into_the_next_chunk(client: httpx.Client) -> None:
    with start_sim_in_thread(SimConfig(**FAST, empty_chunk_rate=0.5, seed=3)) as sim:
        result = stream(client, sim.url + "/chat/completions", chat_body(max_tokens=20))
        record = sim.server.record_for(result.response_id)
    got = result.json_events()
    contents = [c["choices"][0]["delta"]["content"] for c in got[1:-1]]
    assert record is not None
    empties = [k for _, k, _ in record.events if k == "empty_content"]
    assert empties, "seed 3 with rate 0.5 gives some empty chunks"
    assert contents.count("") == len(empties)
    assert len("".join(contents).split()) == 20  # no token lost
    assert got[-1]["usage"]["completion_tokens"] == 20  # usage, not chunk counting, gives the truth
    assert len(contents) == 20  # one chunk per token, empty or not


def test_models_health_version(sim: SimHandle, client: httpx.Client) -> None:
    models = client.get(sim.url + "/models")
    assert models.status_code == 200
    data = models.json()
    assert data["object"] == "list"
    entry = data["data"][0]
    assert (entry["id"], entry["object"], entry["owned_by"], entry["max_model_len"]) == (
        "sim-test", "model", "vllm", 4096,
    )  # fmt: skip
    assert isinstance(entry["created"], int)
    health = client.get(sim.base_url + "/health")
    assert (health.status_code, health.content) == (200, b"")
    assert client.get(sim.base_url + "/version").json() == {"version": "0.32.0"}


def test_unknown_model_is_a_vllm_404(sim: SimHandle, client: httpx.Client) -> None:
    response = client.post(sim.url + "/chat/completions", json=chat_body(model="no-such-model"))
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == 404
    assert error["message"] == "The model `no-such-model` does not exist."


def test_records_match_what_the_client_received(sim: SimHandle, client: httpx.Client) -> None:
    result = stream(client, sim.url + "/chat/completions", chat_body(max_tokens=12))
    record = sim.server.record_for(result.response_id)
    assert record is not None and record.outcome == "ok"
    kinds = [k for _, k, _ in record.events]
    assert kinds == ["role"] + ["content"] * 11 + ["finish", "usage", "done"]
    assert len(record.events) == len(result.events)
    assert record.tokens_sent == 12 == record.completion_tokens
    times = [t for t, _, _ in record.events]
    assert times == sorted(times)
    assert result.t_start_ns < record.t_received_ns <= times[0]
    for (t_sent, _, _), (t_recv, _) in zip(record.events, result.events, strict=True):
        # Same clock on both sides: a byte is received after it is sent, and soon after.
        assert t_sent <= t_recv
        assert t_recv - t_sent < 2_000_000_000
    # Token events are one decode step (3 ms +/- jitter, more on a busy machine) apart.
    token_times = record.times_ns("content", "finish")
    gaps_ms = [(b - a) / 1e6 for a, b in zip(token_times, token_times[1:])]
    assert statistics.median(gaps_ms) >= 2.0
    # The sim closes the record just after its last write: the client can have the bytes first.
    wait_for(lambda: record.t_done_ns is not None)
    assert record.t_done_ns >= times[-1]
    assert sim.server.records[-1] is record


def test_send_usage_false_ignores_include_usage(client: httpx.Client) -> None:
    with start_sim_in_thread(SimConfig(**FAST, send_usage=False)) as sim:
        result = stream(client, sim.url + "/chat/completions", chat_body(max_tokens=3))
    got = result.json_events()
    assert len(got) == 4 and all(c["choices"] for c in got)
    assert result.events[-1][1] == "[DONE]"


@pytest.mark.timing  # the sim's write times a few ms apart: runs alone under pytest-xdist
@pytest.mark.parametrize("role_chunk_at", ["received", "admitted", "first_token"])
def test_role_chunk_timing(client: httpx.Client, role_chunk_at: str) -> None:
    # One slot: the second request waits ~20 steps of 5 ms for the first to finish.
    config = SimConfig(model="sim-test", ttft_ms=5, itl_ms=5, max_num_seqs=1, role_chunk_at=role_chunk_at)
    with start_sim_in_thread(config) as sim:
        with client.stream("POST", sim.url + "/chat/completions", json=chat_body(max_tokens=20)) as first:
            queued = stream(client, sim.url + "/chat/completions", chat_body(max_tokens=2))
            first.read()
        record = sim.server.record_for(queued.response_id)
    assert record is not None
    wait_ms = (record.times_ns("role")[0] - record.t_received_ns) / 1e6
    role_to_token_ms = (record.times_ns("content")[0] - record.times_ns("role")[0]) / 1e6
    if role_chunk_at == "received":
        assert wait_ms < 50 and role_to_token_ms > 50  # sent at once, before the queue wait
    elif role_chunk_at == "admitted":
        assert wait_ms > 50 and role_to_token_ms >= 3  # after the queue wait, before the ~5 ms prefill
    else:
        assert wait_ms > 50 and role_to_token_ms < 5  # together with the first token
