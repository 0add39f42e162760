"""SLO capacity search: the highest open-loop rate at which the SLO still holds.

Bracketing, then bisection: from `start_rate`, double while the probe meets the SLO (or
halve while it does not) until one met and one missed rate bracket the capacity, then
probe the middle until the bracket is within `TOLERANCE` of its upper end or
`max_probes` have run. Every probe is an ordinary open-loop step `rate=<R>` of the run
(requests_per_step / duration_s as for any step), so the gates and metrics apply to it.

The load generator only records: whether a probe was valid and met the SLO is decided
by the analysis, through the `judge` callback given to run_load (records are flushed
before it is asked). slo_capacity.json is written by the analyzer from the records.
"""

from __future__ import annotations

import asyncio
import time

from resources.loadgen.config import step_name
from resources.loadgen.schedule import rate_steps

TOLERANCE = 0.1  # stop when (not_met − met) / not_met ≤ this
_now = time.perf_counter_ns


def next_rate(rate: float, met: float | None, not_met: float | None) -> float | None:
    """The next probe, or None when the bracket is narrow enough."""
    if not_met is None:
        return rate * 2
    if met is None:
        return rate / 2
    if (not_met - met) / not_met <= TOLERANCE:
        return None
    return (met + not_met) / 2


async def steady(run) -> None:
    cfg, s = run.cfg, run.cfg.scenario
    met = not_met = None
    rate: float | None = s.start_rate
    seen: set[str] = set()
    for k in range(s.max_probes):
        rate = float(f"{rate:.4g}")  # readable, unique step names
        name = step_name("rate", rate)
        if name in seen:
            break
        seen.add(name)
        offsets = rate_steps([rate], cfg.arrival, cfg.seed + k, cfg.requests_per_step,
                             cfg.duration_s)[0]

        async def drive(name=name, rate=rate, offsets=offsets) -> None:
            await run.open("steady", [(name, rate, 0, offsets)], _now())

        await run.run_step(name, "rate", rate, len(offsets), drive)
        run.rec.flush()
        valid, ok = await asyncio.to_thread(run.judge, name)
        if valid and ok:
            met = rate if met is None else max(met, rate)
        else:
            not_met = rate if not_met is None else min(not_met, rate)
        rate = next_rate(rate, met, not_met)
        if rate is None:
            break
