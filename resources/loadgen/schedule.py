"""Arrival schedules: drawn once, from one seeded generator, as absolute offsets.

Open-loop steps get their send times precomputed here as offsets (seconds) from the
step start; the runner sleeps until `start + offset` for each one, never a cumulative
`sleep(gap)`, so a late wake-up never shifts later arrivals. The seed is recorded in the
manifest's scenario.
"""

from __future__ import annotations

import random


def arrivals(rate: float, arrival: str, rng: random.Random, count: int | None,
             duration_s: float | None, start_s: float = 0.0) -> list[float]:
    """Send offsets for one rate, bounded by `count` and/or `duration_s` (whichever first)."""
    if rate <= 0:
        return []
    out: list[float] = []
    t = start_s
    end = None if duration_s is None else start_s + duration_s
    i = 0
    while count is None or len(out) < count:
        if arrival == "constant":
            t = start_s + i / rate
            i += 1
        else:
            t += rng.expovariate(rate)
        if end is not None and t >= end:
            break
        out.append(t)
    return out


def rate_steps(rates: list[float], arrival: str, seed: int, count: int | None,
               duration_s: float | None) -> list[list[float]]:
    """Offsets (from each step's own start) for every fixed-rate step, one generator."""
    rng = random.Random(seed)
    return [arrivals(r, arrival, rng, count, duration_s) for r in rates]


def profile_schedule(profile: list[tuple[float, float]], arrival: str,
                     seed: int) -> list[tuple[float, float, list[float]]]:
    """A bursty piecewise profile → [(segment_start_s, rate, offsets from origin)]."""
    rng = random.Random(seed)
    out = []
    start = 0.0
    for seg_s, rate in profile:
        out.append((start, rate, arrivals(rate, arrival, rng, None, seg_s, start_s=start)))
        start += seg_s
    return out
