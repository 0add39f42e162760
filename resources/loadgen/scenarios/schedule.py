"""Arrival schedules: the offered rate changes over time, segment by segment (contract §2.1
`scenario.kind = schedule`, §3.7).

A schedule is `segments [{duration_s, rate}]`, or a named `shape` expanded into segments
before the run (the manifest keeps the expansion beside the shape's name):

* `step`: `base_rate` for the first half of `length_s`, `peak_rate` for the second.
* `spike`: quiet → burst → quiet: `base_rate` 40 %, `peak_rate` 20 %, `base_rate` 40 %.
* `ramp`: `levels` equal segments rising from `base_rate` to `peak_rate`.
* `zero-burst-zero`: 0, `peak_rate`, 0, a third of `length_s` each (scale from zero and back).
* `day`: a 24-hour curve from `day_csv` (`hour,rate`: 24 rows, requests/s offered in that
  hour), each hour compressed to `3600 / compress` seconds; the rates are kept as given.

Inside each segment arrivals are Poisson or constant (the load config's `arrival`), drawn
from the run's seed on one absolute schedule (schedule.py). The whole schedule is ONE
steady step `schedule`, load mode `rate`, its target the time-weighted mean rate with the
zero-rate segments included; the step lasts the whole schedule, a trailing quiet segment
included (that is when replicas scale back down)."""

from __future__ import annotations

import asyncio
import csv
import math
import time
from pathlib import Path

from servingbench.resources.loadgen.errors import LoadConfigError
from servingbench.resources.loadgen.scenarios.kind import (
    Key,
    Kind,
    at_most,
    non_neg_num,
    one_of,
    optional,
    pos_int,
    pos_num,
)
from servingbench.resources.loadgen.schedule import (
    MAX_LENGTH_S,
    MAX_RATE,
    Drawn,
    size_problem,
)

SHAPES = ("step", "spike", "ramp", "zero-burst-zero", "day")
STEP = "schedule"  # the one steady step's name (contract §3.7)
# Every number a schedule takes is bounded, and so is what it adds up to, before anything is
# provisioned: an endless or enormous schedule would hold paid nodes until the job's max
# runtime (or until an OOM kill skips the teardown).
# (MAX_RATE, MAX_LENGTH_S and MAX_REQUESTS are any schedule's: loadgen/schedule.py)
MAX_SEGMENTS = 10_000  # also a ramp's levels: the expansion is kept in the manifest
_now = time.perf_counter_ns


def _segments_check(where: str, v) -> None:
    if v is None:
        return
    if not isinstance(v, list | tuple) or not v:
        raise LoadConfigError(f"{where}: expected a non-empty list of {{duration_s, rate}}")
    if len(v) > MAX_SEGMENTS:
        raise LoadConfigError(f"{where}: {len(v):,} segments, at most {MAX_SEGMENTS:,}")
    for i, seg in enumerate(v):
        at = f"{where}[{i}]"
        if not isinstance(seg, dict):
            raise LoadConfigError(f"{at}: expected a mapping {{duration_s, rate}}, got {seg!r}")
        extra = set(seg) - {"duration_s", "rate"}
        if extra:
            raise LoadConfigError(f"{at}.{sorted(extra)[0]}: unknown key (a segment has "
                                  "duration_s and rate)")
        for key in ("duration_s", "rate"):
            if key not in seg:
                raise LoadConfigError(f"{at}.{key}: required")
            value = seg[key]
            if (isinstance(value, bool) or not isinstance(value, int | float)
                    or not math.isfinite(value)):
                raise LoadConfigError(f"{at}.{key}: must be a finite number, got {value!r}")
        pos_num(f"{at}.duration_s", seg["duration_s"], most=MAX_LENGTH_S)
        non_neg_num(f"{at}.rate", seg["rate"], most=MAX_RATE)


def _segments_convert(where: str, v):
    """YAML/JSON segments as plain dicts of floats (a tuple pair `(duration_s, rate)` too)."""
    if isinstance(v, list | tuple):
        out = []
        for seg in v:
            if isinstance(seg, list | tuple) and len(seg) == 2:
                seg = {"duration_s": seg[0], "rate": seg[1]}
            out.append(dict(seg) if isinstance(seg, dict) else seg)
        return out
    return v


def read_day(path: Path, where: str) -> list[float]:
    """The 24 hourly rates of a `hour,rate` CSV; LoadConfigError names the file and row."""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if not {"hour", "rate"} <= set(reader.fieldnames or ()):
                raise LoadConfigError(f"{where}: {path}: expected the columns hour,rate")
            rates: dict[int, float] = {}
            for n, row in enumerate(reader, 2):
                try:
                    hour, rate = int(row["hour"]), float(row["rate"])
                except (TypeError, ValueError):
                    raise LoadConfigError(f"{where}: {path}:{n}: hour must be an integer and "
                                          f"rate a number, got {row!r}") from None
                if (not 0 <= hour <= 23 or hour in rates or not math.isfinite(rate)
                        or not 0 <= rate <= MAX_RATE):
                    raise LoadConfigError(f"{where}: {path}:{n}: hour {row['hour']!r} (0..23, "
                                          f"once each), rate {row['rate']!r} (0..{MAX_RATE:,.0f})")
                rates[hour] = rate
    except OSError as exc:
        raise LoadConfigError(f"{where}: cannot read {path} ({exc.strerror or exc})") from None
    if len(rates) != 24:
        raise LoadConfigError(f"{where}: {path}: {len(rates)} hours, expected 24 (0..23)")
    return [rates[h] for h in range(24)]


