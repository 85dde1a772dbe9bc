"""Hostile streams (the probe's part): each answer comes from a real loopback
server that writes exactly the bytes a broken server or proxy sends, and the probe classifies it,
within its bounds, without raising."""

from __future__ import annotations

import json
import time

import pytest

from lpxtop.engine.probe import fetch_models, run_probe
from lpxtop.engine.probe import stream as probe_module
from lpxtop.http import HttpClient
from lpxtop.model.probe import ERROR_KINDS
from tests.support.hostile import HostileServer, Reply
from tests.support.sim import endpoint

pytestmark = pytest.mark.timing  # measures time against tolerances: runs alone under pytest-xdist

HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def event(obj: dict | str) -> bytes:
    return b"data: " + (obj if isinstance(obj, str) else json.dumps(obj)).encode() + b"\n\n"


def chunk(delta: dict | None = None, finish: str | None = None, **extra) -> bytes:
    choice = {"index": 0, "delta": {} if delta is None else delta, "finish_reason": finish, **extra}
    return event({**HEAD, "choices": [choice]})


ROLE = chunk({"role": "assistant", "content": ""})
DONE = b"data: [DONE]\n\n"


def tokens(n: int) -> list[bytes]:
    return [chunk({"content": f" t{i}"}) for i in range(n)]


