"""The sim's /metrics, in vLLM V1's exposition format (names, HELP, labels, buckets as in vLLM 0.32).

The families, HELP strings and bucket boundaries follow the capture in
tests/fixtures/metrics/vllm-0.32.0-cpu-local-capture-after-load.txt. Each server has its own
CollectorRegistry, so two sims in one process do not share counters, and prometheus_client writes the
`_total` / `_created` series just as vLLM's (which uses the same library) does.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

METRICS_CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")

_TIME_BUCKETS_TTFT = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
]  # fmt: skip
_TIME_BUCKETS_ITL = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
]  # fmt: skip
_TIME_BUCKETS_REQUEST = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
]  # fmt: skip
_ITERATION_TOKEN_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
_PARAMS_N_BUCKETS = [1, 2, 5, 10, 20]
_PREEMPTION_BUCKETS = [1, 2, 3, 4, 5, 10, 20]


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """vLLM's token-count buckets: 1, 2, 5, 10, 20, 50, … up to max_value (its max_model_len)."""
    buckets: list[int] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * scale
            if value > max_value:
                return buckets
            buckets.append(value)
        scale *= 10


class SimMetrics:
    """Every vLLM V1 metric family, fed by the sim's scheduler with its real internal timings."""

    def __init__(self, model: str, max_model_len: int, kv_tokens: int, block_size: int = 16) -> None:
        self.registry = CollectorRegistry()
        # The process_*, python_* families a real vLLM server also shows.
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        reg = self.registry
        names = ["model_name", "engine"]
        labels = {"model_name": model, "engine": "0"}

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, names + list(extra), registry=reg)

        def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> Gauge:
            return Gauge(name, doc, names + list(extra), registry=reg)

        def histogram(name: str, doc: str, buckets: list) -> Histogram:
            return Histogram(name, doc, names, buckets=buckets, registry=reg).labels(**labels)

        mfu = "(for Model Flops Utilization calculations)."
        for name, doc in (
            ("vllm:estimated_flops_per_gpu", "Estimated number of floating point operations per GPU"),
            ("vllm:estimated_read_bytes_per_gpu", "Estimated number of bytes read from memory per GPU"),
            ("vllm:estimated_write_bytes_per_gpu", "Estimated number of bytes written to memory per GPU"),
        ):
            counter(name, f"{doc} {mfu}").labels(**labels)

        self.running = gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches."
        ).labels(**labels)
        self.waiting = gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        ).labels(**labels)
        waiting_by_reason = gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; "
            "'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). "
            "Sum of all reasons equals vllm:num_requests_waiting.",
            ("reason",),
        )
        self.waiting_capacity = waiting_by_reason.labels(**labels, reason="capacity")
        waiting_by_reason.labels(**labels, reason="deferred")
        sleep_state = gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
            "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            ("sleep_state",),
        )
        sleep_state.labels(**labels, sleep_state="awake").set(1)
        sleep_state.labels(**labels, sleep_state="weights_offloaded")
        sleep_state.labels(**labels, sleep_state="discard_all")
        self.kv_usage = gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
        ).labels(**labels)

        self.prefix_queries = counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."
        ).labels(**labels)
        self.prefix_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        ).labels(**labels)
        kv_connector = "from KV connector cross-instance cache sharing, in terms of number of"
        counter(
            "vllm:external_prefix_cache_queries",
            f"External prefix cache queries {kv_connector} queried tokens.",
        ).labels(**labels)
        counter(
            "vllm:external_prefix_cache_hits", f"External prefix cache hits {kv_connector} cached tokens."
        ).labels(**labels)
        counter(
            "vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items."
        ).labels(**labels)
        counter("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.").labels(
            **labels
        )
        self.preemptions = counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        ).labels(**labels)
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.").labels(
            **labels
        )
        by_source = counter("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", ("source",))
        self.prompt_computed = by_source.labels(**labels, source="local_compute")
        self.prompt_cache_hit = by_source.labels(**labels, source="local_cache_hit")
        by_source.labels(**labels, source="external_kv_transfer")
        self.prompt_cached = counter(
            "vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external)."
        ).labels(**labels)
        cached_by_source = counter(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host "
            "(offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or external_unspecified. "
            "Counted at admission; sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
            ("source",),
        )
        self.prompt_cached_device = cached_by_source.labels(**labels, source="device")
        for source in ("host", "p2p", "disk", "external_unspecified"):
            cached_by_source.labels(**labels, source=source)
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        ).labels(**labels)
        success = counter(
            "vllm:request_success", "Count of successfully processed requests.", ("finished_reason",)
        )
        self.success = {
            reason: success.labels(**labels, finished_reason=reason) for reason in FINISHED_REASONS
        }
        # vLLM gives this family no engine label (it is counted in the API server).
        rejections = Counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            ["model_name", "reason"],
            registry=reg,
        )
        self.rejected_queue_full = rejections.labels(model_name=model, reason="max_num_queued_reqs")
        rejections.labels(model_name=model, reason="max_num_queued_tokens")

        token_buckets = build_1_2_5_buckets(max_model_len)
        self.h_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", token_buckets
        )
        self.h_generation_tokens = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", token_buckets
        )
        self.h_iteration_tokens = histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            _ITERATION_TOKEN_BUCKETS,
        )
        self.h_max_generation_tokens = histogram(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            token_buckets,
        )
        self.h_params_n = histogram(
            "vllm:request_params_n", "Histogram of the n request parameter.", _PARAMS_N_BUCKETS
        )
        self.h_params_max_tokens = histogram(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", token_buckets
        )
        self.h_ttft = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            _TIME_BUCKETS_TTFT,
        )
        self.h_itl = histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            _TIME_BUCKETS_ITL,
        )
        self.h_tpot = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            _TIME_BUCKETS_ITL,
        )
        self.h_e2e = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            _TIME_BUCKETS_REQUEST,
        )
        self.h_queue = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            _TIME_BUCKETS_REQUEST,
        )
        self.h_inference = histogram(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            _TIME_BUCKETS_REQUEST,
        )
        self.h_prefill = histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            _TIME_BUCKETS_REQUEST,
        )
        self.h_decode = histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            _TIME_BUCKETS_REQUEST,
        )
        self.h_num_preemptions = histogram(
            "vllm:request_num_preemptions",
            "Histogram of the number of times a request was preempted.",
            _PREEMPTION_BUCKETS,
        )
        self.h_prefill_computed = histogram(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            token_buckets,
        )
        # vLLM labels this info gauge with engine only (no model_name).
        cache_info = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            [*_cache_info(0, 0), "engine"],
            registry=reg,
        )
        cache_info.labels(**_cache_info(kv_tokens, block_size), engine="0").set(1)

    def set_state(self, running: int, waiting: int, kv_usage: float) -> None:
        """Publish the engine's gauges (num_requests_running/waiting, kv_cache_usage_perc)."""
        self.running.set(running)
        self.waiting.set(waiting)
        self.waiting_capacity.set(waiting)
        self.kv_usage.set(kv_usage)

    def count_prefill(self, prompt_tokens: int, cached_tokens: int) -> None:
        """Count one prefill's prompt tokens, split into computed and prefix-cache hits."""
        self.prefix_queries.inc(prompt_tokens)
        self.prefix_hits.inc(cached_tokens)
        self.prompt_tokens.inc(prompt_tokens)
        self.prompt_computed.inc(prompt_tokens - cached_tokens)
        self.prompt_cache_hit.inc(cached_tokens)
        self.prompt_cached.inc(cached_tokens)
        self.prompt_cached_device.inc(cached_tokens)
        self.h_prefill_computed.observe(prompt_tokens - cached_tokens)

    def observe_request_params(self, max_tokens: int) -> None:
        """Record a new request's sampling parameters (n is always 1 here)."""
        self.h_params_n.observe(1)
        self.h_params_max_tokens.observe(max_tokens)
        self.h_max_generation_tokens.observe(max_tokens)

    def render(self) -> bytes:
        """The exposition text, as served on GET /metrics."""
        return generate_latest(self.registry)