def expand(s, where: str = "scenario") -> list[dict]:
    """The segments a scenario runs: its own `segments`, else its `shape` expanded."""
    if s.segments is not None:
        return [{"duration_s": float(g["duration_s"]), "rate": float(g["rate"])}
                for g in s.segments]
    base, peak, length = float(s.base_rate), float(s.peak_rate), float(s.length_s)
    if s.shape == "step":
        parts = [(0.5, base), (0.5, peak)]
    elif s.shape == "spike":
        parts = [(0.4, base), (0.2, peak), (0.4, base)]
    elif s.shape == "ramp":
        n = s.levels
        parts = [(1 / n, base + (peak - base) * i / max(n - 1, 1)) for i in range(n)]
    elif s.shape == "zero-burst-zero":
        parts = [(1 / 3, 0.0), (1 / 3, peak), (1 / 3, 0.0)]
    else:  # day
        hour = 3600.0 / float(s.compress)
        return [{"duration_s": hour, "rate": r} for r in read_day(Path(s.day_csv), f"{where}.day_csv")]
    return [{"duration_s": length * share, "rate": rate} for share, rate in parts]


def mean_rate(segments: list[dict]) -> float:
    """The step's target: Σ duration × rate ÷ Σ duration, zero-rate segments included."""
    total = sum(g["duration_s"] for g in segments)
    return sum(g["duration_s"] * g["rate"] for g in segments) / total


def _check(s, where: str) -> None:
    if s.segments is None and s.shape is None:
        raise LoadConfigError(f"{where}.segments: a schedule needs segments [{{duration_s, rate}}] "
                              f"or a shape ({', '.join(SHAPES)})")
    if s.segments is None and s.shape == "day" and s.day_csv is None:
        raise LoadConfigError(f"{where}.day_csv: shape day needs a CSV of hourly rates (hour,rate)")
    if s.segments is None and s.shape != "day" and s.peak_rate <= 0:
        raise LoadConfigError(f"{where}.peak_rate: must be positive, got {s.peak_rate!r}")
    segments = expand(s, where)
    if not any(g["rate"] > 0 for g in segments):
        raise LoadConfigError(f"{where}.segments: every segment's rate is 0 (no request to send)")
    _check_size(s, segments, where)
    # the expansion is what runs and what the manifest says (contract §2.1)
    object.__setattr__(s, "segments", segments)


def _check_size(s, segments: list[dict], where: str) -> None:
    """The schedule's whole length and its expected request count, from its segments (at
    most MAX_SEGMENTS of them, each bounded): no send time is drawn to know either."""
    problem = size_problem([(g["duration_s"], g["rate"]) for g in segments])
    if problem is not None:
        key = ("segments" if s.segments is not None
               else "compress" if s.shape == "day" else "length_s")
        raise LoadConfigError(f"{where}.{key}: {problem}")


def _path(where: str, v):
    return Path(v)


KIND = Kind("schedule", order=7, keys={
    "segments": Key(None, _segments_check, _segments_convert),
    "shape": Key(None, optional(one_of(SHAPES)), choices=SHAPES),
    "base_rate": Key(0.5, at_most(non_neg_num, MAX_RATE)),
    "peak_rate": Key(10.0, at_most(non_neg_num, MAX_RATE)),
    "length_s": Key(60.0, at_most(pos_num, MAX_LENGTH_S)),
    "levels": Key(4, at_most(pos_int, MAX_SEGMENTS)),
    "day_csv": Key(None, convert=_path),
    "compress": Key(1440.0, at_most(pos_num, MAX_LENGTH_S)),
    "bucket_s": Key(10.0, at_most(pos_num, MAX_LENGTH_S)),
}, check=_check, own_steps=True)


def plan(segments: list[dict], arrival: str, seed: int) -> tuple[Drawn, float, float]:
    """(send offsets in seconds from the step start, drawn lazily: iterate them; the target;
    the schedule's length)."""
    drawn = Drawn([(g["duration_s"], g["rate"]) for g in segments], arrival, seed)
    return drawn, mean_rate(segments), sum(g["duration_s"] for g in segments)


async def steady(run) -> None:
    cfg = run.cfg
    offsets, target, length_s = plan(cfg.scenario.segments, cfg.arrival, cfg.seed)
    # counted in a pass that keeps nothing; drawn again, the same values, as they are sent
    expected = run.share.dealt(sum(1 for _ in offsets))

    async def drive() -> None:
        origin = run.origin
        await run.open("steady", [(STEP, target, 0, offsets)], origin)
        # the schedule's quiet tail is part of the episode: the step ends with the schedule
        end = origin + int(length_s * 1e9)
        if (left := end - _now()) > 0:
            await asyncio.sleep(left / 1e9)

    await run.run_step(STEP, "rate", target, expected, drive)


PLUGIN = KIND  # what this file adds to the scenarios package
