"""Prompts of a chosen length in tokens, for `--input-tokens`, without the server's tokenizer.

lpxtop does not ship tokenizers. The prompt is filler words that nearly every BPE tokenizer encodes as
one token each (" the", " of" ...), and its length is calibrated against the server's own count: two
warm-up requests with W and 2W words give the server's `usage.prompt_tokens` for each, hence tokens per
word and the fixed overhead (the chat template). Reports always use the prompt tokens the server's
`usage` gave per request; the calibration only aims, and lands exactly where each word is one token.

`--input-tokens N` aims at N tokens *as the server counts them*, chat template included. `vllm bench serve
--random-input-len L` makes prompts of L tokens before the template (its special tokens included): the
server counts more for them (38 for L = 32 on a Llama chat template). To send the benchmark's prompt
length, give lpxtop the server's count of it (the benchmark's "Total input tokens" / requests, or its
`input_lens`).

Each request's prompt starts with `HEAD_WORDS` filler words drawn at random (the rest is fixed): no two
requests share a first cache block, so prefix caching cannot hide prefill, and the length does not vary
(the probe's random hex prefix tokenizes to a different number of tokens each time, which left the
calibration ~6 % short on a Llama tokenizer).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# Short, common words: one token each in Llama, Qwen, GPT and Mistral vocabularies (with the leading space).
FILLER_WORDS = (
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
    "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you",
)  # fmt: skip
CALIBRATION_WORDS = 64
HEAD_WORDS = 8  # random words that start each prompt: 30^8 ≈ 6.6e11 different heads
_HEAD_RNG = random.Random()  # seeded from the OS: a rerun must not meet the previous run's cached prefixes


def random_head(words: int = HEAD_WORDS) -> str:
    """`words` filler words drawn at random (a prompt's fresh beginning; one token each like the rest)."""
    return " ".join(_HEAD_RNG.choices(FILLER_WORDS, k=words))


def filler_text(words: int) -> str:
    """`words` filler words, in a fixed order (the random prefix the probe adds defeats prefix caching)."""
    n = len(FILLER_WORDS)
    return " ".join(FILLER_WORDS[(i * 7) % n] for i in range(max(0, words)))


@dataclass(frozen=True)
class Calibration:
    """Server tokens = overhead + per_word × words, measured with the server's usage."""

    overhead: float
    per_word: float

    def words_for(self, tokens: int) -> int:
        if self.per_word <= 0:
            return max(1, tokens)
        return max(1, round((tokens - self.overhead) / self.per_word))

    @classmethod
    def from_points(cls, words_a: int, tokens_a: int, words_b: int, tokens_b: int) -> Calibration:
        if words_b == words_a:
            raise ValueError("two different prompt lengths are needed")
        per_word = (tokens_b - tokens_a) / (words_b - words_a)
        if per_word <= 0:
            per_word = 1.0  # a server that reports nonsense: aim at one token a word
        return cls(overhead=tokens_a - per_word * words_a, per_word=per_word)