def usage(completion: object = 4, prompt: object = 5) -> bytes:
    return event({**HEAD, "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})


def stream(n: int = 4, completion: object = 4, prompt: object = 5) -> list[bytes]:
    return [ROLE, *tokens(n), chunk({}, "length"), usage(completion, prompt), DONE]


@pytest.fixture(autouse=True)
def short_waits(monkeypatch):
    """The probe's own short waits, shorter still: after [DONE] it waits for the body's end (these servers
    hold it open), and an error status's body has a bound of its own; what is tested is that both are
    bounded, not their default lengths."""
    monkeypatch.setattr(probe_module, "DRAIN_TIMEOUT_S", 0.05)
    monkeypatch.setattr(probe_module, "ERROR_BODY_TIMEOUT_S", 0.3, raising=False)


async def probe(server: HostileServer, **kw):
    async with HttpClient() as client:
        began = time.monotonic()
        sample = await run_probe(client, endpoint(server.url, model="m", **kw))
    assert sample.error_kind is None or sample.error_kind in ERROR_KINDS
    return sample, time.monotonic() - began


# --- token counts that are not counts --------------------------------------------------------------


async def test_a_400_digit_completion_count_is_not_a_count():
    with HostileServer(Reply(stream(4, completion=int("9" * 400)))) as server:
        sample, _ = await probe(server)
    assert sample.ok, sample.error_text
    assert sample.output_tokens == 4 and sample.output_tokens_approx
    assert sample.tpot_ms is not None and sample.tpot_ms < 1e6
    json.dumps(sample.output_tokens, allow_nan=False)


@pytest.mark.parametrize("bogus", [-3, 0, True, False, 2.5, "7", None, float("nan"), 1e300, [4], {"n": 4}])
async def test_negative_boolean_zero_or_odd_counts_fall_back_to_counted_events(bogus):
    body = stream(4).copy()
    usage_obj = {"prompt_tokens": bogus, "completion_tokens": bogus}
    body[-2] = b"data: " + json.dumps({**HEAD, "choices": [], "usage": usage_obj}).encode() + b"\n\n"
    with HostileServer(Reply(body)) as server:
        sample, _ = await probe(server)
    assert sample.ok, sample.error_text
    assert sample.output_tokens == 4 and sample.output_tokens_approx
    assert sample.prompt_tokens is None


async def test_an_integral_float_count_is_a_count():
    with HostileServer(Reply(stream(4, completion=4.0, prompt=5.0))) as server:
        sample, _ = await probe(server)
    assert sample.output_tokens == 4 and not sample.output_tokens_approx and sample.prompt_tokens == 5


# --- the end of the stream ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "split",
    [
        [b"data: [DO", b"NE]\n\n"],
        [b"data: [D", b"ON", b"E]\n\n"],  # a marker in three reads
        [b"data: [DONE]", b"\n", b"\n"],  # the marker whole, its blank line later
        [b"da", b"ta: [DONE]\r", b"\n\r\n"],
    ],
)
async def test_done_split_across_reads_ends_the_probe(split):
    pieces = [ROLE, *tokens(5), chunk({}, "length"), usage(5), *split]
    with HostileServer(Reply(pieces, gap_s=0.02, hold_s=5.0)) as server:
        sample, took = await probe(server, first_token_timeout_s=3.0)
    assert sample.ok, sample.error_text
    assert sample.output_tokens == 5 and not sample.output_tokens_approx
    assert took < 2.0, "[DONE] ended the probe when it came, not the read timeout"


async def test_done_split_before_the_first_token_ends_the_probe():
    with HostileServer(Reply([ROLE, b"data: [D", b"ON", b"E]\n\n"], gap_s=0.02, hold_s=5.0)) as server:
        sample, took = await probe(server, first_token_timeout_s=3.0)
    assert sample.error_kind == "empty", sample.error_text
    assert took < 2.0


# --- errors that are not errors, and successes that are not successes ------------------------------


async def test_error_null_in_every_chunk_is_not_an_error_event():
    pieces = [chunk({"role": "assistant", "content": ""}, error=None)]
    pieces += [event({**HEAD, "error": None, "choices": [{"index": 0, "delta": {"content": "x"}}]})] * 3
    pieces += [event({**HEAD, "error": None, "choices": [], "usage": {"completion_tokens": 3}}), DONE]
    with HostileServer(Reply(pieces)) as server:
        sample, _ = await probe(server)
    assert sample.ok, sample.error_text
    assert sample.output_tokens == 3


@pytest.mark.parametrize(
    ("finish", "detail", "message"),
    [
        ({"finish_reason": "error"}, {}, "finish_reason 'error'"),
        ({"finish_reason": "error"}, {"error": {"message": "engine core died"}}, "engine core died"),
        ({"finish_reason": "abort"}, {}, "finish_reason 'abort'"),
    ],
)
async def test_finish_reason_error_is_not_a_success(finish, detail, message):
    last = event({**HEAD, "choices": [{"index": 0, "delta": {"content": "x"}, **finish}], **detail})
    with HostileServer(Reply([ROLE, *tokens(3), last, usage(4), DONE])) as server:
        sample, _ = await probe(server)
    assert sample.error_kind == "error_event" and message in sample.error_message


async def test_an_sse_error_event_by_name_is_an_error_event():
    pieces = [ROLE, *tokens(2), b'event: error\ndata: {"message": "overloaded"}\n\n']
    with HostileServer(Reply(pieces, hold_s=3.0)) as server:
        sample, took = await probe(server)
    assert sample.error_kind == "error_event" and "overloaded" in sample.error_message
    assert took < 2.0


@pytest.mark.parametrize("beat", [b"data:\n\n", b"data: \n\n", b": ping\n\n", b"data:\r\n\r\n", b":\n\n", b"\n"])
async def test_heartbeats_and_comments_are_ignored(beat):
    pieces = [beat, ROLE, beat, tokens(1)[0], beat, beat, *tokens(3), beat, chunk({}, "length"), beat, usage(4), beat, DONE]
    with HostileServer(Reply(pieces, gap_s=0.01)) as server:
        sample, _ = await probe(server)
    assert sample.ok, sample.error_text
    assert sample.output_tokens == 4 and len(sample.token_event_ms) == 4


async def test_a_heartbeat_is_not_the_first_event():
    with HostileServer(Reply([b"data:\n\n", ROLE, *tokens(1), DONE], gap_s=0.1)) as server:
        sample, _ = await probe(server)
    assert sample.ok, sample.error_text
    assert sample.first_event_ms >= 100, "the first event is the role chunk, 0.1 s after the heartbeat"


async def test_a_bom_before_the_first_event_does_not_delay_the_first_token():
    with HostileServer(Reply([b"\xef\xbb\xbf" + tokens(1)[0], *tokens(2), usage(3), DONE], gap_s=0.05)) as server:
        sample, _ = await probe(server)
    assert sample.ok, sample.error_text
    assert len(sample.token_event_ms) == 3
    assert sample.ttft_ms < 40, "the first token is the first event, not the second one 50 ms later"


@pytest.mark.parametrize("pieces", [[b"\xef\xbb\xbf" + ROLE], [b"\xef", b"\xbb\xbf" + ROLE], [b"\xef\xbb\xbfdata: ", ROLE[6:]]])
async def test_a_bom_split_anywhere_before_the_first_event_loses_nothing(pieces):
    with HostileServer(Reply([*pieces, *tokens(3), usage(3), DONE], gap_s=0.002)) as server:
        sample, _ = await probe(server)
    assert sample.ok and len(sample.token_event_ms) == 3 and sample.first_event_ms < sample.ttft_ms


# --- a server that does not stream ------------------------------------------------------------------


def completion_body() -> bytes:
    return json.dumps({
        "id": "chatcmpl-2", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello there"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }).encode()


@pytest.mark.parametrize(("content_type", "framing"), [("application/json", "length"), ("text/event-stream", "chunked"),
                                                      (None, "close"), ("application/json", "chunked")])
async def test_one_json_body_instead_of_a_stream_is_not_streamed(content_type, framing):
    headers = {"Content-Type": content_type} if content_type else {}
    body = completion_body()
    with HostileServer(Reply([b"\n " + body[:20], body[20:]], headers=headers, framing=framing)) as server:
        sample, _ = await probe(server)
    assert sample.error_kind == "not_streamed", sample.error_text
    assert "stream" in sample.error_message
    assert sample.output_tokens == 3 and not sample.output_tokens_approx and sample.ttft_ms is None
    assert sample.model == "m" and sample.http_status == 200


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b'{"error": {"message": "no capacity", "code": 503}}', "error_event"),
        (b"<html><body>Please log in to the proxy</body></html>", "not_streamed"),
        (b'{"object": "list"}', "bad_json"),
        (b"[1, 2, 3]", "bad_json"),
        (b"{not json", "bad_json"),
    ],
)
async def test_other_200_bodies_are_classified(body, kind):
    with HostileServer(Reply([body], headers={"Content-Type": "application/json"}, framing="length")) as server:
        sample, _ = await probe(server)
    assert sample.error_kind == kind, sample.error_text


