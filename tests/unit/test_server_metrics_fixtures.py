"""Every /metrics capture in tests/fixtures/metrics, normalized: kind and values read by hand.

Expected values were read from the capture files (the comment cites the line) or worked out on
paper from them; none comes from running the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lpxtop.engine.scrape.exposition import Exposition, NotPrometheusText
from lpxtop.engine.scrape.kinds import detect_kind
from lpxtop.engine.scrape.metric_names import BY_KIND, VLLM
from lpxtop.engine.scrape.ollama import ollama_metrics
from lpxtop.engine.scrape.tracker import MetricsTracker
from lpxtop.model.server import ServerMetrics

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"

VLLM_IDLE = "vllm-0.32.0-cpu-local-capture-idle.txt"
VLLM_LOAD = "vllm-0.32.0-cpu-local-capture-after-load.txt"


def text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def one_scrape(name: str) -> ServerMetrics:
    expo = Exposition.parse(text(name))
    names = detect_kind(expo)
    assert names is not None, name
    return MetricsTracker().update(expo, names, now=100.0, wall=1_000.0)


def test_vllm_v1_single_capture() -> None:
    m = one_scrape(VLLM_LOAD)
    assert (m.kind, m.status, m.variant) == ("vllm", "ok", "v1")
    assert m.models == ("tiny-llama",)  # model_name="tiny-llama" on every vllm: sample
    assert m.requests_running == 0.0  # line 57
    assert m.requests_waiting == 0.0  # line 60
    assert m.kv_cache_usage == 0.0  # line 72
    assert m.preemptions_total == 0.0  # line 111: present, so 0.0 and not None
    assert m.requests_swapped is None  # V1 has no num_requests_swapped
    # First scrape: no delta yet, so no rates or window quantiles (never lifetime totals).
    assert m.generation_tokens_per_s is None
    assert m.prompt_tokens_per_s is None
    assert m.server_ttft_ms is None and m.server_e2e_ms is None
    assert m.prefix_cache_hit_rate is None
    assert m.outcomes == ()
    assert m.window_s is None
    assert [(p.model, p.engines) for p in m.per_model] == [("tiny-llama", 1)]  # one engine="0"


def test_vllm_v1_idle_then_after_load_window() -> None:
    """Two real scrapes of one server 10 s apart; every value below was worked out by hand."""
    tracker = MetricsTracker(window_s=300.0)
    tracker.update(Exposition.parse(text(VLLM_IDLE)), VLLM, now=100.0, wall=1_000.0)
    m = tracker.update(Exposition.parse(text(VLLM_LOAD)), VLLM, now=110.0, wall=1_010.0)
    assert m.window_s == pytest.approx(10.0)
    # generation_tokens_total line 153: 24 -> 2784, over 10 s
    assert m.generation_tokens_per_s == pytest.approx((2784 - 24) / 10)
    # prompt_tokens_total line 117: 48 -> 519
    assert m.prompt_tokens_per_s == pytest.approx((519 - 48) / 10)
    # request_success_total line 160 (length): 2 -> 18; the other reasons stay 0 (lines 159-163)
    assert dict(m.outcomes) == {"stop": 0.0, "length": 16.0, "abort": 0.0, "error": 0.0, "repetition": 0.0}
    assert m.finished_requests_per_s == pytest.approx(1.6)
    # prefix_cache_hits line 81 stays 0 while queries (line 75) grow 48 -> 519
    assert m.prefix_cache_hit_rate == 0.0
    assert m.preemptions_per_s == 0.0
    assert m.spec_decode_acceptance_rate is None  # no spec_decode_* families
    # TTFT buckets, lines 288-290 and 309: le 0.005: 0->4, 0.01: 0->8, 0.02: 2->18, +Inf: 2->18.
    # Delta: 4, 8, 16, ..., 16 observations.
    # p50: rank 8 -> bucket (0.005, 0.01]: 0.005 + 0.005 * (8-4)/(8-4) = 0.010 s
    # p99: rank 15.84 -> bucket (0.01, 0.02]: 0.01 + 0.01 * (15.84-8)/(16-8) = 0.0198 s
    assert m.server_ttft_ms is not None
    assert m.server_ttft_ms.count == 16
    assert m.server_ttft_ms.p50 == pytest.approx(10.0)
    assert m.server_ttft_ms.p99 == pytest.approx(19.8)
    # The exact mean, Δsum/Δcount: TTFT _sum 0.033608 -> 0.182399 over 16 observations = 9.2994 ms.
    assert m.server_ttft_ms.mean == pytest.approx((0.18239879608154297 - 0.033608198165893555) / 16 * 1000)
    # p99's rank 16 (the slowest) is in (10, 20] ms with 7 others of that bucket below it. From below:
    # with the 8 faster ones at their bucket tops (4 * 5 + 4 * 10 ms) the 8 of this bucket share the
    # remaining 88.79 ms, and the slowest is at least their mean, 11.099 ms. From above: with everyone
    # else at their bucket bottoms it could be 148.79 - 4 * 1 - 4 * 5 - 7 * 10 = 54.8 ms, which the
    # bucket's 20 ms beats.
    assert m.server_ttft_ms.p99_range == (pytest.approx(11.0988, abs=1e-3), pytest.approx(20.0))
    assert m.server_ttft_ms.p50_range == (pytest.approx(5.0), pytest.approx(10.0))
    assert m.server_ttft_ms.max_at_most == pytest.approx(20.0)
    # ITL lines 317/336: 22 -> 2766 observations, all in le 0.01; _sum 0.031779 -> 2.967383 s, a mean of
    # 1.0698 ms. Interpolation inside the 0-10 ms bucket would say p50 = 5 ms; the sum says the 1373
    # observations at or above the median add up to at most 2935.6 ms: p50 <= 2935.6 / 1373 = 2.138 ms.
    assert m.server_itl_ms is not None
    assert m.server_itl_ms.count == 2744
    assert m.server_itl_ms.mean == pytest.approx((2.9673834859997896 - 0.031779044000018075) / 2744 * 1000)
    assert m.server_itl_ms.p50 == pytest.approx(2935.6044419997696 / 1373)
    assert m.server_itl_ms.p50_range == (0.0, pytest.approx(2935.6044419997696 / 1373))
    assert m.server_itl_ms.p99 == pytest.approx(9.9)  # interpolated; the sum allows it
    # request_time_per_output_token line 344: 2 -> 18, all in le 0.01; _sum 0.0027763 -> 0.0206979 s
    assert m.server_tpot_ms is not None
    assert m.server_tpot_ms.mean == pytest.approx((0.020697860493761534 - 0.0027763377142892274) / 16 * 1000)
    assert m.server_tpot_ms.p50 == pytest.approx((0.020697860493761534 - 0.0027763377142892274) / 9 * 1000)
    # E2E lines 371/372/392: le 0.3: 2->17 (15), 0.5: 2->18 (16), +Inf 16; sum 3.0808 s, mean 192.55 ms.
    # p50: rank 8 -> 0.3 * 8/15 = 0.16 s; p99: rank 15.84 -> 0.3 + 0.2 * 0.84/1 = 0.468 s; the sum allows
    # both: p50 >= (3080.8 - 500 - 7 * 300) / 8 = 60.1 ms, p99 in its bucket (300, 500].
    assert m.server_e2e_ms is not None
    assert m.server_e2e_ms.p50 == pytest.approx(160.0)
    assert m.server_e2e_ms.p99 == pytest.approx(468.0)
    assert m.server_e2e_ms.mean == pytest.approx((3.145355701446533 - 0.06452536582946777) / 16 * 1000)
    assert m.server_e2e_ms.p50_range == (pytest.approx((3080.830335617065 - 500 - 7 * 300) / 8), 300.0)
    assert m.server_e2e_ms.p99_range == (300.0, 500.0)
    # Queue lines 400/421: all 16 in the first bucket (le 0.3); the bucket alone would say p50 = 150 ms.
    # The sum grew 0.0000542 -> 0.0003322 s: 0.278 ms for 16 requests, a mean of 0.0174 ms, so the 9
    # at or above the median add up to at most 0.278 ms: p50 <= 0.0309 ms, and no request waited longer
    # than 0.278 ms (an idle vLLM must not read 150 ms).
    queue_sum_ms = (0.0003322320000052059 - 5.422100002760999e-05) * 1000
    assert m.server_queue_ms is not None
    assert m.server_queue_ms.mean == pytest.approx(queue_sum_ms / 16)
    assert m.server_queue_ms.p50 == pytest.approx(queue_sum_ms / 9)
    assert m.server_queue_ms.p50 < 0.05 and m.server_queue_ms.p99 <= queue_sum_ms + 1e-9
    assert m.server_queue_ms.max_at_most == pytest.approx(queue_sum_ms)
    # The phases after the queue (V1 only): prefill 0.015170 -> 0.083179 s, decode and inference too.
    assert m.server_prefill_ms is not None and m.server_decode_ms is not None and m.server_inference_ms is not None
    assert m.server_prefill_ms.mean == pytest.approx((0.08317895600009706 - 0.015170444999967003) / 16 * 1000)
    assert m.server_decode_ms.mean == pytest.approx((2.9673834859997896 - 0.031779044000018075) / 16 * 1000)
    assert m.server_inference_ms.mean == pytest.approx((3.0505624419998867 - 0.04694948899998508) / 16 * 1000)
    assert m.notes == ()
    assert m.restarted is False and m.restart_count == 0  # process_start_time_seconds equal (line 27)
    assert m.per_model[0].generation_tokens_per_s == pytest.approx(276.0)


def test_vllm_v0_capture() -> None:
    m = one_scrape("vllm-0.4.3-datadog-integrations-core.txt")
    assert (m.kind, m.variant) == ("vllm", "v0")
    assert m.models == ("facebook/opt-125m",)
    assert m.requests_running == 0.0  # line 42
    assert m.requests_waiting == 0.0  # line 45
    assert m.requests_swapped == 0.0  # line 48, V0 only
    assert m.kv_cache_usage == 0.0  # line 51: gpu_cache_usage_perc (the V0 name)
    assert m.preemptions_total == 0.0  # line 57


def test_sglang_capture() -> None:
    m = one_scrape("sglang-2025-sglang-docs-production_metrics.txt")
    assert m.kind == "sglang"
    assert m.models == ("meta-llama/Llama-3.1-8B-Instruct",)
    assert m.requests_running == 162.0  # line 106
    assert m.requests_waiting == 2826.0  # line 115
    assert m.kv_cache_usage == pytest.approx(0.28)  # line 9, token_usage
    assert m.prefix_cache_hit_rate == pytest.approx(0.007507552643049313)  # line 12, cache_hit_rate gauge
    assert m.preemptions_total is None  # this release has no retraction metrics
    assert m.requests_swapped is None
    assert m.variant is None


def test_tgi_capture() -> None:
    m = one_scrape("tgi-unknown-datadog-integrations-core-excerpt.txt")
    assert m.kind == "tgi"
    assert m.requests_running == 0.0  # line 35, tgi_batch_current_size
    assert m.requests_waiting == 0.0  # line 27, tgi_queue_size
    assert m.kv_cache_usage is None  # TGI has none
    assert m.preemptions_total is None
    assert m.models == ()  # no model label


def test_tgi_second_scrape_has_windows_but_no_ttft() -> None:
    tracker = MetricsTracker()
    names = BY_KIND["tgi"]
    body = text("tgi-unknown-datadog-integrations-core-excerpt.txt")
    tracker.update(Exposition.parse(body), names, now=0.0, wall=0.0)
    m = tracker.update(Exposition.parse(body), names, now=2.0, wall=2.0)
    assert m.server_ttft_ms is None  # TGI has no TTFT histogram: None, not 0
    assert m.server_e2e_ms is not None and m.server_e2e_ms.count == 0  # histogram present, idle
    assert m.server_e2e_ms.p50 is None
    # tgi_request_success (line 3) has no `_total`; the parser calls it tgi_request_success_total.
    assert dict(m.outcomes) == {"success": 0.0, "error:validation": 0.0}  # lines 3 and 13
    assert m.generation_tokens_per_s is None  # the excerpt has no request_generated_tokens family


def test_llamacpp_capture() -> None:
    m = one_scrape("llamacpp-server-0c1e5709-local-capture-after-load.txt")
    assert m.kind == "llamacpp"
    assert m.requests_running == 0.0  # line 39, requests_processing
    assert m.requests_waiting == 0.0  # line 42, requests_deferred
    assert m.kv_cache_usage is None  # removed from llama-server
    assert m.models == ()


def test_triton_trtllm_capture() -> None:
    m = one_scrape("triton-trtllm-2026-07-tensorrtllm_backend-readme.txt")
    assert m.kind == "triton"
    assert m.models == ("tensorrt_llm",)
    assert m.requests_waiting == 1.0  # line 3, request_type="waiting"
    assert m.requests_running == 0.0  # line 7, request_type="active"
    # used / max blocks, lines 17 and 19 (the sample's "fraction" on line 15 disagrees with them)
    assert m.kv_cache_usage == pytest.approx(1 / 6239)


def test_triton_core_capture() -> None:
    m = one_scrape("triton-unknown-datadog-integrations-core-excerpt.txt")
    assert m.kind == "triton"
    # lines 3-10: the models of nv_inference_request_success, in the file's order
    assert m.models == (
        "simple_string",
        "simple_sequence",
        "simple_int8",
        "simple_identity",
        "densenet_onnx",
        "simple_dyna_sequence",
        "inception_graphdef",
        "simple",
    )
    assert m.requests_waiting == 0.0  # lines 96-103, nv_inference_pending_request_count, all 0
    assert m.requests_running is None  # no nv_trt_llm_* here
    assert m.kv_cache_usage is None


def test_litellm_capture_is_not_an_inference_server() -> None:
    expo = Exposition.parse(text("litellm-1.95-datadog-integrations-core-excerpt.txt"))
    assert expo.families == 2
    assert detect_kind(expo) is None


def test_families_list_is_not_exposition_text() -> None:
    with pytest.raises(NotPrometheusText):
        Exposition.parse(text("vllm-0.26.0-inference-perf-families.txt"))


def test_vllm_v1_names_exist_in_a_real_v1_family_list() -> None:
    """The table's first (V1) choice for each role is a family vLLM 0.26.0 really exposes."""
    listed = {
        line.split()[0]
        for line in text("vllm-0.26.0-inference-perf-families.txt").splitlines()
        if line and not line.startswith("#")
    }
    v1_first_choices = [
        VLLM.running[0].name,
        VLLM.waiting[0].name,
        VLLM.kv_usage[0].name,
        VLLM.preemptions[0].name,
        VLLM.prompt_tokens[0].name,
        VLLM.generation_tokens[0].name,
        VLLM.prefix_hits[0].name,
        VLLM.prefix_queries[0].name,
        VLLM.outcomes[0].name,
    ]
    for hist in (VLLM.ttft, VLLM.itl, VLLM.tpot, VLLM.e2e, VLLM.queue):
        assert hist is not None
        v1_first_choices.append(hist.names[0].name)
    assert sorted(set(v1_first_choices) - listed) == []


