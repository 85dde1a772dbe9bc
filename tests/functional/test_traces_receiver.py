"""The OTLP receiver over real loopback sockets: protobuf, JSON and gzip as the specification says, the
forwarder, and hostile input (garbage, truncated, huge, gzip bombs, absurd times, duplicates, a flood)
counted and dropped without a crash."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time

import httpx
import pytest
from aiohttp import web

from lpxtop.engine.traces import ReceiverSettings, TraceJoin, TraceReceiver, otlp
from tests.support.traces_data import json_body, new_trace_id, protobuf_body, span, vllm_span
from tests.support.waiting import wait_for

PB = {"Content-Type": otlp.CONTENT_PROTOBUF}
JS = {"Content-Type": otlp.CONTENT_JSON}


@pytest.fixture
def running():
    join = TraceJoin(wait_s=5.0)
    with TraceReceiver(join, ReceiverSettings(port=0, max_body_bytes=256 * 1024)) as receiver:
        url = f"http://127.0.0.1:{receiver.address[1]}/v1/traces"
        with httpx.Client(timeout=10.0) as client:
            yield receiver, join, url, client


def _response(r: httpx.Response):
    p = otlp.load()
    if r.headers["content-type"].startswith(otlp.CONTENT_JSON):
        return r.json()
    return p.ExportTraceServiceResponse.FromString(r.content) if r.status_code == 200 else p.Status.FromString(r.content)


def test_listens_on_loopback_by_default():
    assert ReceiverSettings().host == "127.0.0.1" and ReceiverSettings().port == 4318


def test_protobuf_json_and_gzip_bodies_join(running):
    receiver, join, url, client = running
    ids = [new_trace_id() for _ in range(3)]
    for trace_id in ids:
        join.note_request(trace_id, endpoint="e", sent_wall_ns=time.time_ns() - 10**8, client_ttft_ms=20.0)
    r1 = client.post(url, content=protobuf_body(vllm_span(ids[0])), headers=PB)
    r2 = client.post(url, content=json_body(vllm_span(ids[1])), headers={"Content-Type": "application/json; charset=utf-8"})
    r3 = client.post(url, content=gzip.compress(protobuf_body(vllm_span(ids[2]))),
                     headers={**PB, "Content-Encoding": "gzip"})
    assert [r.status_code for r in (r1, r2, r3)] == [200, 200, 200]
    assert r1.headers["content-type"] == otlp.CONTENT_PROTOBUF and r2.headers["content-type"] == otlp.CONTENT_JSON
    assert not _response(r1).HasField("partial_success") and _response(r2) == {}
    assert join.snapshot("e").probes_joined == 3
    stats = receiver.stats()
    assert (stats.requests, stats.spans_received, stats.spans_read, stats.dropped) == (3, 3, 3, {})


def test_loading_spans_without_a_request_are_counted_unrecognized(running):
    receiver, join, url, client = running
    body = protobuf_body(span("Load weights", new_trace_id()), span("Allocate KV cache", new_trace_id()))
    assert client.post(url, content=body, headers=PB).status_code == 200
    assert receiver.stats().spans_unrecognized == 2 and receiver.stats().spans_read == 0


@pytest.mark.parametrize("headers, status", [
    ({"Content-Type": "text/plain"}, 415),
    ({}, 415),
    ({**PB, "Content-Encoding": "br"}, 415),
    ({**PB, "Content-Encoding": "gzip"}, 400),  # says gzip, is not
])
def test_wrong_types_and_encodings(running, headers, status):
    receiver, join, url, client = running
    r = client.post(url, content=protobuf_body(vllm_span(new_trace_id())), headers=headers)
    assert r.status_code == status
    assert otlp.load().Status.FromString(r.content).message  # a google.rpc.Status says what was wrong


def test_other_paths_and_methods(running):
    receiver, join, url, client = running
    assert client.get(url).status_code == 405
    assert client.post(url.replace("/v1/traces", "/v1/metrics"), content=b"", headers=PB).status_code == 404


HOSTILE = [
    ("garbage", b"\x00\xff" * 500, PB, 400),
    ("json garbage", b"{not json", JS, 400),
    ("json array", b"[]", JS, 400),
    ("bad hex id", b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"nothex"}]}]}]}', JS, 400),
    ("deep nesting", b"{\"a\":" * 20_000 + b"1" + b"}" * 20_000, JS, 400),
    ("too large", b"\x0a" * (300 * 1024), PB, 413),
    ("gzip bomb", gzip.compress(b"\0" * (20 * 1024 * 1024)), {**PB, "Content-Encoding": "gzip"}, 413),
]


@pytest.mark.parametrize("label, body, headers, status", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_bodies_are_refused_counted_and_the_receiver_goes_on(running, label, body, headers, status):
    receiver, join, url, client = running
    r = client.post(url, content=body, headers=headers)
    assert r.status_code == status, (label, r.text[:200])
    assert receiver.stats().dropped_total == 1
    trace_id = new_trace_id()
    join.note_request(trace_id, endpoint="e", sent_wall_ns=time.time_ns(), client_ttft_ms=20.0)
    assert client.post(url, content=protobuf_body(vllm_span(trace_id)), headers=PB).status_code == 200
    assert join.snapshot("e").probes_joined == 1


def test_truncated_body_and_a_client_that_hangs_up(running):
    receiver, join, url, client = running
    body = protobuf_body(*(vllm_span(new_trace_id()) for _ in range(20)))
    r = client.post(url, content=body[: len(body) // 2], headers=PB)
    assert r.status_code == 400
    port = receiver.address[1]
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:  # says 100 KB, sends 10 bytes, leaves
        sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                     b"Content-Length: 100000\r\n\r\n0123456789")
    assert client.post(url, content=protobuf_body(vllm_span(new_trace_id())), headers=PB).status_code == 200


def test_absurd_times_and_duplicates_are_counted(running):
    receiver, join, url, client = running
    now = time.time_ns()
    trace_id = new_trace_id()
    join.note_request(trace_id, endpoint="e", sent_wall_ns=now - 10**8, client_ttft_ms=20.0)
    body = protobuf_body(
        vllm_span(new_trace_id(), start_ns=now + 86_400 * 10**9),  # tomorrow
        vllm_span(new_trace_id(), start_ns=1),  # 1970
        vllm_span("0" * 32),
        vllm_span(trace_id, queue=0.005), vllm_span(trace_id, queue=0.900),  # the same trace twice
    )
    assert client.post(url, content=body, headers=PB).status_code == 200
    stats = receiver.stats()
    assert stats.dropped == {"bad_time": 2, "bad_trace_id": 1}
    summary = join.snapshot("e")
    assert summary.probes_joined == 1 and summary.queue_ms.p50 == pytest.approx(5.0)  # the first one
    assert join.counts["late_spans"] == 1


def test_spans_over_the_rate_are_a_partial_success_and_joins_wait_with_the_reason():
    join = TraceJoin(wait_s=0.5)
    with TraceReceiver(join, ReceiverSettings(port=0, spans_per_s=10.0)) as receiver:
        url = f"http://127.0.0.1:{receiver.address[1]}/v1/traces"
        trace_id = new_trace_id()
        join.note_request(trace_id, endpoint="e", sent_wall_ns=time.time_ns(), client_ttft_ms=20.0)
        spans = [vllm_span(new_trace_id()) for _ in range(30)] + [vllm_span(trace_id)]
        r = httpx.post(url, content=protobuf_body(*spans), headers=PB, timeout=10)
        assert r.status_code == 200
        partial = _response(r).partial_success
        assert partial.rejected_spans == 11 and "rate" in partial.error_message  # a bucket of 2 s = 20 spans
        assert receiver.stats().dropped == {"rate": 11}
        time.sleep(0.6)
        assert join.snapshot("e").unjoined_reasons == {"receiver_dropped": 1}


def test_busy_receiver_answers_503_with_retry_after():
    join = TraceJoin()
    with TraceReceiver(join, ReceiverSettings(port=0, max_concurrent=1, read_timeout_s=1.0)) as receiver:
        port = receiver.address[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5) as slow:
            slow.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                         b"Content-Length: 1000\r\n\r\n")
            time.sleep(0.3)  # the slow body holds the one slot
            r = httpx.post(f"http://127.0.0.1:{port}/v1/traces", content=b"", headers=PB, timeout=10)
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            slow.settimeout(5)
            assert b" 408 " in slow.recv(4096).split(b"\r\n", 1)[0] + b" "  # it gave up on the slow body
        assert receiver.stats().dropped == {"busy": 1, "slow_body": 1}


def test_flood_is_bounded_and_never_crashes():
    join = TraceJoin(wait_s=1.0)
    with TraceReceiver(join, ReceiverSettings(port=0, spans_per_s=2000.0)) as receiver:
        url = f"http://127.0.0.1:{receiver.address[1]}/v1/traces"
        body = protobuf_body(*(vllm_span(new_trace_id()) for _ in range(500)))
        deadline = time.monotonic() + 3.0
        statuses: list[int] = []
        errors: list[BaseException] = []

        def flood() -> None:
            with httpx.Client(timeout=5.0) as client:
                while time.monotonic() < deadline and len(statuses) < 400:
                    try:
                        statuses.append(client.post(url, content=body, headers=PB).status_code)
                    except httpx.HTTPError as exc:  # pragma: no cover - reported below
                        errors.append(exc)

        threads = [threading.Thread(target=flood) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert not errors and statuses and set(statuses) <= {200, 503}
        stats = receiver.stats()
        assert stats.spans_read + stats.dropped.get("rate", 0) == stats.spans_received
        assert stats.spans_read <= 2 * 2000 + 2000 * 4  # the bucket: 2 s saved up + the rate over ~4 s
        # still answering, and the population window is bounded
        assert httpx.post(url, content=b"", headers=PB, timeout=5).status_code == 200
        assert join.population(join.sources()[0]).count <= 20_000


class Collector:
    """The user's own OTLP collector: keeps what it is sent (aiohttp, on its own thread)."""

    def __init__(self, status: int = 200) -> None:
        self.bodies: list[tuple[bytes, str, str | None]] = []
        self.status = status
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._loop = None

    def _run(self) -> None:
        import asyncio

        async def handle(request: web.Request) -> web.Response:
            self.bodies.append((await request.read(), request.headers.get("Content-Type", ""),
                                request.headers.get("Content-Encoding")))
            return web.Response(status=self.status, body=b"")

        async def main() -> None:
            app = web.Application()
            app.router.add_post("/v1/traces", handle)
            runner = web.AppRunner(app, auto_decompress=False)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = runner.addresses[0][1]
            self._stop = asyncio.Event()
            self._loop = asyncio.get_running_loop()
            self._ready.set()
            await self._stop.wait()
            await runner.cleanup()

        asyncio.run(main())

    def __enter__(self) -> Collector:
        self._thread.start()
        self._ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(5)


