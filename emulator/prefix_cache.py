"""A prefix cache in the manner of vLLM's automatic prefix caching (EMULATED).

A prompt is cut into blocks of `block` tokens; each full block is named by a hash chained
over every block before it, so two prompts share a cached block only when they share the
whole prefix up to its end. A request hits the leading run of its blocks that are cached;
its blocks are then cached too (at admission: a simplification, vLLM caches a block once
it is computed). Blocks are evicted least recently used once they would exceed the KV
cache's capacity in tokens. As in vLLM, the last prompt token is always computed, so a
prompt never hits completely: at most `(n − 1) // block × block` tokens are cached.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

BLOCK_TOKENS = 16  # vLLM's default block size on GPUs


class PrefixCache:
    def __init__(self, capacity_tokens: int, block: int = BLOCK_TOKENS):
        self.block = block
        self.capacity_blocks = max(0, capacity_tokens // block)
        self.blocks: OrderedDict[int, None] = OrderedDict()
        self.queries = self.hits = 0  # tokens asked for / tokens served (vLLM's counters)

    def hashes(self, tokens: Sequence) -> list[int]:
        b, out, prev = self.block, [], 0
        for i in range(0, len(tokens) - b + 1, b):
            prev = hash((prev, tuple(tokens[i:i + b])))
            out.append(prev)
        return out

    def admit(self, tokens: Sequence) -> int:
        """Look `tokens` up, cache their full blocks; the number of prompt tokens served."""
        n = len(tokens)
        usable = (n - 1) // self.block if n else 0
        hashes = self.hashes(tokens)
        hit = 0
        for h in hashes[:usable]:
            if h not in self.blocks:
                break
            self.blocks.move_to_end(h)
            hit += 1
        for h in hashes:
            if h in self.blocks:
                self.blocks.move_to_end(h)
            else:
                self.blocks[h] = None
        while len(self.blocks) > self.capacity_blocks:
            self.blocks.popitem(last=False)
        cached = hit * self.block
        self.queries += n
        self.hits += cached
        return cached
