"""Settings of one simulated inference server (SimConfig) and the background-load shapes."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from lpxtop.sim.toolcall_options import TOOL_CALL_SHAPES, TOOL_FAULTS

# A background load is the number of virtual requests (no HTTP) the engine should have in flight at
# `t` seconds after start: a function of t, or (min, max, period_s) for a sine between min and max.
BackgroundLoad = Callable[[float], float] | tuple[float, float, float]


@dataclass
class SimConfig:
    """How one simulated vLLM server looks and behaves.

    Timing: a decode step takes `itl_ms * (1 + batch_factor * (running - 1))`; a step that admits new
    requests also pays `ttft_ms + prefill_ms_per_token * uncached_prompt_tokens` once (prefills are
    batched), and its decode term counts only the requests decoding in it (`running` minus those being
    prefilled: a prompt costs its prefill, not a decode slot too). Every step gets +/- `jitter` (a share)
    of seeded random noise.
    Capacity: at most `max_num_seqs` running requests; the rest wait FIFO, at most `max_waiting` of
    them (more get HTTP 503). Each running request holds prompt + generated tokens of the `kv_tokens`
    KV cache; when the next step would overflow it, the newest running request is preempted.
    Faults (`fail_rate` … `slow_headers_s`) are the start-up values of the run-time faults; see
    lpxtop/sim/faults.py for what each one does on the wire.
    """

    model: str = "sim-llama-8b"
    ttft_ms: float = 40.0
    itl_ms: float = 12.0
    max_num_seqs: int = 8
    kv_tokens: int = 8192
    fail_rate: float = 0.0
    api_key: str | None = None
    tokens_per_chunk: int = 1
    background_load: BackgroundLoad | None = None
    seed: int = 0
    # (clients, tokens): a closed loop of `clients` virtual clients, each asking for `tokens` output
    # tokens and asking again the moment its request ends, with the scheduler admitting new requests
    # only when the running batch has emptied, so they run in waves (as vLLM did under `vllm bench
    # serve` with requests of one length). The waves' times are kept in BatchScheduler.waves (ground truth).
    wave_load: tuple[int, int] | None = None

    batch_factor: float = 0.05
    prefill_ms_per_token: float = 0.02
    jitter: float = 0.1
    max_model_len: int = 4096  # clamped to kv_tokens, as vLLM refuses a context the cache cannot hold
    max_waiting: int = 256
    default_max_tokens: int = 128  # when a request gives no max_tokens (vLLM would use the whole context)
    random_stop: bool = False  # stop at a random length <= max_tokens ("stop"), unless ignore_eos
    # Share of single-token chunks sent as `"content": ""`, as vLLM sends a token that completes no UTF-8
    # character (its text comes with the next chunk). The last token always carries text.
    empty_chunk_rate: float = 0.0
    send_usage: bool = True  # False: ignore stream_options.include_usage, like servers that never send it
    reject_stream_options: bool = False  # True: HTTP 422 for a request that has stream_options at all
    # When the chat stream's role-only opening chunk is sent: "first_token" (just before it, as vLLM 0.32 does:
    # its chat server sends the role on the engine's first output, which carries the first token), "admitted"
    # (when scheduled, before the prefill) or "received" (at once, as some gateways do). A client that takes
    # the role chunk for the first token (`vllm bench serve`) reads the admission time with "admitted".
    role_chunk_at: str = "first_token"
    background_prompt_tokens: tuple[int, int] = (64, 960)  # own prompt tokens of a virtual request (min, max)
    background_max_tokens: tuple[int, int] = (32, 320)  # output tokens of a virtual request (min, max)
    prefix_block_tokens: int = 16
    max_records: int = 10_000
    version: str = "0.32.0"
    # Tool calls and the agent platforms (lpxtop/sim/tools.py; the Dify app, the Dify workflow and the Coze
    # bot, lpxtop/sim/dify.py, difyworkflow.py, coze.py, share the three dify_* settings)
    tool_call_shape: str = "vllm"  # how tool-call deltas look; see sim/tools.py
    tool_chars_per_token: int = 4  # characters of a call's arguments per streamed chunk
    tool_fault_rate: float = 0.0  # share of tool calls given a random tool fault
    dify_decision_tokens: int = 8  # tokens of the Dify app's tool-deciding round
    dify_answer_tokens: int = 16  # tokens of its answer
    dify_tool_latency_ms: float = 20.0  # how long its tool takes
    # OpenTelemetry out, as vLLM's --otlp-traces-endpoint: one `llm_request` span per finished request
    # POSTed (OTLP/HTTP protobuf) to this URL, batched every `otlp_schedule_delay_s` (sim/spans.py)
    otlp_traces_endpoint: str | None = None
    otlp_schedule_delay_s: float = 0.5

    # Start-up faults (see faults.Faults for the meaning of each).
    rate_limit: bool = False
    forbidden: bool = False
    cut_after_tokens: int | None = None
    stall_after_tokens: int | None = None
    stall_s: float = 30.0
    error_event_after_tokens: int | None = None
    first_token_delay_ms: float = 0.0
    bad_json: bool = False
    empty: bool = False
    slow_headers_s: float = 0.0
    tool_fault: str | None = None

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise ValueError("max_num_seqs must be at least 1")
        if self.kv_tokens < 2:
            raise ValueError("kv_tokens must be at least 2")
        if self.tokens_per_chunk < 1:
            raise ValueError("tokens_per_chunk must be at least 1")
        if self.ttft_ms < 0 or self.itl_ms < 0:
            raise ValueError("ttft_ms and itl_ms must not be negative")
        if not 0.0 <= self.fail_rate <= 1.0:
            raise ValueError("fail_rate must be between 0 and 1")
        if not 0.0 <= self.empty_chunk_rate <= 1.0:
            raise ValueError("empty_chunk_rate must be between 0 and 1")
        if self.wave_load is not None:
            clients, tokens = self.wave_load
            if clients < 1 or tokens < 1:
                raise ValueError("wave_load needs at least 1 client and 1 token")
        if self.role_chunk_at not in ("received", "admitted", "first_token"):
            raise ValueError("role_chunk_at must be 'received', 'admitted' or 'first_token'")
        if self.tool_call_shape not in TOOL_CALL_SHAPES:
            raise ValueError(f"tool_call_shape must be one of {', '.join(TOOL_CALL_SHAPES)}")
        if self.tool_fault is not None and self.tool_fault not in (*TOOL_FAULTS, "requires_action"):
            raise ValueError(f"tool_fault must be one of {', '.join(TOOL_FAULTS)}, requires_action")
        if not 0.0 <= self.tool_fault_rate <= 1.0:
            raise ValueError("tool_fault_rate must be between 0 and 1")
        if self.tool_chars_per_token < 1 or self.dify_decision_tokens < 1 or self.dify_answer_tokens < 1:
            raise ValueError("tool_chars_per_token, dify_decision_tokens and dify_answer_tokens must be at least 1")
        if self.otlp_traces_endpoint is not None and not self.otlp_traces_endpoint.startswith(("http://", "https://")):
            raise ValueError("otlp_traces_endpoint must be an http:// or https:// URL (OTLP/HTTP)")
        if not 0.0 < self.otlp_schedule_delay_s <= 60.0:
            raise ValueError("otlp_schedule_delay_s must be above 0 and at most 60")
        self.max_model_len = max(2, min(self.max_model_len, self.kv_tokens))


def load_function(load: BackgroundLoad | None) -> Callable[[float], float] | None:
    """Turn a BackgroundLoad into a function of seconds since start (None stays None)."""
    if load is None:
        return None
    if callable(load):
        return load
    low, high, period_s = (float(v) for v in load)
    if period_s <= 0:
        raise ValueError("background load period must be positive")

    def sine(t: float) -> float:
        # Starts at `low`, peaks at `high` half a period later.
        return low + (high - low) * (1.0 - math.cos(2.0 * math.pi * t / period_s)) / 2.0

    return sine


def parse_wave_load(text: str) -> tuple[int, int] | None:
    """Parse "CLIENTS,TOKENS" (or "off"/"" for none) as given on the command line."""
    text = text.strip().lower()
    if text in ("", "off", "none", "0"):
        return None
    parts = [p.strip() for p in text.split(",")]
    try:
        clients, tokens = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"wave load {text!r}: expected CLIENTS,TOKENS such as 4,64") from None
    if clients < 1 or tokens < 1:
        raise ValueError(f"wave load {text!r}: need CLIENTS >= 1 and TOKENS >= 1")
    return (clients, tokens)


def parse_background_load(text: str) -> tuple[float, float, float] | None:
    """Parse "MIN,MAX,PERIOD_S" (or "off"/"" for none) as given on the command line."""
    text = text.strip().lower()
    if text in ("", "off", "none", "0"):
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3:
        raise ValueError(f"background load {text!r}: expected MIN,MAX,PERIOD_S such as 2,24,60")
    try:
        low, high, period = (float(p) for p in parts)
    except ValueError:
        raise ValueError(f"background load {text!r}: MIN, MAX and PERIOD_S must be numbers") from None
    if low < 0 or high < low or period <= 0:
        raise ValueError(f"background load {text!r}: need 0 <= MIN <= MAX and PERIOD_S > 0")
    return (low, high, period)