def test_forward_passes_every_accepted_body_on_unchanged():
    with Collector() as collector:
        join = TraceJoin()
        settings = ReceiverSettings(port=0, forward_url=f"http://127.0.0.1:{collector.port}/v1/traces",
                                    spans_per_s=1.0)  # the join's rate limit does not limit forwarding
        with TraceReceiver(join, settings) as receiver:
            url = f"http://127.0.0.1:{receiver.address[1]}/v1/traces"
            pb = protobuf_body(*(vllm_span(new_trace_id()) for _ in range(5)))
            zipped = gzip.compress(json_body(vllm_span(new_trace_id())))
            assert httpx.post(url, content=pb, headers=PB).status_code == 200
            assert httpx.post(url, content=zipped, headers={**JS, "Content-Encoding": "gzip"}).status_code == 200
            assert httpx.post(url, content=b"garbage", headers=PB).status_code == 400  # not forwarded
            wait_for(lambda: receiver.stats().forwarded == 2, timeout=10)
        assert collector.bodies == [(pb, otlp.CONTENT_PROTOBUF, None), (zipped, otlp.CONTENT_JSON, "gzip")]


def test_forward_to_a_collector_that_is_down_or_failing_is_counted_and_reception_goes_on():
    with Collector(status=500) as failing:
        for forward_url, reason in ((f"http://127.0.0.1:{failing.port}/v1/traces", "http_500"),
                                    ("http://127.0.0.1:9/v1/traces", "unreachable")):
            join = TraceJoin()
            with TraceReceiver(join, ReceiverSettings(port=0, forward_url=forward_url)) as receiver:
                url = f"http://127.0.0.1:{receiver.address[1]}/v1/traces"
                for _ in range(3):
                    assert httpx.post(url, content=protobuf_body(vllm_span(new_trace_id())), headers=PB,
                                      timeout=5).status_code == 200
                wait_for(lambda r=receiver, k=reason: r.stats().forward_dropped.get(k) == 3, timeout=10)
                assert receiver.stats().spans_read == 3


