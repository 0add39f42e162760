"""Arrival schedules: drawn from one seeded generator, as absolute offsets.

Open-loop steps get their send times as offsets (seconds) from the step start; the runner
sleeps until `start + offset` for each one, never a cumulative `sleep(gap)`, so a late
wake-up never shifts later arrivals. The seed is recorded in the manifest's scenario.

A schedule of segments (the schedule kind's) is drawn lazily (`Drawn`):
iterating it draws the offsets again from the seed, one at a time, so no schedule holds
memory in proportion to its length, however long it is.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from itertools import chain

# What any schedule may add up to, checked from its segments before a run starts (no send
# time is drawn to know it): an endless or enormous schedule would hold paid nodes until the
# job's max runtime, or an OOM kill that skips the teardown.
MAX_RATE = 10_000.0  # requests/s, as a candidate's load.rates
MAX_LENGTH_S = 86_400.0  # a whole schedule: a day (the day shape at compress 1)
MAX_REQUESTS = 1_000_000  # Σ duration × rate: one step's, as a candidate's requests_per_step


def size_problem(segments: list[tuple[float, float]]) -> str | None:
    """What is wrong with the length or the expected request count of a schedule of
    (duration_s, rate) segments, each already finite and within its own bounds; None if
    nothing."""
    length = sum(d for d, _ in segments)
    expected = sum(d * r for d, r in segments)
    if length > MAX_LENGTH_S:
        return f"the schedule lasts {length:,.0f} s, at most {MAX_LENGTH_S:,.0f} (a day)"
    if expected > MAX_REQUESTS:
        return (f"the schedule expects about {expected:,.0f} requests (duration × rate over "
                f"{len(segments):,} segment{'s' if len(segments) != 1 else ''}), at most "
                f"{MAX_REQUESTS:,}: shorten it or lower its rates")
    return None


def iter_arrivals(rate: float, arrival: str, rng: random.Random, count: int | None,
                  duration_s: float | None, start_s: float = 0.0) -> Iterator[float]:
    """Send offsets for one rate, bounded by `count` and/or `duration_s` (whichever first),
    drawn one at a time."""
    if rate <= 0:
        return
    t = start_s
    end = None if duration_s is None else start_s + duration_s
    i = 0
    while count is None or i < count:
        if arrival == "constant":
            t = start_s + i / rate
        else:
            t += rng.expovariate(rate)
        i += 1
        if end is not None and t >= end:
            return
        yield t


def arrivals(rate: float, arrival: str, rng: random.Random, count: int | None,
             duration_s: float | None, start_s: float = 0.0) -> list[float]:
    """Send offsets for one rate, bounded by `count` and/or `duration_s` (whichever first)."""
    return list(iter_arrivals(rate, arrival, rng, count, duration_s, start_s))


def rate_steps(rates: list[float], arrival: str, seed: int, count: int | None,
               duration_s: float | None) -> list[list[float]]:
    """Offsets (from each step's own start) for every fixed-rate step, one generator."""
    rng = random.Random(seed)
    return [arrivals(r, arrival, rng, count, duration_s) for r in rates]


class Drawn:
    """Piecewise arrival rates [(segment_s, rate)] drawn from one generator, lazily: the
    offsets from the origin of every segment in turn. Iterating draws them afresh from the
    seed (the same values every time); `segments()` gives one iterator per segment, which
    must be used up in order (they share the generator)."""

    def __init__(self, segments: list[tuple[float, float]], arrival: str, seed: int) -> None:
        self.segments_given = [(float(d), float(r)) for d, r in segments]
        self.arrival, self.seed = arrival, seed

    def segments(self) -> Iterator[Iterator[float]]:
        rng = random.Random(self.seed)
        start = 0.0
        for seg_s, rate in self.segments_given:
            yield iter_arrivals(rate, self.arrival, rng, None, seg_s, start_s=start)
            start += seg_s

    def __iter__(self) -> Iterator[float]:
        return chain.from_iterable(self.segments())


def segments_schedule(segments: list[tuple[float, float]], arrival: str,
                      seed: int) -> list[tuple[float, float, list[float]]]:
    """Segments → [(segment_start_s, rate, offsets from origin)], as lists (tests; the
    runner draws them lazily through `Drawn`)."""
    out, start = [], 0.0
    for (seg_s, rate), offs in zip(segments, Drawn(segments, arrival, seed).segments(),
                                   strict=True):
        out.append((start, rate, list(offs)))
        start += seg_s
    return out