def _cache_info(kv_tokens: int, block_size: int) -> dict[str, str]:
    """vllm:cache_config_info's labels (same names as vLLM 0.32), filled with the sim's cache shape."""
    blocks = kv_tokens // block_size if block_size else 0
    return {
        "_block_size_resolved": "True",
        "block_size": str(block_size),
        "cache_dtype": "auto",
        "cache_hit_alignment_tokens": "None",
        "effective_attention_block_size": str(block_size),
        "enable_mamba_shared_prefix_checkpoint": "False",
        "enable_prefix_caching": "True",
        "gpu_memory_utilization": "0.9",
        "hash_block_size": "None",
        "is_attention_free": "False",
        "kv_cache_dtype_skip_layers": "[]",
        "kv_cache_layout": "None",
        "kv_cache_max_concurrency": "None",
        "kv_cache_memory_bytes": "None",
        "kv_cache_size_tokens": str(kv_tokens),
        "kv_offloading_backend": "native",
        "kv_offloading_size": "None",
        "kv_sharing_fast_prefill": "False",
        "mamba_block_size": "None",
        "mamba_cache_dtype": "auto",
        "mamba_cache_mode": "none",
        "mamba_page_size_padded": "None",
        "mamba_ssm_cache_dtype": "float32",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(blocks),
        "num_gpu_blocks_override": "None",
        "prefix_cache_retention_interval": "0",
        "prefix_caching_hash_algo": "sha256",
        "prefix_match_unit": "None",
        "replayssm_buffer_len": "16",
        "skip_page_size_padded": "None",
        "sliding_window": "None",
        "swa_bounded_replay": "True",
        "use_kda_recoverssm": "False",
        "use_replayssm": "False",
        "user_specified_block_size": "False",
    }
