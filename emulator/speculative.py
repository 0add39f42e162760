"""Speculative decoding (EAGLE, n-gram, MTP drafts) as the engines see it (EMULATED).

Each decode step of a sequence drafts `k` tokens and verifies them in one forward pass.
Draft position i is accepted with probability `p` provided every earlier one was (the
first rejection discards the rest, as in vLLM's rejection sampler), and the verification
always yields one more token of its own. So a step emits `1 + a` tokens, a ∈ [0, k], with

    P(a = j) = p^j (1 − p) for j < k,  P(a = k) = p^k,
    E[a] / k = (p + p² + … + p^k) / k   (the acceptance rate vLLM's counters give),

which is what `expected_rate` returns: the rate a client measures from the counters is this,
not `p` (they agree only for k = 1). The counters are vLLM's
`spec_decode_num_draft_tokens_total` (k per sequence-step) and
`spec_decode_num_accepted_tokens_total` (a per sequence-step).
"""

from __future__ import annotations

import random


class Speculative:
    def __init__(self, draft_tokens: int, acceptance: float, seed: int = 0):
        if draft_tokens < 1:
            raise ValueError(f"draft tokens must be ≥ 1, got {draft_tokens}")
        if not 0.0 <= acceptance <= 1.0:
            raise ValueError(f"acceptance probability must be in [0, 1], got {acceptance}")
        self.k, self.p = draft_tokens, acceptance
        self.rng = random.Random(f"{seed}:speculative")
        self.drafted = 0  # cumulative counters, exposed on /metrics
        self.accepted = 0

    def step(self, room: int) -> int:
        """Tokens one sequence emits in one decode step, at most `room` (its output left)."""
        a = 0
        while a < self.k and self.rng.random() < self.p:
            a += 1
        self.drafted += self.k
        self.accepted += a
        return min(1 + a, max(room, 1))

    def expected_rate(self) -> float:
        return sum(self.p ** i for i in range(1, self.k + 1)) / self.k
