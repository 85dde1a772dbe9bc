"""Prompts of a chosen length in tokens, for `--input-tokens`, without the server's tokenizer.

lpxtop does not ship tokenizers. The prompt is filler words that nearly every BPE tokenizer encodes as
one token each (" the", " of" ...), and its length is calibrated against the server's own count: two
warm-up requests with W and 2W words give the server's `usage.prompt_tokens` for each, hence tokens per
word and the fixed overhead (chat template, the random prefix). Reports always use the prompt tokens the
server's `usage` gave per request; the calibration only aims.
"""

from __future__ import annotations

from dataclasses import dataclass

# Short, common words: one token each in Llama, Qwen, GPT and Mistral vocabularies (with the leading space).
FILLER_WORDS = (
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
    "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you",
)  # fmt: skip
CALIBRATION_WORDS = 64


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
