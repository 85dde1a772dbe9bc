"""A toy tokenizer for prompts and a seeded word source for generated tokens."""

from __future__ import annotations

import random
import re
from typing import Any

_PIECE = re.compile(r"\w+|[^\w\s]")

# Generated text is nonsense on purpose (like the tiny random-weight model in the fixtures), but
# readable in a demo.
_WORDS = [
    "the",
    "model",
    "token",
    "batch",
    "cache",
    "queue",
    "latency",
    "stream",
    "request",
    "server",
    "decode",
    "prefill",
    "kernel",
    "tensor",
    "memory",
    "bandwidth",
    "scheduler",
    "context",
    "prompt",
    "sequence",
    "layer",
    "attention",
    "head",
    "weight",
    "gradient",
    "throughput",
    "sample",
    "vector",
    "matrix",
    "block",
    "page",
    "engine",
    "worker",
    "shard",
    "replica",
    "router",
]


def tokenize(text: str) -> list[str]:
    """Split text into word and punctuation pieces, a stand-in for a real tokenizer."""
    return _PIECE.findall(text)


def chat_prompt_tokens(messages: Any) -> list[str]:
    """Tokens of a chat request after a Llama-like chat template (role markers around each message)."""
    tokens: list[str] = ["<|begin_of_text|>"]
    if isinstance(messages, list):
        for message in messages:
            if not isinstance(message, dict):
                continue
            role = str(message.get("role", "user"))
            tokens += ["<|start_header_id|>", role, "<|end_header_id|>"]
            tokens += tokenize(_content_text(message.get("content")))
            tokens.append("<|eot_id|>")
    tokens += ["<|start_header_id|>", "assistant", "<|end_header_id|>"]
    return tokens


def completion_prompt_tokens(prompt: Any) -> list[str]:
    """Tokens of a completions prompt: a string, a list of strings, or a list of token ids."""
    if isinstance(prompt, str):
        return ["<|begin_of_text|>", *tokenize(prompt)]
    if isinstance(prompt, list):
        if all(isinstance(p, int) for p in prompt):
            return [f"#{p}" for p in prompt]
        tokens = ["<|begin_of_text|>"]
        for part in prompt:
            tokens += tokenize(str(part))
        return tokens
    return ["<|begin_of_text|>"]


def _content_text(content: Any) -> str:
    # OpenAI allows content as a list of parts ({"type": "text", "text": ...}).
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


class WordSource:
    """Seeded generator of token texts (" word" per token)."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def token(self) -> str:
        """The text of one generated token."""
        return " " + self._rng.choice(_WORDS)
