"""Real vLLM's `llm_request` spans into lpxtop's receiver, joined to probes that carry a traceparent.

vLLM started with `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf OTEL_BSP_SCHEDULE_DELAY=500
--otlp-traces-endpoint` pointing at the receiver: each probe's span comes back with the probe's trace id,
and for each joined probe the server's TTFT plus the time outside it is the client's TTFT, exactly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Iterator

import pytest

from tests.support.realservers import ServerProcess, import_lpxtop, require_built, running, start_server

pytestmark = [pytest.mark.realserver, pytest.mark.timeout(600)]

MODEL = "tiny-llama"  # the smallest: this module starts its own vLLM (tracing is a start-up flag)
PROBES = 12


@pytest.fixture(scope="module")
def receiver():
    traces = import_lpxtop("lpxtop.engine.traces", "TraceJoin", "TraceReceiver", "ReceiverSettings")
    from lpxtop.engine.traces import otlp

    if not otlp.available():
        pytest.skip("opentelemetry-proto is not installed: pip install -e '.[test]'")
    join = traces.TraceJoin(wait_s=30.0)
    with traces.TraceReceiver(join, traces.ReceiverSettings(port=0)) as r:
        yield r, join


@pytest.fixture(scope="module")
def vllm_traced(receiver) -> Iterator[ServerProcess]:
    require_built("vllm")
    r, _ = receiver
    server = start_server(
        "vllm-otel", "start-vllm.sh", ["--otlp-traces-endpoint", f"http://127.0.0.1:{r.address[1]}/v1/traces"],
        {"MODEL": MODEL, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_BSP_SCHEDULE_DELAY": "500"},
    )
    with running(server) as ready:
        yield ready


def test_probes_join_vllms_own_spans(vllm_traced, receiver):
    from lpxtop.engine.probe import run_probe
    from lpxtop.engine.traces import same_host
    from lpxtop.engine.traces.context import perf_to_wall_offset_ns
    from lpxtop.http import HttpClient
    from lpxtop.model.endpoint import EndpointConfig

    r, join = receiver
    base = EndpointConfig(name="vllm", url=vllm_traced.api_url, model=MODEL, max_tokens=16, timeout_s=60.0,
                          first_token_timeout_s=60.0, connect_timeout_s=5.0)

    async def probes():
        sent = []
        async with HttpClient() as client:
            for _ in range(PROBES):
                trace_id = os.urandom(16).hex()
                config = dataclasses.replace(base, headers=(("traceparent", f"00-{trace_id}-{os.urandom(8).hex()}-01"),))
                sample = await run_probe(client, config)
                join.note_request(trace_id, endpoint="vllm", sent_wall_ns=sample.start_ns + perf_to_wall_offset_ns(),
                                  client_ttft_ms=sample.ttft_ms, client_e2e_ms=sample.e2e_ms,
                                  same_host=same_host(base.url))
                sent.append((trace_id, sample))
        return sent

    sent = asyncio.run(probes())
    ok = [(t, s) for t, s in sent if s.ok and s.ttft_ms is not None]
    assert len(ok) >= PROBES - 2, [s.error_text for _, s in sent]
    deadline = time.monotonic() + 30
    while join.pending("vllm") and time.monotonic() < deadline:
        time.sleep(0.2)
    summary = join.snapshot("vllm")
    assert summary.probes_joined >= 0.9 * len(sent), (summary.to_json(), r.stats().to_json())
    joined = {j.trace_id: j for j in summary.recent}
    for trace_id, sample in ok:
        j = joined.get(trace_id)
        if j is None:
            continue
        assert j.server == "vllm"
        assert j.server_ttft_ms + j.outside_ms == pytest.approx(sample.ttft_ms, abs=1e-9)  # exact, for that very request
        assert j.queue_ms >= 0 and j.prefill_ms >= 0 and j.decode_ms >= 0
        assert j.to_server_ms is not None and j.to_server_ms > -1.0  # one clock: loopback
    stats = r.stats()
    assert stats.dropped_total == 0, stats.to_json()