# --- error statuses, bounded ----------------------------------------------------------------------


@pytest.mark.parametrize(("status", "kind"), [("503 Service Unavailable", "http_5xx"), ("429 Too Many Requests", "http_429")])
async def test_an_error_status_whose_body_trickles_keeps_its_status_and_retry_after(status, kind):
    body = b'{"error": {"message": "busy, come back later"}}'
    reply = Reply([body[i : i + 1] for i in range(len(body))], status=status,
                  headers={"Content-Type": "application/json", "Retry-After": "7"}, framing="length", gap_s=0.1)
    with HostileServer(reply) as server:
        sample, took = await probe(server, first_token_timeout_s=3.0)
    assert sample.error_kind == kind, sample.error_text
    assert sample.http_status == int(status[:3]) and sample.retry_after_s == 7.0
    assert sample.error_message.startswith(f"HTTP {status[:3]}: ")
    assert took < 2.0, "the error body has a short bound of its own, well under the first-token limit"


async def test_an_error_status_right_at_the_first_token_limit_keeps_its_status():
    reply = Reply([b'{"error": "x"}'], status="503 Service Unavailable", framing="length", length=100, hold_s=5.0)
    with HostileServer(reply) as server:
        sample, took = await probe(server, first_token_timeout_s=0.3)
    assert sample.error_kind == "http_5xx" and "x" in sample.error_message
    assert took < 1.5


@pytest.mark.parametrize(
    ("value", "expected"),
    [("inf", None), ("nan", None), ("1e400", None), ("-5", 0.0), ("99999999", 86400.0), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
     ("Wed, 99 Foo 2015", None), ("soon", None)],
)
async def test_retry_after_is_bounded(value, expected):
    reply = Reply([b"{}"], status="429 Too Many Requests", headers={"Retry-After": value}, framing="length")
    with HostileServer(reply) as server:
        sample, _ = await probe(server)
    assert sample.error_kind == "http_429" and sample.retry_after_s == expected


# A POST moved by 302 is not followed (it would become a GET); a 308 without a Location cannot be
# (a 308 with one is followed: tests/http/test_http_redirects.py).
@pytest.mark.parametrize(("status", "kind", "location"), [
    ("204 No Content", "http_other", None), ("202 Accepted", "http_other", None),
    ("302 Found", "http_3xx", "http://127.0.0.1:9/v1"), ("308 Permanent Redirect", "http_3xx", None)])