def test_ollama_api_ps_sample() -> None:
    payload = json.loads((FIXTURES / "ollama-api-ps-handwritten.json").read_text(encoding="utf-8"))
    m = ollama_metrics(payload, wall=5.0)
    assert (m.kind, m.status) == ("ollama", "ok")
    assert m.models == ("gemma3:4b", "llama3.1:70b")
    assert m.models_loaded == 2
    assert m.vram_bytes == 6591830464 + 24000000000
    assert [(p.model, p.vram_bytes, p.size_bytes) for p in m.per_model] == [
        ("gemma3:4b", 6591830464, 6591830464),
        ("llama3.1:70b", 24000000000, 45000000000),
    ]
    # Ollama tells nothing about queues or KV cache: unknown, not zero.
    assert m.requests_running is None and m.requests_waiting is None and m.kv_cache_usage is None
    assert ollama_metrics({"models": []}).models_loaded == 0
    assert ollama_metrics({"error": "nope"}).status.startswith("error:")


def test_to_json_keeps_the_schema_keys() -> None:
    m = one_scrape(VLLM_LOAD)
    out = m.to_json()
    for key in (
        "kind",
        "status",
        "requests_running",
        "requests_waiting",
        "kv_cache_usage",
        "preemptions_total",
    ):
        assert key in out
    assert out["server_ttft_ms"] is None
    json.dumps(out)  # plain JSON types only


