"""The steady phase of a run with a load ladder (ladder.py): each step an ordinary closed-
or open-loop step, then the analysis' reading of it (through the run's `judge`, after its
records are flushed), until the ladder says stop."""

from __future__ import annotations

import asyncio
import time

from servingbench.resources.loadgen.config import step_name
from servingbench.resources.loadgen.ladder import stop_reason
from servingbench.resources.loadgen.schedule import rate_steps

_now = time.perf_counter_ns


async def judged_step(run, mode: str, load: float, k: int):
    """One ordinary step at `load` (closed loop `c=<N>` when `mode` is `concurrency`, else
    open loop `rate=<R>` whose arrivals draw from the run's seed + `k`), its records flushed,
    then the analysis' verdict on it: whatever the run's `judge` answers for the step."""
    cfg = run.cfg
    name = step_name(mode, load)
    if mode == "concurrency":
        async def drive(c=int(load)):
            return await run.closed("steady", c, cfg.requests_per_step, cfg.duration_s)

        expected = cfg.requests_per_step
    else:
        offsets = rate_steps([load], cfg.arrival, cfg.seed + k, cfg.requests_per_step,
                             cfg.duration_s)[0]

        async def drive(name=name, rate=load, offsets=offsets) -> None:
            await run.open("steady", [(name, rate, 0, offsets)], _now())

        expected = len(offsets)
    await run.run_step(name, mode, float(load), expected, drive)
    run.rec.flush()
    return await asyncio.to_thread(run.judge, name)


async def steady(run) -> None:
    ladder = run.cfg.ladder
    before: float | None = None
    for k, load in enumerate(ladder.targets()):
        valid, tok_s = await judged_step(run, ladder.over, load, k)
        why = stop_reason(ladder, valid, tok_s, before)
        if why is not None:
            run.ladder_stop = f"stopped after {step_name(ladder.over, load)}: {why}"
            return
        before = tok_s
    run.ladder_stop = f"reached the ladder's maximum {ladder.max:g}"
