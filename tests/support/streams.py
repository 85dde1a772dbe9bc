"""Whole SSE bodies as the simulated server writes them, for parser and probe tests that need no socket."""

from __future__ import annotations

import random
from collections.abc import Iterable

from lpxtop.sim.wire import ChunkMaker, sse


def sim_stream(api: str, tokens: int, empty_rate: float, seed: int = 0) -> bytes:
    """The body of one simulated response: the sim's own chunk shapes (vLLM 0.32's), a role chunk for
    chat, `tokens` token chunks of which about `empty_rate` are `"content": ""` (the last one never),
    the finish chunk, the usage chunk and `[DONE]`."""
    rng = random.Random(seed)
    maker = ChunkMaker(api, "chatcmpl-0123456789abcdef", "sim-model", "vllm-0.32.0-00000000")
    parts = [sse(maker.role())] if api == "chat" else []
    carry = ""
    for i in range(tokens - 1):
        word = f" w{i}é"
        if rng.random() < empty_rate:
            carry += word
            parts.append(sse(maker.content("")))
        else:
            parts.append(sse(maker.content(carry + word)))
            carry = ""
    parts.append(sse(maker.content(carry + " end", "length")))
    parts.append(sse(maker.usage(7, tokens)))
    parts.append(sse("[DONE]"))
    return b"".join(parts)


def reads_of(raw: bytes, cuts: Iterable[int]) -> list[tuple[bytes, int]]:
    """`raw` cut at `cuts`; each read stamped with the offset where it ends."""
    bounds = sorted({c for c in cuts if 0 < c < len(raw)}) + [len(raw)]
    out, last = [], 0
    for b in bounds:
        out.append((raw[last:b], b))
        last = b
    return out
