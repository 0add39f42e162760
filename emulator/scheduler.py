"""Continuous batching, vLLM-V1 style, in model time (no clock, no I/O).

Each `step()` takes the running sequences' decode tokens first, then prefill chunks,
then admits waiting sequences while `max_num_seqs`, the per-step token budget and
the KV cache allow. The sequence whose last prompt chunk runs in a step emits its first
token at the end of that step. `simulate()` drives the same scheduler in virtual time for
the modelled curves.

The KV cache, two ways (`block`):
* None (the default): a sequence reserves KV for prompt + output at admission and is never
  preempted, so when the cache is full new requests wait;
* N tokens per block, as vLLM V1 allocates it: a sequence holds whole blocks for the tokens
  it has so far and takes one more when it outgrows them; it is admitted while its prompt's
  blocks fit. When a running sequence needs a block and none is free, the newest running
  sequence is preempted (vLLM's recompute preemption: its blocks freed, it waits at the
  head of the queue, and is prefilled again, prompt and the tokens it had generated, before
  it emits its next token); no waiting sequence is admitted in a step that preempted.
  Simplification: a preempted sequence's blocks are not served back from the prefix cache.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from servingbench.emulator.model import PerfModel


@dataclass(eq=False)
class Seq:
    prompt: int
    output: int  # tokens this sequence will generate before it finishes
    tag: object = None  # the engine's handle (a stream)
    computed: int = 0  # prompt tokens prefilled so far
    generated: int = 0
    paused_until: float = 0.0  # engine time before which the sequence is not scheduled
    blocks: int = 0  # KV blocks held (the block mode)
    # tokens to prefill before it decodes: the prompt, or after a preemption the prompt and
    # every token generated before it (recomputed)
    target: int = -1

    def __post_init__(self) -> None:
        if self.target < 0:
            self.target = self.prompt

    @property
    def kv_tokens(self) -> int:
        return self.prompt + self.output


@dataclass
class Step:
    duration: float  # modelled seconds
    emitted: list[Seq] = field(default_factory=list)  # one new token each, unless in `tokens`
    finished: list[Seq] = field(default_factory=list)
    tokens: dict[Seq, int] = field(default_factory=dict)  # speculative decoding: 1 + accepted


class Scheduler:
    def __init__(self, model: PerfModel, max_num_seqs: int, token_budget: int, kv_tokens: int,
                 speculative=None, block: int | None = None):
        self.model = model
        # emulator.speculative.Speculative or None: each decode verifies k drafted tokens
        self.spec = speculative
        self.max_num_seqs = max_num_seqs
        self.token_budget = token_budget
        self.kv_capacity = kv_tokens
        self.kv_used = 0
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        # None: reserve prompt + output at admission; N: vLLM V1's blocks of N tokens
        self.block = block
        self.free_blocks = kv_tokens // block if block else 0
        self.preemptions = 0  # vLLM's num_preemptions_total
        self._gone: set[Seq] = set()

    def add(self, seq: Seq) -> None:
        if seq.kv_tokens > self.kv_capacity:
            raise ValueError(f"sequence needs {seq.kv_tokens} KV tokens, cache holds {self.kv_capacity}")
        self.waiting.append(seq)

    def abort(self, seq: Seq) -> None:
        if seq in self.running:
            self.running.remove(seq)
            self._release(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)

    # --- the KV cache ------------------------------------------------------------------------
    def _release(self, seq: Seq) -> None:
        if self.block:
            self.free_blocks += seq.blocks
            self.kv_used -= seq.blocks * self.block
            seq.blocks = 0
        else:
            self.kv_used -= seq.kv_tokens

    def _need(self, seq: Seq, tokens: int) -> int:
        """More blocks `seq` needs to hold `tokens` tokens (block mode)."""
        return max(0, -(-tokens // self.block) - seq.blocks)

    def _take(self, seq: Seq, n: int) -> None:
        seq.blocks += n
        self.free_blocks -= n
        self.kv_used += n * self.block

    def _grow(self, seq: Seq, tokens: int) -> bool:
        """Blocks for `seq` to hold `tokens`, preempting the newest running sequences while
        none are free (vLLM V1); False when `seq` itself was the one preempted."""
        while (n := self._need(seq, tokens)) > self.free_blocks:
            victim = self.running[-1]
            self._preempt(victim)
            if victim is seq:
                return False
        self._take(seq, n)
        return True

    def _preempt(self, seq: Seq) -> None:
        self._gone.add(seq)
        self.running.remove(seq)
        self._release(seq)
        seq.target, seq.computed = seq.prompt + seq.generated, 0
        self.waiting.appendleft(seq)
        self.preemptions += 1

    @property
    def kv_usage(self) -> float:
        return self.kv_used / self.kv_capacity if self.kv_capacity else 0.0

    def next_unpause(self) -> float | None:
        paused = [s.paused_until for s in self.running if s.paused_until > 0]
        return min(paused) if paused else None

    def _fits(self, s: Seq) -> bool:
        """Whether the KV cache admits waiting `s` now: its whole reservation, or (blocks)
        the blocks of what it has to prefill."""
        if self.block:
            return self._need(s, s.target) <= self.free_blocks
        return self.kv_used + s.kv_tokens <= self.kv_capacity

    def step(self, now: float = 0.0) -> Step | None:
        """Plan and account one step; None when nothing can run now."""
        budget = self.token_budget
        decodes: list[Seq] = []
        prefills: list[tuple[Seq, int]] = []
        preempted = self.preemptions
        self._gone: set[Seq] = set()  # preempted during this step
        width = 1 + self.spec.k if self.spec is not None else 1
        for s in list(self.running):
            if s in self._gone or s.paused_until > now:  # preempted, or stalled
                continue
            s.paused_until = 0.0
            if s.computed >= s.target:
                # a decode writes the KV of the last token (and of the k drafts)
                if budget > 0 and (not self.block
                                   or self._grow(s, s.prompt + s.generated + width - 1)):
                    decodes.append(s)
                    budget -= 1
            elif budget > 0:
                c = min(budget, s.target - s.computed)
                if not self.block or self._grow(s, s.computed + c):
                    prefills.append((s, c))
                    budget -= c
        admitted = 0
        while (self.waiting and budget > 0 and len(self.running) < self.max_num_seqs
               and self.preemptions == preempted and self._fits(self.waiting[0])):
            s = self.waiting.popleft()
            admitted += 1
            self.running.append(s)
            c = min(budget, s.target - s.computed)  # computed > 0: a prefix-cache hit
            if self.block:
                self._take(s, self._need(s, s.computed + c))
            else:
                self.kv_used += s.kv_tokens
            prefills.append((s, c))
            budget -= c
        if not decodes and not prefills:
            return None
        m = self.model
        kv_read = sum(m.effective_context(s.prompt + s.generated) for s in decodes)
        # speculative decoding: a decode verifies 1 + k query tokens against the same KV, so
        # compute and attention grow k + 1 times while the KV bytes read do not (the drafter's
        # own cost is not modelled: an EAGLE head is about one decoder layer)
        pairs = kv_read * width + sum(m.prefill_pairs(s.computed, c) for s, c in prefills)
        n_prefill = sum(c for _, c in prefills)
        step = Step(m.step_time(n_prefill, len(decodes) * width, kv_read, pairs, admitted))
        for s in decodes:
            n = 1 if self.spec is None else self.spec.step(s.output - s.generated)
            s.generated += n
            if n > 1:
                step.tokens[s] = n
            step.emitted.append(s)
        for s, c in prefills:
            s.computed += c
            if s.computed == s.target:
                s.generated += 1
                step.emitted.append(s)
        for s in step.emitted:
            if s.generated >= s.output:
                step.finished.append(s)
                self.running.remove(s)
                self._release(s)
        return step


@dataclass(frozen=True)
class Curve:
    concurrency: int
    throughput_tok_s: float  # aggregate output tokens / s
    ttft_s: float  # mean
    itl_s: float  # mean inter-token latency


def simulate(model: PerfModel, concurrency: int, prompt: int, output: int,
             max_num_seqs: int = 256, token_budget: int = 8192, kv_tokens: int | None = None,
             requests: int | None = None) -> Curve:
    """Closed loop in virtual time: `concurrency` requests always in flight."""
    kv = kv_tokens if kv_tokens is not None else 10**9
    sched = Scheduler(model, max_num_seqs, token_budget, kv)
    total = requests or max(4 * concurrency, 32)
    started, now = 0, 0.0
    arrival: dict[Seq, float] = {}
    last: dict[Seq, float] = {}
    ttfts: list[float] = []
    itls: list[float] = []
    tokens = 0

    def launch() -> None:
        nonlocal started
        s = Seq(prompt, output)
        arrival[s] = now
        sched.add(s)
        started += 1

    for _ in range(min(concurrency, total)):
        launch()
    while True:
        step = sched.step(now)
        if step is None:
            break
        now += step.duration
        for s in step.emitted:
            tokens += 1
            if s in last:
                itls.append(now - last[s])
            else:
                ttfts.append(now - arrival[s])
            last[s] = now
        for _ in step.finished:
            if started < total:
                launch()
    return Curve(concurrency, tokens / now if now else 0.0,
                 sum(ttfts) / len(ttfts), sum(itls) / len(itls) if itls else 0.0)
