"""The emulator's scheduler and performance model run in virtual time: no server, no clock,
no sleeping. One `Load` (how requests arrive) against one replica gives the figures a
benchmark tool reports: output tokens/s, TTFT and TPOT (median and mean), requests/s.

Loads, as the published tables name them:
  concurrency c    closed loop: c requests in flight, a new one sent when one finishes
  request_rate r   open loop: Poisson arrivals at r per second (seeded)
  offline          every request queued at t = 0 (trtllm-bench, a client at rate inf)
  fixed_batch b    one static batch of b requests, run to its end
A run's duration runs from the first arrival to the last completion, as vLLM's `bench
serve`, guidellm and trtllm-bench measure it. The requests of a closed or open loop vary by
±SPREAD around the load's prompt and output lengths (seeded), as the sources' random datasets
do: a closed loop of identical requests would stay in lockstep, every request admitted,
finished and sent again together, which no real benchmark does.

`Trace` keeps what the calibration needs to re-time a run under other efficiency figures
without scheduling it again: every step's features and repetition count, and each
request's arrival, first-token and finish steps (emulator/calibrate.py).
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

import numpy as np
from servingbench.emulator.scheduler import Scheduler, Seq

MAX_JUMP = 1 << 30
SPREAD = 0.1
FRONTEND_PARTS = 8  # a cohort's parts on its way through the API server


@dataclass(frozen=True)
class Load:
    kind: str  # concurrency | request_rate | offline | fixed_batch
    value: float
    prompt: int
    output: int
    requests: int
    seed: int = 0
    # request lengths: "spread" (±SPREAD around the means), "fixed", or "sharegpt" (a
    # conversation dataset's heavy tail: lognormal around the means, as vLLM's ShareGPT runs)
    lengths: str = "spread"


@dataclass
class Result:
    output_tok_s: float
    req_s: float
    ttft_median_s: float
    ttft_mean_s: float
    tpot_median_s: float
    tpot_mean_s: float
    duration_s: float
    requests: int
    itl_median_s: float = 0.0  # the median gap between two tokens of a stream

@dataclass
class Trace:
    """What re-times a run without scheduling it again: each step's features and count, when
    each step may start at the earliest, and each request group's send, first-token and
    finish steps. A time is (reference step, offset): the end of that step (-1: time 0) plus
    the offset; the step after requests reached the engine starts no earlier than each of
    them did: `queued` × frontend after it was sent (`queued`: the requests the API server
    handled before it, its own included)."""
    features: list[tuple] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    release: list[tuple[tuple[int, float, float], ...] | None] = field(default_factory=list)
    busy: float = 0.0  # the recorded steps' total duration
    decoding: list[int] = field(default_factory=list)
    groups: list[tuple] = field(default_factory=list)  # (n, send_ref, send_offset, first, finish, output)


class _Group:
    __slots__ = ("sent", "first_step", "first_time")

    def __init__(self, sent: tuple[int, float, float]):
        self.sent = sent  # (reference step, offset, time)
        self.first_step, self.first_time = -1, None

    def split(self) -> _Group:
        """The record of the part of a cohort admitted apart from the rest."""
        g = _Group(self.sent)
        g.first_step, g.first_time = self.first_step, self.first_time
        return g


SHAREGPT_SIGMA = 1.0  # log-space spread of ShareGPT's prompt and answer lengths
COHORT_BINS = 20


def lengths_of(load: Load):
    """A function drawing one request's (prompt, output) lengths for the load."""
    rng = random.Random(f"{load.seed}:lengths")
    kind = load.lengths if load.kind in ("concurrency", "request_rate") or load.lengths == "sharegpt" \
        else "fixed"
    if kind == "fixed":
        return lambda: (load.prompt, load.output)
    if kind == "sharegpt":
        mu = -SHAREGPT_SIGMA ** 2 / 2  # a lognormal of mean 1

        def one(mean: int) -> int:
            return max(4, min(16 * mean, round(mean * rng.lognormvariate(mu, SHAREGPT_SIGMA))))
        return lambda: (one(load.prompt), one(load.output))

    def vary(n: int) -> int:
        return max(1, round(n * (1 + rng.uniform(-SPREAD, SPREAD))))
    return lambda: (vary(load.prompt), vary(load.output))


def cohorts(load: Load) -> list[tuple[int, tuple[int, int] | None]]:
    """The requests of an offline load as (count, shape) groups: one group of identical
    requests, or a dataset's distribution in COHORT_BINS groups of equal count."""
    if load.lengths != "sharegpt" or load.requests < 2 * COHORT_BINS:
        return [(load.requests, (load.prompt, load.output))]
    draw = lengths_of(load)
    shapes = sorted((draw() for _ in range(load.requests)), key=lambda s: s[1])
    out, size = [], load.requests // COHORT_BINS
    for b in range(COHORT_BINS):
        part = shapes[b * size:(b + 1) * size if b < COHORT_BINS - 1 else None]
        out.append((len(part), (round(sum(p for p, _ in part) / len(part)),
                                round(sum(o for _, o in part) / len(part)))))
    return out


def weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    order = np.argsort(values)
    v, w = values[order], weights[order]
    cum = np.cumsum(w)
    return float(v[np.searchsorted(cum, cum[-1] / 2.0)])


def run(sched: Scheduler, load: Load, trace: Trace | None = None, frontend_s: float = 0.0) -> Result:
    """Drive `sched` (a fresh scheduler for one replica) with `load` in virtual time.

    A request reaches the scheduler through the API server, one request at a time,
    `frontend_s` each (HTTP, tokenization): a lone request waits frontend_s, a burst of N
    sent at once reaches the engine over N · frontend_s, as a Python server's does."""
    now, launched, step_no = 0.0, 0, 0
    done: list[tuple[int, float, float, float, int]] = []  # (n, sent, first, finish, output)
    pending: list[tuple[float, int, Seq, float]] = []  # (schedulable at, order, sequence, queued)
    order = 0
    gaps: list[tuple[float, int]] = []  # (a decode step's duration, the gaps it makes)
    draw = lengths_of(load)
    frontend_free = 0.0  # when the API server is done with the requests before

    def send(n: int, ref: int, offset: float, at: float, shape=None) -> None:
        nonlocal launched, order, frontend_free
        prompt, output = shape or draw()
        # a cohort passes the API server in parts, so a burst reaches the engine as a ramp
        parts = [n // FRONTEND_PARTS + (1 if i < n % FRONTEND_PARTS else 0)
                 for i in range(FRONTEND_PARTS)] if n > FRONTEND_PARTS else [n]
        group = _Group((ref, offset, at))
        for m in parts:
            if not m:
                continue
            start = max(frontend_free, at)
            frontend_free = start + m * frontend_s
            # requests this part waited for at the API server (its own included), which the
            # calibration re-times when frontend_s changes
            queued = (frontend_free - at) / frontend_s if frontend_s else float(m)
            seq = Seq(prompt, output, group.split() if m != n else group, n=m)
            heapq.heappush(pending, (frontend_free, order, seq, queued))
            order += 1
        launched += n

    if load.kind in ("offline", "fixed_batch"):
        for n, shape in cohorts(load):
            send(n, -1, 0.0, 0.0, shape)
    elif load.kind == "concurrency":
        for _ in range(min(int(load.value), load.requests)):
            send(1, -1, 0.0, 0.0)
    elif load.kind == "request_rate":
        rng = random.Random(f"{load.seed}:arrivals")
        t = 0.0
        for _ in range(load.requests):
            send(1, -1, t, t)
            t += rng.expovariate(load.value)
    release: list = []
    while True:
        if pending and not sched.running and not sched.waiting and pending[0][0] > now:
            now = pending[0][0]  # idle until the next request reaches the engine
        while pending and pending[0][0] <= now:
            _, _, seq, queued = heapq.heappop(pending)
            sched.add(seq)
            # the step after a request reached the engine may not start before it did: the
            # calibration re-times this step no earlier than that request's arrival
            release.append((seq.tag.sent[0], seq.tag.sent[1], queued))
        limit = MAX_JUMP
        if pending:
            est = sched.model.decode_step(max(1, sched.requests_running), load.prompt)
            limit = max(1, int((pending[0][0] - now) / max(est, 1e-9)))
        step = sched.step(now, max_steps=limit)
        if step is None:
            if pending:
                continue
            break
        now += step.duration
        if step.decoding:
            gaps.append((step.duration / step.count, step.decoding * step.count))
        if trace is not None:
            trace.busy += step.duration
            trace.features.append(step.features)
            trace.counts.append(step.count)
            trace.release.append(tuple(release) or None)
            trace.decoding.append(step.decoding)
        release = []
        for s in step.emitted:
            g = s.tag
            if g.first_time is None:
                g.first_time, g.first_step = now, step_no
        for s in step.finished:
            g = s.tag
            done.append((s.n, g.sent[2], g.first_time, now, s.output))
            if trace is not None:
                trace.groups.append((s.n, g.sent[0], g.sent[1], g.first_step, step_no, s.output))
            if load.kind == "concurrency" and launched < load.requests:
                for _ in range(min(s.n, load.requests - launched)):
                    send(1, step_no, 0.0, now)
        step_no += 1
    res = summarize(done, load)
    if gaps:
        g = np.array(gaps)
        res.itl_median_s = weighted_median(g[:, 0], g[:, 1])
    return res


def summarize(done: list[tuple[int, float, float, float, int]], load: Load) -> Result:
    if not done:
        raise ValueError("no request finished")
    a = np.array(done, dtype=float)
    n, arrival, first, finish, out = a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4]
    ttft = first - arrival
    tpot = (finish - first) / np.maximum(out - 1, 1)
    duration = float(finish.max() - arrival.min())
    total = float(n.sum())
    return Result(float((n * out).sum()) / duration, total / duration,
                  weighted_median(ttft, n), float((ttft * n).sum() / total),
                  weighted_median(tpot, n), float((tpot * n).sum() / total), duration, int(total))
