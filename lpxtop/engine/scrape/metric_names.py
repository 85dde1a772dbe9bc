"""One table of Prometheus metric names per inference-server kind (the only place names live).

Names were checked against the servers' own sources and real captures (tests/fixtures/metrics):
- vLLM V1: vllm/v1/metrics/loggers.py and vllm/v1/spec_decode/metrics.py; capture of 0.32.0.
- vLLM V0: vllm/engine/metrics.py; capture of 0.4.3 (DataDog integrations-core).
- SGLang: python/sglang/srt/metrics/collector.py (SchedulerMetricsCollector, TokenizerMetricsCollector).
- TGI: router metrics (docs reference/metrics); capture from DataDog integrations-core.
- llama.cpp llama-server: tools/server/server.cpp handle_metrics; local capture.
- Triton + TensorRT-LLM: custom_metrics_reporter (nv_trt_llm_*), Triton core nv_inference_*.
- LMDeploy: lmdeploy/metrics/metrics_processor.py (prometheus_client names).

Every role lists alternatives; the first one present in a scrape wins. Counters are written the
way the server exposes them: prometheus_client's parser renames a counter sample that lacks
`_total` (TGI's `tgi_request_success`, llama.cpp's `n_tokens_max`) to `<name>_total`, and the
lookup in server_exposition tries both spellings.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class Ref:
    """A metric name, optionally narrowed to the samples whose labels match (Triton's label-selected gauges)."""

    name: str
    match: tuple[tuple[str, str], ...] = ()


def ref(name: str, **match: str) -> Ref:
    """Shorthand: ``ref("nv_trt_llm_request_metrics", request_type="waiting")``."""
    return Ref(name, tuple(sorted(match.items())))


def refs(*names: str | Ref) -> tuple[Ref, ...]:
    return tuple(n if isinstance(n, Ref) else Ref(n) for n in names)


@dataclass(frozen=True)
class Hist:
    """A latency histogram: alternatives for its name, and the factor that turns its unit into ms."""

    names: tuple[Ref, ...]
    to_ms: float = 1000.0  # most servers observe seconds


@dataclass(frozen=True)
class Outcome:
    """A counter of finished requests. With `reason_label` the label's value is the outcome key,
    otherwise `key` is (prefixed to the label value when both are set)."""

    name: str
    key: str = ""
    reason_label: str | None = None


@dataclass(frozen=True)
class KindNames:
    """Which metric plays which role on one kind of server."""

    kind: str
    prefixes: tuple[str, ...]  # a metric name starting with one of these identifies the kind
    model_labels: tuple[str, ...] = ()  # label holding the model name
    running: tuple[Ref, ...] = ()
    waiting: tuple[Ref, ...] = ()
    swapped: tuple[Ref, ...] = ()  # gauge: requests preempted/retracted right now
    kv_usage: tuple[Ref, ...] = ()  # gauge 0..1
    kv_blocks_used: tuple[Ref, ...] = ()  # with kv_blocks_max: usage = used / max
    kv_blocks_max: tuple[Ref, ...] = ()
    preemptions: tuple[Ref, ...] = ()  # counter
    prompt_tokens: tuple[Ref, ...] = ()  # counter (or a histogram's _sum, which only grows)
    generation_tokens: tuple[Ref, ...] = ()
    prefix_hits: tuple[Ref, ...] = ()  # counter
    prefix_queries: tuple[Ref, ...] = ()  # counter
    prefix_queries_exclude_hits: bool = False  # queries counter leaves the hits out (llama.cpp)
    prefix_hit_rate_gauge: tuple[Ref, ...] = ()  # fallback when there are no counters
    spec_accepted: tuple[Ref, ...] = ()  # counter
    spec_drafted: tuple[Ref, ...] = ()  # counter
    spec_accept_rate_gauge: tuple[Ref, ...] = ()
    outcomes: tuple[Outcome, ...] = ()
    ttft: Hist | None = None
    itl: Hist | None = None  # per token gap
    tpot: Hist | None = None  # per request mean time per output token
    e2e: Hist | None = None
    queue: Hist | None = None
    prefill: Hist | None = None  # per request: scheduled -> first token
    decode: Hist | None = None  # per request: first token -> last
    inference: Hist | None = None  # per request: scheduled -> last (prefill + decode)
    variants: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (variant, names that mark it), first match


VLLM = KindNames(
    kind="vllm",
    prefixes=("vllm:",),
    model_labels=("model_name",),
    running=refs("vllm:num_requests_running"),
    waiting=refs("vllm:num_requests_waiting"),
    swapped=refs("vllm:num_requests_swapped"),  # V0 only
    # V1 >= 0.10 renamed gpu_cache_usage_perc to kv_cache_usage_perc; V0 and early V1 use the old name.
    kv_usage=refs("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    preemptions=refs("vllm:num_preemptions_total"),
    prompt_tokens=refs("vllm:prompt_tokens_total"),
    generation_tokens=refs("vllm:generation_tokens_total"),
    # V1 counts tokens; gpu_prefix_cache_* is the name before 0.9.2 (deprecated, later hidden).
    prefix_hits=refs("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    prefix_queries=refs("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    prefix_hit_rate_gauge=refs("vllm:gpu_prefix_cache_hit_rate"),  # V0
    spec_accepted=refs("vllm:spec_decode_num_accepted_tokens_total"),
    spec_drafted=refs("vllm:spec_decode_num_draft_tokens_total"),
    outcomes=(Outcome("vllm:request_success_total", reason_label="finished_reason"),),
    ttft=Hist(refs("vllm:time_to_first_token_seconds")),
    # V1 renamed the per-token histogram to inter_token_latency_seconds; in V0 time_per_output_token
    # observed every token gap, so it is the ITL too.
    itl=Hist(refs("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")),
    tpot=Hist(refs("vllm:request_time_per_output_token_seconds")),
    e2e=Hist(refs("vllm:e2e_request_latency_seconds")),
    queue=Hist(refs("vllm:request_queue_time_seconds")),
    # V1 only (vllm/v1/metrics/loggers.py): the phases of a request after it left the queue.
    prefill=Hist(refs("vllm:request_prefill_time_seconds")),
    decode=Hist(refs("vllm:request_decode_time_seconds")),
    inference=Hist(refs("vllm:request_inference_time_seconds")),
    variants=(
        ("v1", ("vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds", "vllm:engine_sleep_state")),
        ("v0", ("vllm:num_requests_swapped", "vllm:cpu_cache_usage_perc")),
    ),
)

SGLANG = KindNames(
    kind="sglang",
    prefixes=("sglang:",),
    model_labels=("model_name",),
    running=refs("sglang:num_running_reqs"),
    waiting=refs("sglang:num_queue_reqs"),
    swapped=refs("sglang:num_retracted_reqs"),  # gauge: retracted in the last step
    kv_usage=refs("sglang:token_usage"),
    preemptions=refs("sglang:num_retracted_requests_total"),  # newer counter ("requests", not "reqs")
    prompt_tokens=refs("sglang:prompt_tokens_total"),
    generation_tokens=refs("sglang:generation_tokens_total"),
    # prompt_tokens counts cached tokens too, so it is the query count for the cache.
    prefix_hits=refs("sglang:cached_tokens_total"),
    prefix_queries=refs("sglang:prompt_tokens_total"),
    prefix_hit_rate_gauge=refs("sglang:cache_hit_rate"),
    spec_accept_rate_gauge=refs("sglang:spec_accept_rate"),
    outcomes=(
        Outcome("sglang:num_requests_total", key="finished"),
        Outcome("sglang:num_aborted_requests_total", key="abort"),
    ),
    ttft=Hist(refs("sglang:time_to_first_token_seconds")),
    itl=Hist(refs("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds")),
    e2e=Hist(refs("sglang:e2e_request_latency_seconds")),
    queue=Hist(refs("sglang:queue_time_seconds")),
)

TGI = KindNames(
    kind="tgi",
    prefixes=("tgi_",),
    running=refs("tgi_batch_current_size"),
    waiting=refs("tgi_queue_size"),
    # TGI has no token counters; the per-request token histograms' _sum only ever grows.
    prompt_tokens=refs("tgi_request_input_length_sum"),
    generation_tokens=refs("tgi_request_generated_tokens_sum"),
    outcomes=(
        Outcome("tgi_request_success", key="success"),
        Outcome("tgi_request_failure", key="error:", reason_label="err"),
    ),
    # No TTFT histogram. mean_time_per_token is inference time / generated tokens per request,
    # prefill included, so it is a TPOT-like per-request value, not a token gap.
    tpot=Hist(refs("tgi_request_mean_time_per_token_duration")),
    e2e=Hist(refs("tgi_request_duration")),
    queue=Hist(refs("tgi_request_queue_duration")),
    inference=Hist(refs("tgi_request_inference_duration")),
)

LLAMACPP = KindNames(
    kind="llamacpp",
    prefixes=("llamacpp:",),
    running=refs("llamacpp:requests_processing"),
    waiting=refs("llamacpp:requests_deferred"),
    # *_tokens_seconds gauges are reset on every scrape: rates come from these counters instead.
    prompt_tokens=refs("llamacpp:prompt_tokens_total"),
    generation_tokens=refs("llamacpp:tokens_predicted_total"),
    # prompt_tokens_total excludes cached tokens, so queries = prompt + cached.
    prefix_hits=refs("llamacpp:prompt_tokens_cached_total"),
    prefix_queries=refs("llamacpp:prompt_tokens_total"),
    prefix_queries_exclude_hits=True,
    spec_accepted=refs("llamacpp:spec_decode_num_accepted_tokens_total"),
    spec_drafted=refs("llamacpp:spec_decode_num_draft_tokens_total"),
)

TRITON = KindNames(
    kind="triton",
    prefixes=("nv_trt_llm_", "nv_inference_", "nv_llm_"),
    model_labels=("model",),
    # The TRT-LLM reporter's label-selected gauges; *_statistics is the family name of older reporters.
    running=(
        ref("nv_trt_llm_request_metrics", request_type="active"),
        ref("nv_trt_llm_request_statistics", request_type="active"),
    ),
    waiting=(
        ref("nv_trt_llm_request_metrics", request_type="waiting"),
        ref("nv_trt_llm_request_statistics", request_type="waiting"),
        Ref("nv_inference_pending_request_count"),  # Triton core: requests not yet executing
    ),
    kv_blocks_used=(
        ref("nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="used"),
        ref("nv_trt_llm_kv_cache_block_statistics", kv_cache_block_type="used"),
    ),
    kv_blocks_max=(
        ref("nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="max"),
        ref("nv_trt_llm_kv_cache_block_statistics", kv_cache_block_type="max"),
    ),
    kv_usage=(ref("nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="fraction"),),
    prompt_tokens=refs("nv_llm_input_token_len_sum"),
    generation_tokens=refs("nv_llm_output_token_len_sum"),
    outcomes=(
        Outcome("nv_inference_request_success", key="success"),
        Outcome("nv_inference_request_failure", key="failure"),
    ),
    # Opt-in (--metrics-config histogram_latencies=true), in ms. For a streaming (decoupled) model
    # it is the time to the first response chunk, the closest Triton has to TTFT.
    ttft=Hist(refs("nv_inference_first_response_histogram_ms"), to_ms=1.0),
)

LMDEPLOY = KindNames(
    kind="lmdeploy",
    prefixes=("lmdeploy:",),
    model_labels=("model_name",),
    running=refs("lmdeploy:num_requests_running"),
    waiting=refs("lmdeploy:num_requests_waiting"),
    kv_usage=refs("lmdeploy:gpu_cache_usage_perc"),
    prompt_tokens=refs("lmdeploy:prompt_tokens_total"),
    generation_tokens=refs("lmdeploy:generation_tokens_total"),
    outcomes=(Outcome("lmdeploy:request_success_total", reason_label="finished_reason"),),
    ttft=Hist(refs("lmdeploy:time_to_first_token_seconds")),
    itl=Hist(refs("lmdeploy:iter_token_latency")),  # sic: LMDeploy's own spelling
    tpot=Hist(refs("lmdeploy:time_per_output_token_seconds")),
    e2e=Hist(refs("lmdeploy:e2e_request_latency_seconds")),
    queue=Hist(refs("lmdeploy:request_queue_time_seconds")),
)

# Detection order: the richer, server-specific prefixes first. Triton last, because a Triton
# serving the vLLM backend exposes vllm:* next to its generic nv_inference_*.
KINDS: tuple[KindNames, ...] = (VLLM, SGLANG, LMDEPLOY, TGI, LLAMACPP, TRITON)
BY_KIND: dict[str, KindNames] = {k.kind: k for k in KINDS}

# Cross-process restart signal that prometheus_client servers (vLLM, SGLang, LMDeploy) expose.
PROCESS_START = "process_start_time_seconds"


PROCESS_START_METRIC = "process_start_time_seconds"
_SAMPLE_SUFFIXES = ("_bucket", "_count", "_sum", "_created", "_total", "_info")


@functools.cache
def family_names(names: KindNames) -> frozenset[str]:
    """Every metric name one kind's table refers to (with and without `_total`), plus the process start."""
    found: set[str] = {PROCESS_START_METRIC}

    def add(name: str) -> None:
        found.add(name)
        if name.endswith("_total"):
            found.add(name[: -len("_total")])

    for value in vars(names).values():
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if isinstance(item, Ref):
                add(item.name)
            elif isinstance(item, Hist):
                for r in item.names:
                    add(r.name)
            elif isinstance(item, Outcome):
                add(item.name)
            elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], tuple):
                for marker in item[1]:  # variants: (variant, marker names)
                    add(marker)
    return frozenset(found)


@functools.cache
def histogram_names(names: KindNames) -> frozenset[str]:
    """The latency histograms one kind's table reads (family names)."""
    found: set[str] = set()
    for value in vars(names).values():
        if isinstance(value, Hist):
            found.update(r.name for r in value.names)
    return frozenset(found)


def keep_families(text: str, families: frozenset[str]) -> str:
    """The lines of an exposition that belong to `families` (HELP/TYPE lines and samples).

    Not a parser: it only drops whole lines by their leading metric name, so that prometheus_client
    parses the few families lpxtop reads instead of the hundreds a server exposes (a vLLM page costs
    ~20 ms to parse whole, every scrape). Leading and trailing blanks are not part of a line (the text
    format says so, and prometheus_client strips them): a kept line is kept stripped.
    """
    kept: list[str] = []
    for line in text.split("\n"):  # prometheus_client's lines: \x0b, \x1c, \u2028 ... do not end one
        line = line.strip()
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE") and belongs(parts[2], families):
                kept.append(line)
            continue
        name = sample_name(line)
        if name and belongs(name, families):
            kept.append(line)
    kept.append("")
    return "\n".join(kept)


def sample_name(line: str) -> str:
    """The metric name a (stripped) sample line starts with ("" for a line that does not start with one)."""
    end = len(line)
    for stop in ("{", " ", "\t"):
        at = line.find(stop)
        if 0 <= at < end:
            end = at
    return line[:end]


def belongs(name: str, families: frozenset[str]) -> bool:
    """Whether metric or sample `name` is one of `families` (or one of their _bucket, _total... samples)."""
    if name in families:
        return True
    return any(name.endswith(suffix) and name[: -len(suffix)] in families for suffix in _SAMPLE_SUFFIXES)
