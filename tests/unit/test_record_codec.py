"""Records to the file's compact JSON and back: equal records, and tolerance of added and removed fields."""

from __future__ import annotations

import dataclasses
import json

import pytest

from lpxtop import textsafe
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.events import GpuEvent, SampleEvent, ScrapeEvent, SystemEvent
from lpxtop.model.gpu import GpuDevice, GpuProcess, GpuSnapshot
from lpxtop.model.host import HostProcess, HostSnapshot
from lpxtop.model.probe import Sample
from lpxtop.model.server import ModelServerMetrics, ServerLatency, ServerMetrics
from lpxtop.model.snapshot import Snapshot
from lpxtop.record.codec import Decoder, Encoder, record_types
from lpxtop.record.reading import TYPES
from lpxtop.record.recorder import mask_endpoint
from tests.support.snapshot_data import fixed_snapshot


def roundtrip(value, encoder=None):
    encoder = encoder or Encoder()
    data = json.loads(json.dumps(encoder.encode(value)))  # through JSON text, as in the file
    return Decoder(encoder.layouts, TYPES).record(type(value), data)


def sample(**kw) -> Sample:
    values = dict(endpoint="e", wall_time=1_700_000_000.123456, start_ns=123_456_789_012, ok=True, http_status=200,
                  response_id="chatcmpl-1", model="m", connect_ms=0.25, first_event_ms=10.5, ttft_ms=12.345678,
                  e2e_ms=40.0, token_event_ms=(12.345678, 20.0, 40.0), tokens_per_event=(1, 1, 1), output_tokens=3,
                  prompt_tokens=7, finish_reason="length")
    values.update(kw)
    return Sample(**values)


def test_every_record_the_engine_publishes_comes_back_equal():
    server = ServerMetrics(kind="vllm", requests_running=3.0, requests_waiting=1.0, kv_cache_usage=0.5,
                           server_ttft_ms=ServerLatency(10.0, 90.0, 12.0),
                           per_model=(ModelServerMetrics("m", engines=2, requests_running=3.0),),
                           outcomes=(("stop", 4.0), ("length", 1.0)), models=("m",))
    gpu = GpuSnapshot(status="ok", devices=(GpuDevice(0, "H200", "GPU-1", util_pct=50.0, mem_used_bytes=2**34,
                                                      processes=(GpuProcess(42, "python", 2**33),),
                                                      mig_devices=(GpuDevice(1, "MIG", "MIG-1", parent_index=0),)),))
    host = HostSnapshot(cpu_pct=12.5, load_avg=(1.0, 0.5, 0.25), processes=(HostProcess("e", 42, children=2),))
    for record in (SampleEvent("e", sample()), ScrapeEvent("e", 1.5, server), GpuEvent(2.0, gpu),
                   SystemEvent(3.0, host, (), ())):
        assert roundtrip(record) == record
    assert roundtrip(sample(ok=False, error_kind="http_5xx", error_message="boom", token_event_ms=())) == sample(
        ok=False, error_kind="http_5xx", error_message="boom", token_event_ms=())


def test_a_whole_snapshot_comes_back_equal():
    snap = fixed_snapshot()
    back = roundtrip(snap)
    assert back == snap
    assert back.to_json() == snap.to_json()


def test_floats_keep_every_digit():
    s = sample(ttft_ms=0.1 + 0.2, token_event_ms=(1 / 3, 2 / 3))
    back = roundtrip(s)
    assert back.ttft_ms == 0.1 + 0.2 and back.token_event_ms == (1 / 3, 2 / 3)
    assert back.itl_ms == s.itl_ms and back.tpot_ms == s.tpot_ms


def test_a_file_with_a_field_this_lpxtop_does_not_know_and_without_one_it_has():
    encoder = Encoder()
    data = encoder.encode(sample())
    layout = list(encoder.layouts["Sample"])
    # as written by another version: "client_limited" added at the end, "finish_reason" not there yet
    index = layout.index("finish_reason")
    data = data[:index] + data[index + 1:] + [True]
    layouts = {**encoder.layouts, "Sample": [*layout[:index], *layout[index + 1:], "client_limited"]}
    back = Decoder(layouts, TYPES).record(Sample, data)
    assert back.finish_reason is None  # its default
    assert back.ttft_ms == 12.345678 and back.token_event_ms == (12.345678, 20.0, 40.0)


def test_a_required_field_missing_from_the_file_gets_an_empty_value():
    @dataclasses.dataclass(frozen=True)
    class Reading:
        name: str
        value: float
        tags: tuple[str, ...]

    back = Decoder({"Reading": ["name"]}, {"Reading": Reading}).record(Reading, ["x"])
    assert back == Reading("x", 0.0, ())


def test_text_goes_through_the_filter_and_header_values_are_masked():
    textsafe.register_secret("sk-codec-test-123456")
    encoder = Encoder(text=textsafe.redact, sanitizers={EndpointConfig: mask_endpoint})
    config = EndpointConfig(name="e", url="http://127.0.0.1:1/v1", headers=(("X-Token", "hdr-value-789"),))
    text = json.dumps([encoder.encode(sample(error_message="echo: sk-codec-test-123456")), encoder.encode(config)])
    assert "sk-codec-test-123456" not in text and "hdr-value-789" not in text
    assert textsafe.MASK in text and "X-Token" in text


def test_every_stored_type_has_a_unique_name():
    assert {"Sample", "ServerMetrics", "GpuDevice", "Snapshot", "EndpointInfo", "ControlEvent"} <= set(TYPES)
    assert TYPES["Snapshot"] is Snapshot

    @dataclasses.dataclass
    class Sample2:
        x: int

    Sample2.__name__ = "Sample"
    with pytest.raises(TypeError, match="both named 'Sample'"):
        record_types([Sample, Sample2])
