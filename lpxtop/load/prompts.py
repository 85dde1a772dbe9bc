"""Prompts of a chosen length in tokens, for `--input-tokens`, without the server's tokenizer.

lpxtop does not ship tokenizers. The prompt is filler words that nearly every BPE tokenizer encodes as
one token each (" the", " of" ...), and its length is calibrated against the server's own count: two
warm-up requests with W and 2W words give the server's `usage.prompt_tokens` for each, hence tokens per
word and the fixed overhead (the chat template); then each target the test will send is checked with the
server and corrected (`Calibration.refined`), as a tokenizer whose words are several tokens is not linear.
Reports always use the prompt tokens the server's `usage` gave per request; the calibration only aims.

`--input-tokens N` aims at N tokens *as the server counts them*, chat template included. `vllm bench serve
--random-input-len L` makes prompts of L tokens before the template (its special tokens included): the
server counts more for them (50 for L = 32 on the real-server kit's small-llama). To send the benchmark's prompt
length, give lpxtop the server's count of it (the benchmark's "Total input tokens" / requests, or its
`input_lens`).

Each request's prompt is the filler text with its 2nd to 13th words (`HEAD_WORDS`) in a random order: no two
requests share a first cache block (12! ≈ 4.8e8 orders), so prefix caching cannot hide prefill, and the
length does not vary: the words are the same, each with its leading space, and a tokenizer that splits on
spaces (Llama's, Qwen's, GPT's, the real-server kit's 481-token toy) counts them alike in any order (the
first word, which has no space before it, stays first). The probe's random hex prefix tokenized to a
different number of tokens each time, and words drawn at random do too where a word is several tokens:
either left the calibration ~6 % short.
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
HEAD_WORDS = 12  # the words after the first, shuffled per request: 12! ≈ 4.8e8 different starts
_HEAD_RNG = random.Random()  # seeded from the OS: a rerun must not meet the previous run's cached prefixes


class FreshStarts:
    """One prompt, a different start for every request: its 2nd to (`head`+1)th words in a random order."""

    def __init__(self, prompt: str, head: int = HEAD_WORDS) -> None:
        words = prompt.split(" ", head + 1)
        self.first = words[0]
        self.head = words[1:head + 1]
        self.rest = words[head + 1] if len(words) > head + 1 else ""

    def next(self) -> str:
        head = _HEAD_RNG.sample(self.head, len(self.head))
        return " ".join([self.first, *head, self.rest] if self.rest else [self.first, *head])


def filler_text(words: int) -> str:
    """`words` filler words, in a fixed order (the random prefix the probe adds defeats prefix caching)."""
    n = len(FILLER_WORDS)
    return " ".join(FILLER_WORDS[(i * 7) % n] for i in range(max(0, words)))


@dataclass(frozen=True)
class Calibration:
    """Server tokens = overhead + per_word × words, measured with the server's usage; `exact` holds the word
    counts checked against the server for the test's own targets (`refined`), which win over the line: a
    tokenizer whose words are several tokens each is not linear over a few dozen words (the kit's toy one
    gave 45 for 50 from the line)."""

    overhead: float
    per_word: float
    exact: tuple[tuple[int, int], ...] = ()  # (tokens, words) the server confirmed

    def words_for(self, tokens: int) -> int:
        for target, words in self.exact:
            if target == tokens:
                return words
        if self.per_word <= 0:
            return max(1, tokens)
        return max(1, round((tokens - self.overhead) / self.per_word))

    def refined(self, tokens: int, words: int) -> Calibration:
        return Calibration(self.overhead, self.per_word, (*(e for e in self.exact if e[0] != tokens), (tokens, words)))

    def next_guess(self, tokens: int, tried: list[tuple[int, int]]) -> int:
        """The next word count to try for `tokens` after `tried` (words, the server's count) pairs: a secant
        through the last two, or the line's slope after one; at least one word closer."""
        words, measured = tried[-1]
        slope = self.per_word
        if len(tried) >= 2 and tried[-1][0] != tried[-2][0]:
            secant = (tried[-1][1] - tried[-2][1]) / (tried[-1][0] - tried[-2][0])
            if secant > 0:
                slope = secant
        step = round((tokens - measured) / slope) if slope > 0 else tokens - measured
        if step == 0:
            step = 1 if tokens > measured else -1
        return max(1, words + step)

    @classmethod
    def from_points(cls, words_a: int, tokens_a: int, words_b: int, tokens_b: int) -> Calibration:
        if words_b == words_a:
            raise ValueError("two different prompt lengths are needed")
        per_word = (tokens_b - tokens_a) / (words_b - words_a)
        if per_word <= 0:
            per_word = 1.0  # a server that reports nonsense: aim at one token a word
        return cls(overhead=tokens_a - per_word * words_a, per_word=per_word)