def test_port_taken_is_an_oserror_at_start():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        with pytest.raises(OSError):
            TraceReceiver(TraceJoin(), ReceiverSettings(port=holder.getsockname()[1])).start()


def test_json_answer_for_a_partial_success_uses_the_json_mapping():
    join = TraceJoin()
    with TraceReceiver(join, ReceiverSettings(port=0, spans_per_s=1.0)) as receiver:
        url = f"http://127.0.0.1:{receiver.address[1]}/v1/traces"
        r = httpx.post(url, content=json_body(*(vllm_span(new_trace_id()) for _ in range(5))), headers=JS)
        data = json.loads(r.content)
        assert r.status_code == 200 and data["partialSuccess"]["rejectedSpans"] == "3"


def test_one_unparseable_span_is_refused_in_partial_success_and_the_others_join(running):
    receiver, join, url, client = running
    from tests.support.traces_data import proto_field

    trace_id = new_trace_id()
    join.note_request(trace_id, endpoint="e", sent_wall_ns=time.time_ns(), client_ttft_ms=20.0)
    scope = proto_field(2, vllm_span(trace_id).SerializeToString()) + proto_field(2, b"\x0a\x80\x80\x80")
    r = client.post(url, content=proto_field(1, proto_field(2, scope)), headers=PB)
    assert r.status_code == 200 and _response(r).partial_success.rejected_spans == 1
    assert receiver.stats().dropped == {"bad_span": 1}
    assert join.snapshot("e").probes_joined == 1


