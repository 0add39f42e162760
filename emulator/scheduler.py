"""The engine's scheduler, in model time (no clock, no I/O): which tokens each step runs.

One scheduler serves the live emulator (one step at a time, on real deadlines) and the
virtual-time runs of `predict` and the calibration (emulator/virtual.py), which let it jump
over runs of identical decode steps. Policies (engines.yaml profiles):

* mixed (vLLM V1, TensorRT-LLM): each step takes the running sequences' decodes first, then
  prefill chunks, then admits waiting sequences while `max_num_seqs`, the token budget and
  the KV cache allow; a sequence whose last prompt chunk runs emits its first token.
* prefill_first (SGLang): a step is a prefill batch (chunks up to the budget) whenever a
  prompt is in progress or a waiting one can be admitted, else a decode batch.
* context_encoding (Neuron): a waiting prompt runs alone, padded to its bucket, whenever a
  batch slot is free; otherwise a decode step of every running sequence.
* static (transformers-neuronx): a batch is admitted only when none runs, encoded in one
  pass, and decoded to its end.

KV cache: a sequence reserves its prompt plus `reserve_output` of its output at admission
and grows past that as it writes tokens, in whole blocks of `block` tokens (vLLM V1: 16 on a
GPU, 128 on its CPU build); when the cache runs out, the newest running sequence is
preempted (vLLM's recompute: back to the front of the queue, its prompt and generated tokens
prefilled again on readmission), and no waiting sequence is admitted in that step. With
reserve_output 1 nothing is ever preempted.

A `Seq` may stand for `n` identical requests (a cohort) in virtual runs; the live engine
always has n = 1.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from servingbench.emulator.perf import PerfModel

POLICIES = ("mixed", "prefill_first", "context_encoding", "static")


@dataclass(eq=False)
class Seq:
    prompt: int
    output: int  # tokens this sequence will generate before it finishes
    tag: object = None  # the engine's handle (a stream), or the virtual run's request
    computed: int = 0  # prompt tokens prefilled so far (of `target`)
    generated: int = 0
    paused_until: float = 0.0  # engine time before which the sequence is not scheduled
    n: int = 1  # identical requests this sequence stands for
    held: int = 0  # KV tokens allocated (each of the n)
    redo: int = 0  # generated tokens to prefill again after a preemption

    @property
    def kv_tokens(self) -> int:
        return self.prompt + self.output

    @property
    def blocks(self) -> int:
        """KV blocks held (of the scheduler's block size; tokens when it is 1)."""
        return self.held // self.block if self.block else self.held

    block: int = 0  # the block size the scheduler allocated `held` in (set at admission)

    @property
    def target(self) -> int:
        """Tokens to prefill: the prompt, plus what a preemption threw away."""
        return self.prompt + self.redo

    @property
    def prefilling(self) -> bool:
        return self.computed < self.target


@dataclass
class Step:
    duration: float  # modelled seconds
    emitted: list[Seq] = field(default_factory=list)  # one new token each, unless in `tokens`
    finished: list[Seq] = field(default_factory=list)
    tokens: dict[Seq, int] = field(default_factory=dict)  # speculative decoding: 1 + accepted
    count: int = 1  # steps this one stands for (virtual runs jump over identical decodes)
    features: tuple = ()  # (n_tok, n_logits, n_seq, kv_tok, pairs_dec, pairs_pre, admitted, ce)
    decoding: int = 0  # sequences that decoded in it (each an inter-token gap of its duration)


class Scheduler:
    def __init__(self, model: PerfModel, max_num_seqs: int, token_budget: int, kv_tokens: int,
                 speculative=None, policy: str = "mixed", reserve_output: float = 1.0,
                 buckets: tuple[int, ...] = (), block: int = 1):
        if policy not in POLICIES:
            raise ValueError(f"unknown scheduling policy {policy!r}; known: {', '.join(POLICIES)}")
        self.model = model
        # emulator.speculative.Speculative or None: each decode verifies k drafted tokens
        self.spec = speculative
        self.max_num_seqs = max_num_seqs
        self.token_budget = token_budget
        self.kv_capacity = kv_tokens
        self.policy, self.reserve_output, self.buckets = policy, reserve_output, buckets
        self.block = max(1, int(block))
        # Neuron's token-generation graph is compiled for its batch: every row of it runs,
        # live or padding (computed, routed to experts, charged the per-row overhead); only
        # the live rows' KV is read
        self.padded = policy in ("context_encoding", "static")
        self.kv_used = 0
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.preemptions = 0

    # --- bookkeeping --------------------------------------------------------------------------
    def add(self, seq: Seq) -> None:
        if seq.kv_tokens > self.kv_capacity:
            raise ValueError(f"sequence needs {seq.kv_tokens} KV tokens, cache holds {self.kv_capacity}")
        self.waiting.append(seq)

    def abort(self, seq: Seq) -> None:
        if seq in self.running:
            self.running.remove(seq)
            self.kv_used -= seq.held * seq.n
        elif seq in self.waiting:
            self.waiting.remove(seq)

    @property
    def kv_usage(self) -> float:
        return self.kv_used / self.kv_capacity if self.kv_capacity else 0.0

    @property
    def requests_running(self) -> int:
        return sum(s.n for s in self.running)

    def next_unpause(self) -> float | None:
        paused = [s.paused_until for s in self.running if s.paused_until > 0]
        return min(paused) if paused else None

    @property
    def free_blocks(self) -> int:
        return (self.kv_capacity - self.kv_used) // self.block

    def _blocks(self, tokens: int) -> int:
        """`tokens` rounded up to whole blocks."""
        return -(-tokens // self.block) * self.block

    def _reservation(self, s: Seq) -> int:
        return self._blocks(s.target + s.generated - s.redo
                            + math.ceil(self.reserve_output * (s.output - s.generated)))

    def _admit(self) -> Seq:
        s = self.waiting.popleft()
        s.held, s.block = self._reservation(s), self.block
        self.kv_used += s.held * s.n
        self.running.append(s)
        return s

    def _finish(self, s: Seq) -> None:
        self.running.remove(s)
        self.kv_used -= s.held * s.n

    def _grow(self, decodes: list[Seq], width: int) -> list[Seq]:
        """Allocate the KV the decodes write this step, preempting the newest sequences
        while it does not fit; returns the decodes still running."""
        while True:
            need = sum(max(0, self._blocks(s.prompt + s.generated + width - 1) - s.held) * s.n
                       for s in decodes)
            if self.kv_used + need <= self.kv_capacity or len(self.running) <= 1:
                break
            victim = self.running[-1]
            self._preempt(victim)
            if victim in decodes:
                decodes.remove(victim)
        for s in decodes:
            grow = max(0, self._blocks(s.prompt + s.generated + width - 1) - s.held)
            s.held += grow
            self.kv_used += grow * s.n
        return decodes

    def _preempt(self, s: Seq) -> None:
        self.running.remove(s)
        self.kv_used -= s.held * s.n
        s.held, s.computed, s.redo = 0, 0, s.generated
        self.waiting.appendleft(s)
        self.preemptions += s.n

    # --- one step -------------------------------------------------------------------------------
    def step(self, now: float = 0.0, max_steps: int = 1) -> Step | None:
        """Plan and account one step (or, with max_steps > 1, up to that many identical
        decode steps at once); None when nothing can run now."""
        if self.policy == "context_encoding":
            return self._step_neuron(now, max_steps)
        if self.policy == "static":
            return self._step_static(now, max_steps)
        return self._step_batched(now, max_steps)

    def _ready(self, now: float) -> list[Seq]:
        ready = []
        for s in self.running:
            if s.paused_until > now:
                continue
            s.paused_until = 0.0
            ready.append(s)
        return ready

    def _take(self, room: int) -> Seq:
        """Admit the waiting front, or the part of its cohort that `room` allows."""
        s = self.waiting[0]
        if s.n > room:
            # a virtual run's tag records times per part (`split`); the live engine never splits
            tag = s.tag.split() if hasattr(s.tag, "split") else s.tag
            part = Seq(s.prompt, s.output, tag, s.computed, s.generated, s.paused_until,
                       room, 0, s.redo)
            s.n -= room
            self.waiting.appendleft(part)
        return self._admit()

    def _room(self, s: Seq) -> int:
        """Members of the waiting cohort `s` that max_num_seqs and the KV cache admit now."""
        seqs = self.max_num_seqs - self.requests_running
        kv = (self.kv_capacity - self.kv_used) // max(1, self._reservation(s))
        return max(0, min(s.n, seqs, kv))

    def _step_batched(self, now: float, max_steps: int) -> Step | None:
        budget = self.token_budget
        prefill_first = self.policy == "prefill_first"
        ready = self._ready(now)
        in_progress = any(s.prefilling for s in ready)
        waiting_ok = bool(self.waiting) and self._room(self.waiting[0]) > 0
        width = 1 + self.spec.k if self.spec is not None else 1
        decodes: list[Seq] = []
        preempted = False
        if not (prefill_first and (in_progress or waiting_ok)):
            decodes = [s for s in ready if not s.prefilling]
            if sum(s.n for s in decodes) > budget:
                decodes = decodes[:budget]
            if decodes and not in_progress and not waiting_ok and max_steps > 1:
                return self._decode_run(decodes, max_steps)
            if self.reserve_output < 1:
                before = self.preemptions
                decodes = self._grow(decodes, width)
                preempted = self.preemptions > before
            budget -= sum(s.n for s in decodes) * width
        prefills: list[tuple[Seq, int]] = []
        admitted = 0
        if not (decodes and prefill_first):
            # (a step that preempted admits nothing: the cache it freed goes to the running)
            for s in [s for s in self.running if s.prefilling and s.paused_until <= now]:
                if budget <= 0:
                    break
                c = min(budget // s.n, s.target - s.computed)
                if c <= 0:
                    break
                prefills.append((s, c))
                budget -= c * s.n
            while self.waiting and budget > 0 and not preempted:
                w = self.waiting[0]
                rest = w.target - w.computed
                room = min(self._room(w), max(1, budget // max(rest, 1)))
                if room <= 0:
                    break
                s = self._take(room)
                admitted += s.n
                c = min(budget // s.n, rest)
                prefills.append((s, c))
                budget -= c * s.n
        if not decodes and not prefills:
            return None
        return self._account(decodes, prefills, admitted, width)

    def _account(self, decodes, prefills, admitted, width, ce=0.0) -> Step:
        m = self.model
        ctx = [float(m.effective_context(s.prompt + s.generated)) for s in decodes]
        n_dec = sum(s.n for s in decodes)
        kv_dec = sum(c * s.n for c, s in zip(ctx, decodes, strict=True))
        pairs_pre = sum(m.prefill_pairs(s.computed, c) * s.n for s, c in prefills)
        kv_pre = sum(float(m.effective_context(s.computed)) * s.n for s, c in prefills if s.computed)
        n_pre = sum(c * s.n for s, c in prefills)
        completing = sum(s.n for s, c in prefills if s.computed + c >= s.target)
        rows = self.max_num_seqs if self.padded and n_dec else n_dec
        feats = (n_pre + rows * width, rows * width + completing, rows, kv_dec + kv_pre,
                 kv_dec * width, pairs_pre, admitted, ce)
        step = Step(float(m.time(*feats)), features=feats, decoding=n_dec)
        for s in decodes:
            n = 1 if self.spec is None else self.spec.step(s.output - s.generated)
            s.generated += n
            if n > 1:
                step.tokens[s] = n
            step.emitted.append(s)
        for s, c in prefills:
            s.computed += c
            if s.computed >= s.target:
                s.generated += 1
                step.emitted.append(s)
        for s in step.emitted:
            if s.generated >= s.output:
                step.finished.append(s)
                self._finish(s)
        return step

    def _decode_run(self, decodes: list[Seq], max_steps: int) -> Step:
        """`k` identical decode steps at once (virtual runs): until the first sequence
        finishes, the KV cache fills, or `max_steps`. Timed at the run's middle context. With
        speculative decoding a step yields its expected 1 + accepted tokens and verifies
        1 + k drafted ones."""
        per = 1.0 + (self.spec.k * self.spec.expected_rate() if self.spec is not None else 0.0)
        width = 1 + self.spec.k if self.spec is not None else 1
        k = min(max_steps, min(math.ceil((s.output - s.generated) / per) for s in decodes))
        if self.reserve_output < 1:
            # run only as far as the cache holds every sequence's growth (block by block)
            free = self.kv_capacity - self.kv_used
            growing = sum(s.n for s in decodes)
            slack = min(s.held - (s.prompt + s.generated) for s in decodes)
            k = min(k, max(1, slack + free // max(growing, 1)))
        if k <= 1:
            return self._account(self._grow(decodes, 1) if self.reserve_output < 1 else decodes,
                                 [], 0, 1)
        m = self.model
        mid = (k - 1) / 2.0
        n_dec = sum(s.n for s in decodes)
        rows = self.max_num_seqs if self.padded else n_dec
        kv = sum(float(m.effective_context(s.prompt + s.generated + mid * per)) * s.n
                 for s in decodes)
        feats = (rows * width, rows * width, rows, kv, kv * width, 0.0, 0, 0.0)
        step = Step(float(m.time(*feats)) * k, count=k, features=feats, decoding=n_dec)
        for s in decodes:
            made = min(s.output - s.generated, max(k, round(k * per)))
            s.generated += made
            if self.reserve_output < 1 and s.prompt + s.generated > s.held:
                grow = self._blocks(s.prompt + s.generated) - s.held
                s.held += grow
                self.kv_used += grow * s.n
            step.emitted.append(s)
            step.tokens[s] = made
            if s.generated >= s.output:
                step.finished.append(s)
                self._finish(s)
        return step

    def _bucketed(self, s: Seq) -> int:
        for b in self.buckets:
            if b >= s.target:
                return b
        return s.target

    def _encode(self, seqs: list[Seq], admitted: int) -> Step:
        """One context-encoding pass of whole prompts, each padded to its bucket."""
        m = self.model
        pad = [(s, self._bucketed(s)) for s in seqs]
        n = sum(b * s.n for s, b in pad)
        pairs = sum(m.prefill_pairs(0, b) * s.n for s, b in pad)
        rows = sum(s.n for s in seqs)
        feats = (n, rows, 0, 0.0, 0.0, pairs, admitted, 1.0)
        step = Step(float(m.time(*feats)), features=feats)
        for s in seqs:
            s.computed = s.target
            s.generated += 1
            step.emitted.append(s)
            if s.generated >= s.output:
                step.finished.append(s)
                self._finish(s)
        return step

    def _step_neuron(self, now: float, max_steps: int) -> Step | None:
        if self.waiting and self._room(self.waiting[0]) > 0:
            s = self._take(1)
            return self._encode([s], s.n)
        return self._decode_ready(now, max_steps)

    def _step_static(self, now: float, max_steps: int) -> Step | None:
        if not self.running and self.waiting:
            batch, admitted = [], 0
            while self.waiting and self._room(self.waiting[0]) > 0:
                s = self._take(self._room(self.waiting[0]))
                batch.append(s)
                admitted += s.n
            if batch:
                return self._encode(batch, admitted)
        return self._decode_ready(now, max_steps)

    def _decode_ready(self, now: float, max_steps: int) -> Step | None:
        """Neuron's and static batches' decode: every ready sequence, a run of identical
        steps where the caller allows it."""
        decodes = [s for s in self._ready(now) if not s.prefilling]
        if not decodes:
            return None
        if max_steps > 1:
            return self._decode_run(decodes, max_steps)
        return self._account(decodes, [], 0, 1)


@dataclass(frozen=True)
class Curve:
    concurrency: int
    throughput_tok_s: float  # aggregate output tokens / s
    ttft_s: float  # mean
    itl_s: float  # mean inter-token latency


def simulate(model: PerfModel, concurrency: int, prompt: int, output: int,
             max_num_seqs: int = 256, token_budget: int = 8192, kv_tokens: int | None = None,
             requests: int | None = None, policy: str = "mixed",
             reserve_output: float = 1.0) -> Curve:
    """Closed loop in virtual time: `concurrency` requests always in flight."""
    kv = kv_tokens if kv_tokens is not None else 10**9
    sched = Scheduler(model, max_num_seqs, token_budget, kv, policy=policy,
                      reserve_output=reserve_output)
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
