"""Real-time drivers: they call `stream.on_token(n, scheduled_ns)` on absolute deadlines.

Deadlines are perf_counter ns computed from the previous *scheduled* time, never from
when a callback happened to run, so lateness never accumulates. One timer serves all
streams; every stream due at a wake-up is written in that one callback.

* FixedEngine — constant TTFT and ITL (`--fixed-timing`): token k of a request is due
  at arrival + TTFT + k × ITL (arrival after any first-byte delay).
* ModelEngine — the continuous-batching scheduler and the performance model; a step's
  tokens are all due at the step's end, the next step starts at that deadline.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time

from servingbench.emulator.httpproto import BATCH
from servingbench.emulator.metrics import Metrics
from servingbench.emulator.scheduler import Scheduler, Seq


class _Timer:
    """One event-loop timer aimed at a perf_counter deadline, never firing before it.

    uvloop (libuv) timers have whole-millisecond resolution on a cached clock, so they
    can fire up to ~1 ms early. The timer is aimed at the last whole millisecond before
    the deadline; the sub-millisecond rest is slept (nanosleep) rather than spun, so a
    quiet server keeps its CPU scheduler credit and wakes precisely.
    """

    SLEEP_MAX_NS = 1_500_000

    def __init__(self, loop: asyncio.AbstractEventLoop, callback):
        self.loop, self.callback = loop, callback
        self.handle: asyncio.Handle | None = None
        self.at: int | None = None

    def arm(self, deadline_ns: int) -> None:
        if self.handle is not None:
            if self.at is not None and self.at <= deadline_ns:
                return
            self.handle.cancel()
        self.at = deadline_ns
        ms = (deadline_ns - time.perf_counter_ns()) // 1_000_000
        if ms >= 1:
            self.handle = self.loop.call_later(ms / 1000, self._fire)
        else:
            self.handle = self.loop.call_soon(self._fire)

    def _fire(self) -> None:
        at = self.at
        self.handle, self.at = None, None
        if at is not None:
            rest = at - time.perf_counter_ns()
            if rest > self.SLEEP_MAX_NS:
                self.arm(at)
                return
            if rest > 0:
                time.sleep(rest / 1e9)
        self.callback()

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
        self.handle, self.at = None, None


class FixedEngine:
    def __init__(self, loop: asyncio.AbstractEventLoop, metrics: Metrics, ttft_ms: float,
                 itl_ms: float, speculative=None):
        self.metrics = metrics
        self.spec = speculative  # each ITL tick after the first token emits 1 + accepted
        self.ttft_ns, self.itl_ns = int(ttft_ms * 1e6), int(itl_ms * 1e6)
        self.heap: list[tuple[int, int, object]] = []
        self.counter = itertools.count()
        self.timer = _Timer(loop, self._fire)
        self.active = 0

    def submit(self, stream) -> None:
        self.active += 1
        self.metrics.running = self.active
        self._push(stream.start_ns + self.ttft_ns, stream)

    def abort(self, stream) -> None:
        self.active -= 1  # its heap entry is skipped when popped (stream.alive is False)
        self.metrics.running = self.active

    def _push(self, deadline: int, stream) -> None:
        heapq.heappush(self.heap, (deadline, next(self.counter), stream))
        self.timer.arm(deadline)

    def _fire(self) -> None:
        BATCH.begin()
        try:
            self._emit_due()
        finally:
            BATCH.end()
        if self.heap:
            self.timer.arm(self.heap[0][0])

    def _emit_due(self) -> None:
        now = time.perf_counter_ns()
        heap = self.heap
        while heap and heap[0][0] <= now:
            deadline, _, stream = heapq.heappop(heap)
            if not stream.alive:
                continue
            first = stream.first_token_ns is None
            n = 1
            if self.spec is not None and not first:
                n = self.spec.step(stream.target - stream.sent - stream.pending)
            if stream.on_token(n, deadline):
                nxt = deadline + self.itl_ns + (stream.stall_ns if first else 0)
                heapq.heappush(heap, (nxt, next(self.counter), stream))

    def close(self) -> None:
        self.timer.cancel()


class ModelEngine:
    def __init__(self, loop: asyncio.AbstractEventLoop, metrics: Metrics, scheduler: Scheduler,
                 time_scale: float):
        self.metrics = metrics
        self.sched = scheduler
        self.scale_ns = time_scale * 1e9
        self.timer = _Timer(loop, self._fire)
        self.idle = True
        self.deadline = 0
        self.step = None
        # several models sharing one accelerator (models.py): how many times longer a step
        # takes while others compute too; None: this engine has the accelerator alone
        self.slowdown = None

    def submit(self, stream) -> None:
        # a prefix-cache hit is prefill already done: only the rest is computed
        seq = Seq(stream.req.prompt_tokens, stream.target, tag=stream,
                  computed=stream.req.cached_tokens)
        stream.seq = seq
        self.sched.add(seq)
        self._gauges()
        if self.idle or self.step is None:  # idle, or only waiting for a stalled sequence
            self.timer.cancel()
            self._run(time.perf_counter_ns())

    def abort(self, stream) -> None:
        if stream.seq is not None:
            self.sched.abort(stream.seq)
            self._gauges()

    def _gauges(self) -> None:
        m = self.metrics
        m.running, m.waiting, m.kv_usage = len(self.sched.running), len(self.sched.waiting), self.sched.kv_usage
        if m.preemptions is not None:
            m.preemptions = self.sched.preemptions

    def _run(self, t0: int) -> None:
        """Plan the step starting at t0 (perf ns) and arm its end."""
        step = self.sched.step(t0)
        self._gauges()
        if step is None:
            self.idle, self.step = True, None
            wake = self.sched.next_unpause()
            if wake is not None:
                self.idle = False
                self.deadline = int(wake)
                self.timer.arm(self.deadline)
            return
        self.idle, self.step = False, step
        scale = self.scale_ns if self.slowdown is None else self.scale_ns * self.slowdown()
        self.deadline = t0 + int(step.duration * scale)
        if self.metrics.devices is not None:
            self.metrics.devices.step(t0, self.deadline)
        self.timer.arm(self.deadline)

    def _fire(self) -> None:
        now = time.perf_counter_ns()
        if now < self.deadline:  # woke early (timer granularity): wait the rest
            self.timer.arm(self.deadline)
            return
        step, deadline = self.step, self.deadline
        BATCH.begin()
        try:
            self._emit(step, deadline)
        finally:
            BATCH.end()
        self._run(deadline)

    def _emit(self, step, deadline: int) -> None:
        if step is not None:
            finished = set(step.finished)
            for seq in step.emitted:
                stream = seq.tag
                if not stream.alive:
                    continue
                first = stream.first_token_ns is None
                more = stream.on_token(step.tokens.get(seq, 1), deadline)
                if not more and seq not in finished:
                    self.sched.abort(seq)
                elif first and stream.stall_ns:
                    seq.paused_until = deadline + stream.stall_ns

    def close(self) -> None:
        self.timer.cancel()