SERVER_CAPTURES = [
    "vllm-0.32.0-cpu-local-capture-idle.txt",
    "vllm-0.32.0-cpu-local-capture-after-load.txt",
    "vllm-0.4.3-datadog-integrations-core.txt",
    "sglang-2025-sglang-docs-production_metrics.txt",
    "tgi-unknown-datadog-integrations-core-excerpt.txt",
    "llamacpp-server-0c1e5709-local-capture-after-load.txt",
    "triton-trtllm-2026-07-tensorrtllm_backend-readme.txt",
    "triton-unknown-datadog-integrations-core-excerpt.txt",
]


@pytest.mark.parametrize("name", SERVER_CAPTURES)
def test_parsing_only_the_kinds_families_changes_nothing(name: str) -> None:
    # After the first scrape the scraper parses only the families its table reads; the result must be
    # the same as parsing the whole page (two scrapes each, so rates and windows are compared too).
    from lpxtop.engine.scrape.metric_names import family_names, keep_families

    page = text(name)
    names = detect_kind(Exposition.parse(page))
    assert names is not None
    filtered = keep_families(page, family_names(names))
    assert len(filtered) < len(page) or name.startswith("llamacpp")
    results = []
    for body in (page, filtered):
        tracker = MetricsTracker()
        tracker.update(Exposition.parse(body), names, now=100.0, wall=1_000.0)
        results.append(tracker.update(Exposition.parse(body), names, now=102.0, wall=1_002.0))
    assert results[0] == results[1]
    assert detect_kind(Exposition.parse(filtered)) is names
