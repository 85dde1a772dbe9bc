"""The latency chain end to end over loopback: lpxtop's probes carry a traceparent, the simulator sends
vLLM's `llm_request` spans to lpxtop's receiver, the join gives each probe its segments, and the
chain's figures agree with the simulator's own record of each request."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from lpxtop.engine.probe import run_probe
from lpxtop.engine.traces import ReceiverSettings, TraceJoin, TraceReceiver, same_host
from lpxtop.engine.traces.context import perf_to_wall_offset_ns
from lpxtop.http import HttpClient
from lpxtop.model.probe import Percentiles
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.sim import endpoint
from tests.support.waiting import wait_for

AGREE_MS = 2.0


async def probe_with_trace(client, base, join: TraceJoin):
    sample = await run_probe(client, base)  # the measured stream sends its own traceparent (sample.trace_id)
    # the send time on the wall clock, from the probe's own perf_counter stamp (not Sample.wall_time,
    # read separately, a thread switch away from it when the sim and the receiver share the process)
    sent_wall_ns = sample.start_ns + perf_to_wall_offset_ns()
    join.note_request(sample.trace_id, endpoint=base.name, sent_wall_ns=sent_wall_ns,
                      client_ttft_ms=sample.ttft_ms, client_e2e_ms=sample.e2e_ms, kind="probe",
                      same_host=same_host(base.url))
    return sample.trace_id, sample


@pytest.fixture
def receiver():
    join = TraceJoin(wait_s=20.0)
    with TraceReceiver(join, ReceiverSettings(port=0)) as r:
        yield r, join, f"http://127.0.0.1:{r.address[1]}/v1/traces"


async def test_probes_join_their_spans_and_the_chain_agrees_with_the_sims_record(receiver):
    r, join, url = receiver
    config = SimConfig(model="m", ttft_ms=20, itl_ms=4, max_num_seqs=2, otlp_traces_endpoint=url,
                       otlp_schedule_delay_s=0.1, jitter=0.0)
    with start_sim_in_thread(config) as sim:
        base = endpoint(sim.url, name="sim", max_tokens=12)
        async with HttpClient() as client:
            # 4 at a time against 2 slots: half of them queue, so queue times are not all zero
            results = []
            for _ in range(5):
                results += await asyncio.gather(*(probe_with_trace(client, base, join) for _ in range(4)))
        assert all(s.ok for _, s in results), [s.error_text for _, s in results]
        wait_for(lambda: join.pending("sim") == 0, timeout=10.0)
        records = {rec.trace_id: rec for rec in sim.server.records}
    summary = join.snapshot("sim")
    assert summary.probes_joined == 20 and summary.probes_unjoined == 0
    joined = {j.trace_id: j for j in summary.recent}
    assert set(joined) == {t for t, _ in results}
    for trace_id, sample in results:
        j, rec = joined[trace_id], records[trace_id]
        # each joined figure is the sim's own, to the microsecond the span's double carries
        assert j.queue_ms == pytest.approx(rec.server_queue_ms, abs=1e-3)
        assert j.prefill_ms == pytest.approx(rec.server_prefill_ms, abs=1e-3)
        assert j.decode_ms == pytest.approx(rec.server_decode_ms, abs=1e-3)
        assert j.server_ttft_ms == pytest.approx(rec.server_ttft_ms, abs=1e-3)
        assert j.server_ttft_ms + j.outside_ms == pytest.approx(sample.ttft_ms, abs=1e-9)  # exact by construction
        # to the server: the sim's receipt, on one clock with the probe's send
        assert j.to_server_ms == pytest.approx((rec.t_received_ns - sample.start_ns) / 1e6, abs=0.5)
        # outside holds to-server, and the way back of the first token
        assert j.outside_ms >= j.to_server_ms - 0.5
    truth = list(records.values())
    for name, record_field in (("queue_ms", "server_queue_ms"), ("prefill_ms", "server_prefill_ms"),
                               ("decode_ms", "server_decode_ms"), ("server_ttft_ms", "server_ttft_ms")):
        expected = Percentiles.of([getattr(rec, record_field) for rec in truth]).p50
        assert abs(getattr(summary, name).p50 - expected) < AGREE_MS, name
    assert summary.queue_ms.max > 5.0  # some requests did wait for a slot
    assert summary.all_requests.count == 20
    stats = r.stats()
    assert stats.spans_read == 20 and stats.dropped_total == 0


async def test_background_load_is_the_population_and_probes_stay_their_own(receiver):
    r, join, url = receiver
    config = SimConfig(model="m", ttft_ms=10, itl_ms=3, max_num_seqs=4, background_load=(3, 3, 60.0),
                       background_max_tokens=(4, 8), background_prompt_tokens=(8, 16),
                       otlp_traces_endpoint=url, otlp_schedule_delay_s=0.1)
    with start_sim_in_thread(config) as sim:
        base = endpoint(sim.url, name="sim", max_tokens=8)
        async with HttpClient() as client:
            results = [await probe_with_trace(client, base, join) for _ in range(6)]
        wait_for(lambda: join.pending("sim") == 0, timeout=10.0)
        wait_for(lambda: join.snapshot("sim").all_requests.count > 12, timeout=10.0)
    summary = join.snapshot("sim")
    assert summary.probes_joined == len(results) == 6
    assert summary.all_requests.count > summary.probes_joined  # the virtual users' requests too
    assert summary.all_requests.queue_ms is not None


async def test_request_without_traceparent_gets_a_new_trace_and_joins_nothing(receiver):
    r, join, url = receiver
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=1, otlp_traces_endpoint=url,
                                       otlp_schedule_delay_s=0.05)) as sim:
        # lpxtop's own requests always carry one: another client's request, without
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}
        async with httpx.AsyncClient() as plain:
            answer = await plain.post(f"{sim.url}/chat/completions", json=body, timeout=10.0)
        assert answer.status_code == 200 and "[DONE]" in answer.text
        wait_for(lambda: r.stats().spans_read == 1, timeout=10.0)
        (record,) = sim.server.records
    assert record.trace_id is None
    assert join.snapshot("sim").probes_joined == 0
    assert join.sources() and join.population(join.sources()[0]).count == 1


async def test_sim_without_a_receiver_counts_failed_exports_and_keeps_serving():
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=1, otlp_schedule_delay_s=0.05,
                                       otlp_traces_endpoint="http://127.0.0.1:9/v1/traces")) as sim:
        async with HttpClient() as client:
            samples = [await run_probe(client, endpoint(sim.url, max_tokens=4)) for _ in range(3)]
        assert all(s.ok for s in samples)
        wait_for(lambda: sim.server.spans.counts["failed"] == 3, timeout=10.0)


def test_sim_cli_without_opentelemetry_proto_says_what_to_install():
    import subprocess
    import sys

    code = ("import sys; sys.modules['opentelemetry.proto.collector.trace.v1'] = None\n"
            "from lpxtop.cli.sim import main\n"
            "sys.exit(main(['--port', '0', '--otlp-traces-endpoint', 'http://127.0.0.1:9/v1/traces']))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--otlp-traces-endpoint" in result.stderr and "pip install 'lpxtop[otel]'" in result.stderr


def test_sim_cli_refuses_a_non_http_endpoint():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "lpxtop.sim", "--port", "0", "--otlp-traces-endpoint",
                             "127.0.0.1:4317"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "http://" in result.stderr