def test_json_bodies_have_their_own_smaller_limit():
    from lpxtop.engine.traces.receiver import MAX_JSON_BODY_BYTES

    join = TraceJoin()
    with TraceReceiver(join, ReceiverSettings(port=0)) as receiver:
        url = f"http://127.0.0.1:{receiver.address[1]}/v1/traces"
        spans = [vllm_span(new_trace_id()) for _ in range(400)]
        body = json_body(*spans)
        assert len(body) > MAX_JSON_BODY_BYTES
        assert httpx.post(url, content=body, headers=JS, timeout=10).status_code == 413
        assert httpx.post(url, content=protobuf_body(*spans), headers=PB, timeout=10).status_code == 200


def test_receiver_in_its_own_process_feeds_the_join_and_stops_cleanly():
    from lpxtop.engine.traces import TraceReceiverProcess

    join = TraceJoin(wait_s=5.0)
    receiver = TraceReceiverProcess(join, ReceiverSettings(port=0))
    receiver.start()
    try:
        url = f"http://127.0.0.1:{receiver.address[1]}/v1/traces"
        ids = [new_trace_id() for _ in range(3)]
        for trace_id in ids:
            join.note_request(trace_id, endpoint="e", sent_wall_ns=time.time_ns() - 10**8, client_ttft_ms=20.0)
        assert httpx.post(url, content=protobuf_body(*(vllm_span(t) for t in ids)), headers=PB, timeout=10).status_code == 200
        assert httpx.post(url, content=b"garbage", headers=PB, timeout=10).status_code == 400
        wait_for(lambda: join.snapshot("e").probes_joined == 3, timeout=10)
        wait_for(lambda: receiver.stats().spans_read == 3 and receiver.stats().dropped == {"bad_body": 1}, timeout=10)
        process = receiver._process
    finally:
        receiver.stop()
    assert not process.is_alive()
    with pytest.raises(httpx.ConnectError):
        httpx.post(url, content=b"", headers=PB, timeout=2)


def test_receiver_process_port_taken_is_an_oserror():
    from lpxtop.engine.traces import TraceReceiverProcess

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        with pytest.raises(OSError):
            TraceReceiverProcess(TraceJoin(), ReceiverSettings(port=holder.getsockname()[1])).start()


def test_receiver_process_that_dies_says_so():
    from lpxtop.engine.traces import TraceReceiverProcess

    receiver = TraceReceiverProcess(TraceJoin(), ReceiverSettings(port=0))
    receiver.start()
    try:
        receiver._process.kill()
        wait_for(lambda: receiver.stats().error is not None, timeout=10)
        assert receiver.stats().listening is None
    finally:
        receiver.stop()
