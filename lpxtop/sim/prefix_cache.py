"""A bounded LRU of prompt-block hashes, standing in for vLLM's automatic prefix caching."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    """Remembers hashes of full prompt blocks; a new prompt hits on its leading blocks seen before.

    Like vLLM, block hashes chain (each includes the previous one), so only a shared *prefix* hits,
    and the last prompt token is always computed.
    """

    def __init__(self, block_tokens: int, max_blocks: int) -> None:
        self.block_tokens = max(1, block_tokens)
        self._max_blocks = max(1, max_blocks)
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def lookup_and_insert(self, tokens: Sequence[str]) -> int:
        """Return how many leading tokens of `tokens` were cached; then remember all full blocks."""
        hits = 0
        matching = True
        previous = 0
        n_full = len(tokens) // self.block_tokens
        for i in range(n_full):
            block = tuple(tokens[i * self.block_tokens : (i + 1) * self.block_tokens])
            key = hash((previous, block))
            previous = key
            if matching and key in self._blocks:
                hits += self.block_tokens
                self._blocks.move_to_end(key)
            else:
                matching = False
                self._blocks[key] = None
                if len(self._blocks) > self._max_blocks:
                    self._blocks.popitem(last=False)
        # At least one token is always computed, so the request produces a first token.
        return min(hits, max(0, len(tokens) - 1))

    def clear(self) -> None:
        """Forget everything."""
        self._blocks.clear()
