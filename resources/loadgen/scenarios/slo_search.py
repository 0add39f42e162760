"""SLO capacity search: the highest open-loop rate (or closed-loop concurrency) at which
the SLO still holds.

Bracketing, then bisection: from `start_rate` (or `start_concurrency`), double while the
probe meets the SLO (or halve while it does not) until one met and one missed load bracket
the capacity, then probe the middle until the bracket is within `TOLERANCE` of its upper
end (for concurrency: also when no integer lies between) or `max_probes` have run. Every
probe is an ordinary step of the run, open-loop `rate=<R>` or closed-loop `c=<N>`
(requests_per_step / duration_s as for any step), so the gates and metrics apply to it.

The load generator only records: whether a probe was valid and met the SLO is decided
by the analysis, through the `judge` callback given to run_load (records are flushed
before it is asked). slo_capacity.json is written by the analyzer from the records.
"""

from __future__ import annotations

from servingbench.resources.loadgen.config import step_name
from servingbench.resources.loadgen.errors import LoadConfigError
from servingbench.resources.loadgen.ladder_steps import judged_step
from servingbench.resources.loadgen.scenarios.kind import (
    SLO_KEYS,
    Key,
    Kind,
    one_of,
    pos_int,
    pos_num,
    suggest,
)

SEARCH_OVER = ("rate", "concurrency")  # open-loop arrivals per second, or requests in flight


def _slo(where: str, v) -> dict:
    if not isinstance(v, dict):
        raise LoadConfigError(f"{where}: expected a mapping like {{ttft_p99_s: 2, tpot_p99_s: 0.1}}")
    return v


def _check(s, where: str) -> None:
    if not s.slo:
        raise LoadConfigError(f"{where}.slo: required, e.g. ttft_p99_s=2,tpot_p99_s=0.1")
    for k, v in s.slo.items():
        if k not in SLO_KEYS:
            raise LoadConfigError(f"{where}.slo: unknown key {k!r}" + suggest(k, SLO_KEYS))
        pos_num(f"{where}.slo.{k}", v)
    if s.max_probes < 2:
        raise LoadConfigError(f"{where}.max_probes: a search needs at least 2 probes")


KIND = Kind("slo_search", order=5, keys={
    "slo": Key({}, convert=_slo),
    "max_probes": Key(8, pos_int),
    "over": Key("rate", one_of(SEARCH_OVER)),
    "start_rate": Key(1.0, pos_num),
    "start_concurrency": Key(1, pos_int),
}, check=_check,
    # each probe is decided from the last one's records: not split across workers yet
    own_steps=True, one_worker=True)

TOLERANCE = 0.1  # stop when (not_met − met) / not_met ≤ this


def next_rate(rate: float, met: float | None, not_met: float | None) -> float | None:
    """The next probe, or None when the bracket is narrow enough."""
    if not_met is None:
        return rate * 2
    if met is None:
        return rate / 2
    if (not_met - met) / not_met <= TOLERANCE:
        return None
    return (met + not_met) / 2


def next_concurrency(c: int, met: int | None, not_met: int | None) -> int | None:
    """The next closed-loop probe, or None when the bracket is narrow enough (or a single
    request in flight already missed: there is nothing lower to probe)."""
    if not_met is None:
        return c * 2
    if met is None:
        return c // 2 or None
    if not_met - met <= 1 or (not_met - met) / not_met <= TOLERANCE:
        return None
    return (met + not_met) // 2


async def steady(run) -> None:
    s = run.cfg.scenario
    closed = s.over == "concurrency"
    met = not_met = None
    load: float | None = s.start_concurrency if closed else s.start_rate
    seen: set[str] = set()
    for k in range(s.max_probes):
        load = int(load) if closed else float(f"{load:.4g}")  # readable, unique step names
        mode = "concurrency" if closed else "rate"
        name = step_name(mode, load)
        if name in seen:
            break
        seen.add(name)
        valid, ok = await judged_step(run, mode, load, k)
        if valid and ok:
            met = load if met is None else max(met, load)
        else:
            not_met = load if not_met is None else min(not_met, load)
        load = next_concurrency(load, met, not_met) if closed else next_rate(load, met, not_met)
        if load is None:
            break


PLUGIN = KIND  # what this file adds to the scenarios package