async def test_statuses_that_are_not_client_errors_are_not_http_4xx(status, kind, location):
    headers = {"Location": location} if location else {}
    with HostileServer(Reply([], status=status, headers=headers, framing="length")) as server:
        sample, _ = await probe(server)
    assert sample.error_kind == kind and sample.http_status == int(status[:3])


# --- /v1/models, bounded as a whole ---------------------------------------------------------------


async def test_models_that_trickle_are_bounded_as_a_whole():
    body = json.dumps({"object": "list", "data": [{"id": "m"}]}).encode()
    reply = Reply([body[i : i + 1] for i in range(len(body))], headers={"Content-Type": "application/json"},
                  framing="length", gap_s=0.2)
    with HostileServer(reply) as server:
        async with HttpClient() as client:
            began = time.monotonic()
            ids, error = await fetch_models(client, endpoint(server.url), timeout_s=0.5)
            took = time.monotonic() - began
    assert ids == () and error.startswith("read_timeout"), error
    assert took < 1.5


async def test_model_ids_are_server_text_made_safe():
    data = {"data": [{"id": "good-model"}, {"id": "\x1b]0;pwned\x07evil\x1b[2J"}, {"id": {"nested": 1}}, {"id": True},
                     {"id": "x" * 5000}, {"no": "id"}, "junk"]}
    with HostileServer(Reply([json.dumps(data).encode()], framing="length")) as server:
        async with HttpClient() as client:
            ids, error = await fetch_models(client, endpoint(server.url))
    assert error is None
    assert ids[0] == "good-model" and ids[1] == "evil" and len(ids) == 3 and len(ids[2]) == 256


# --- more variants -------------------------------------------------------------------------------


async def test_deeply_nested_json_is_bad_json_not_a_crash():
    with HostileServer(Reply([ROLE, b"data: " + b"[" * 100_000 + b"\n\n"], hold_s=2.0)) as server:
        sample, _ = await probe(server)
    assert sample.error_kind == "bad_json", sample.error_text


async def test_a_model_id_with_terminal_escapes_is_scrubbed_in_the_sample():
    evil = {**HEAD, "model": "m\x1b[2J\x1b]0;title\x07", "id": "\x9b31m" + "i" * 1000}
    pieces = [event({**evil, "choices": [{"index": 0, "delta": {"content": "x"}}]}), usage(1), DONE]
    with HostileServer(Reply(pieces)) as server:
        sample, _ = await probe(server)
    assert sample.ok and sample.model == "m" and "\x1b" not in sample.response_id and len(sample.response_id) <= 256


# --- any split of a real stream, any bytes: through the real client ------------------------------


async def test_real_capture_in_random_chunkings_over_a_socket_gives_the_same_sample():
    import random

    from tests.support.paths import FIXTURES

    raw = (FIXTURES / "sse" / "vllm-0.32.0-chat-stream-include-usage.txt").read_bytes()
    rng = random.Random(5)
    seen = set()
    for _ in range(4):
        cuts = sorted(rng.sample(range(1, len(raw)), rng.randint(1, 60)))
        pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)])]
        with HostileServer(Reply(pieces, gap_s=0.002)) as server:
            sample, _ = await probe(server)
        assert sample.ok, sample.error_text
        seen.add((len(sample.token_event_ms), sample.output_tokens, sample.finish_reason, sample.model))
    assert seen == {(8, 8, "length", "tiny-llama")}


async def test_arbitrary_bytes_over_a_socket_give_a_classified_sample():
    import random

    rng = random.Random(7)
    bodies = [bytes(rng.randrange(256) for _ in range(rng.randint(0, 600))) for _ in range(6)]
    bodies += [b"data: " + body for body in bodies[:3]] + [b"\xef\xbb\xbf{" + bodies[3], b"<" + bodies[4]]
    with HostileServer(lambda request: Reply([bodies.pop()], framing="close")) as server:
        while bodies:
            sample, took = await probe(server, first_token_timeout_s=0.5, timeout_s=1.0)
            assert not sample.ok and sample.error_kind in ERROR_KINDS and took < 2.0
