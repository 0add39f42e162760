"""Open-loop schedules: drawn once from one seeded generator, absolute, at the asked rate."""

from __future__ import annotations

import random

import pytest
from servingbench.resources.loadgen import run_load
from servingbench.resources.loadgen.schedule import arrivals, rate_steps, segments_schedule

from tests.support.loadgen import config, ns, rows


def test_same_seed_same_schedule_other_seed_other():
    a = rate_steps([5, 20], "poisson", seed=7, count=100, duration_s=None)
    assert a == rate_steps([5, 20], "poisson", seed=7, count=100, duration_s=None)
    assert a != rate_steps([5, 20], "poisson", seed=8, count=100, duration_s=None)
    # one generator for the run: the two steps' gaps are not the same draws rescaled
    g5 = [y - x for x, y in zip(a[0], a[0][1:], strict=False)]
    g20 = [y - x for x, y in zip(a[1], a[1][1:], strict=False)]
    assert [round(g * 5, 9) for g in g5[:20]] != [round(g * 20, 9) for g in g20[:20]]


def test_poisson_achieves_the_asked_rate():
    offs = arrivals(20.0, "poisson", random.Random(1), count=None, duration_s=500)
    assert len(offs) / 500 == pytest.approx(20.0, rel=0.02)
    assert all(b > a for a, b in zip(offs, offs[1:], strict=False))
    assert all(0 < o < 500 for o in offs)


def test_constant_arrivals_are_absolute_not_cumulative():
    offs = arrivals(3.0, "constant", random.Random(0), count=30001, duration_s=None)
    assert offs[30000] == 10000.0  # i / rate, no float drift from summing gaps
    assert offs[:4] == [0.0, 1 / 3, 2 / 3, 1.0]


def test_count_and_duration_bound_whichever_first():
    assert len(arrivals(10, "constant", random.Random(0), count=5, duration_s=100)) == 5
    assert len(arrivals(10, "constant", random.Random(0), count=500, duration_s=2)) == 20


def test_profile_segments_follow_each_other():
    segs = segments_schedule([(1, 0), (2, 10), (1, 100)], "constant", seed=0)
    assert [(s, r, len(o)) for s, r, o in segs] == [(0.0, 0, 0), (1.0, 10, 20), (3.0, 100, 100)]
    assert segs[2][2][0] == 3.0


@pytest.mark.serial  # sends are checked against their schedule
def test_recorded_scheduled_at_follows_the_precomputed_schedule(server, tmp_path):
    cfg = config(server.base_url, concurrency=[], rates=[50], requests_per_step=20, seed=3)
    run_load(cfg, tmp_path / "run", progress=False)
    sched = sorted(ns(r["scheduled_at"]) for r in rows(tmp_path / "run"))
    expected = rate_steps([50], "poisson", seed=3, count=20, duration_s=None)[0]
    got = [(s - sched[0]) / 1e9 for s in sched]
    want = [o - expected[0] for o in expected]
    assert got == pytest.approx(want, abs=2e-9)  # exactly the schedule, to the nanosecond
    lags = sorted(ns(r["sent_at"]) - ns(r["scheduled_at"]) for r in rows(tmp_path / "run"))
    assert lags[0] >= 0 and lags[len(lags) // 2] < 50_000_000  # generous: never early, not late
