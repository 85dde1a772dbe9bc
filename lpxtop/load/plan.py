"""What a load test will do: the target, which load is swept, the steps' lengths, the SLO and the limits."""

from __future__ import annotations

from dataclasses import dataclass, replace

from lpxtop.engine.probe import TTFT_FROM
from lpxtop.load.prompts import HEAD_WORDS, Calibration, filler_text
from lpxtop.load.search import CapacitySearch, Walk
from lpxtop.load.slo import Slo
from lpxtop.model.endpoint import EndpointConfig

DEFAULT_OUTPUT_TOKENS = 128
DEFAULT_DURATION_S = 60.0
DEFAULT_WARMUP_S = 5.0
DEFAULT_MAX_CONCURRENCY = 1024
LAG_LIMIT_MS = 20.0  # a step whose requests saw the generator's loop later than this (p99) is client-limited
CPU_WAIT_LIMIT = 0.10  # ... or whose thread waited for a CPU more than this share of the step


@dataclass(frozen=True)
class LoadPlan:
    """A load test, fully decided before it starts (the CLI builds it; tests build it directly).

    `mode` is the swept dimension: "concurrency" (closed loop), "rate" (open loop) or "input_tokens" (prompt
    length at a fixed `concurrency` or `rate`). `levels` is the list to walk, or with `search` the first level
    of the capacity search (up to `max_level`).
    """

    endpoint: EndpointConfig
    mode: str
    levels: tuple[float, ...]
    search: bool = False
    max_level: float = 1024.0
    concurrency: int | None = None  # fixed concurrency when another dimension is swept
    rate: float | None = None  # fixed rate when another dimension is swept
    input_tokens: int | None = None  # fixed prompt length when another dimension is swept
    output_tokens: int = DEFAULT_OUTPUT_TOKENS
    ignore_eos: bool = False
    duration_s: float = DEFAULT_DURATION_S
    warmup_s: float = DEFAULT_WARMUP_S
    burstiness: float = 1.0
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    slo: Slo | None = None
    seed: int = 0
    max_steps: int = 16
    precision: float = 0.1
    lag_limit_ms: float = LAG_LIMIT_MS
    cpu_wait_limit: float = CPU_WAIT_LIMIT
    warmup_requests: int = 2
    ttft_from: str = "sent"  # "call": each request's clock starts when it is made, as vllm bench serve's
    stagger: bool = False  # closed loop: spread the workers' first requests over the warm-up (lpxtop/load/rhythm.py)

    def __post_init__(self) -> None:
        if self.mode not in ("concurrency", "rate", "input_tokens"):
            raise ValueError(f"unknown load mode {self.mode!r}")
        if not self.levels:
            raise ValueError("no load levels")
        if self.mode == "input_tokens" and self.concurrency is None and self.rate is None:
            raise ValueError("an input-token sweep needs a fixed --concurrency or --rate")
        if self.search and self.mode == "input_tokens":
            raise ValueError("--sweep searches concurrency or rate, not input tokens")
        if self.search and self.slo is None:
            raise ValueError("--sweep needs an --slo to search for")
        if self.ttft_from not in TTFT_FROM:
            raise ValueError(f"--ttft-from is one of {', '.join(TTFT_FROM)}, not {self.ttft_from!r}")
        if self.stagger and self.open_loop:
            raise ValueError("--stagger spreads a closed loop's workers: an open loop's arrivals are already apart")
        if self.stagger and self.warmup_s <= 0:
            raise ValueError("--stagger spreads the workers' first requests over the warm-up: give --warmup > 0")

    def strategy(self) -> Walk | CapacitySearch:
        if self.search:
            return CapacitySearch(self.mode, self.levels[0], self.max_level, precision=self.precision,
                                  max_steps=self.max_steps)
        return Walk(self.levels)

    @property
    def open_loop(self) -> bool:
        return self.mode == "rate" or (self.mode == "input_tokens" and self.rate is not None)

    @property
    def schedule(self) -> str:
        """How requests are sent: "together" (a closed loop's workers start at once, as `vllm bench serve`),
        "staggered" (`--stagger`) or "arrivals" (open loop)."""
        if self.open_loop:
            return "arrivals"
        return "staggered" if self.stagger else "together"

    def step_load(self, level: float) -> tuple[int | None, float | None, int | None]:
        """(concurrency, rate, input tokens) of the step at `level`."""
        concurrency = int(level) if self.mode == "concurrency" else self.concurrency
        rate = level if self.mode == "rate" else self.rate
        tokens = int(level) if self.mode == "input_tokens" else self.input_tokens
        if self.open_loop:
            concurrency = None
        else:
            rate = None
        return concurrency, rate, tokens

    @property
    def uses_input_tokens(self) -> bool:
        return self.mode == "input_tokens" or self.input_tokens is not None

    def step_endpoint(self, input_tokens: int | None, calibration: Calibration | None) -> EndpointConfig:
        """The endpoint settings one step's requests use: output length, prompt, extra body."""
        extra = dict(self.endpoint.extra_body)
        if self.ignore_eos:
            extra["ignore_eos"] = True
        changes: dict = {"max_tokens": self.output_tokens, "extra_body": tuple(extra.items())}
        if input_tokens is not None:
            words = calibration.words_for(input_tokens) if calibration else input_tokens
            # each request shuffles its first words (`head_words`) instead of the probe's random hex prefix
            changes["prompt"] = filler_text(words)
            changes["random_prefix"] = False
        return replace(self.endpoint, **changes)

    def head_words(self, input_tokens: int | None, calibration: Calibration | None) -> int:
        """How many of each request's first words are shuffled (lpxtop/load/prompts.py): with --input-tokens,
        unless --no-random-prefix."""
        if input_tokens is None or not self.endpoint.random_prefix:
            return 0
        words = calibration.words_for(input_tokens) if calibration else input_tokens
        return min(HEAD_WORDS, max(0, words - 1))

    def approximate_requests(self) -> int | None:
        """About how many requests the plan sends (for the question asked before loading a remote target)."""
        if self.search:
            return None
        total = 0.0
        for level in self.levels:
            concurrency, rate, _ = self.step_load(level)
            seconds = self.duration_s + self.warmup_s
            if rate is not None:
                total += rate * seconds
            else:
                # a request's length is unknown before it runs: assume ~2 s per request per slot
                total += (concurrency or 1) * seconds / 2.0
        return int(total)

    def summary(self) -> dict:
        return {
            "url": self.endpoint.url,
            "model": self.endpoint.model,
            "api": self.endpoint.api,
            "mode": self.mode,
            "search": self.search,
            "levels": list(self.levels),
            "max_level": self.max_level if self.search else None,
            "concurrency": self.concurrency,
            "request_rate": self.rate,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "ignore_eos": self.ignore_eos,
            "duration_s": self.duration_s,
            "warmup_s": self.warmup_s,
            "burstiness": self.burstiness if self.open_loop else None,
            "max_concurrency": self.max_concurrency if self.open_loop else None,
            "schedule": self.schedule,
            "ttft_from": self.ttft_from,
            "random_prefix": self.endpoint.random_prefix,
            "timeout_s": self.endpoint.timeout_s,
            "first_token_timeout_s": self.endpoint.first_token_timeout_s,
            "seed": self.seed,
            "client_lag_limit_ms": self.lag_limit_ms,
            "client_cpu_wait_limit": self.cpu_wait_limit,
        }
