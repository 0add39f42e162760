"""Repeatability statistics, exact on hand-computed examples."""

from __future__ import annotations

import math

import pytest
from servingbench.resources.report.repeatability import spread, step_spreads, t_975
from servingbench.resources.report.rundata import load_run


def test_spread_of_three_runs_by_hand():
    # 10, 14, 12: mean 12, s = sqrt(((-2)^2 + 2^2 + 0^2) / 2) = 2, se = 2 / sqrt(3)
    # t(0.975, 2) = 4.302652729749464 -> half width 4.968275423500662
    s = spread([10.0, 14.0, 12.0])
    assert (s.n, s.min, s.median, s.max, s.mean) == (3, 10.0, 12.0, 14.0, 12.0)
    half = 4.302652729749464 * 2 / math.sqrt(3)
    assert half == pytest.approx(4.968275423500662, abs=1e-12)
    assert s.ci_low == pytest.approx(12 - half, abs=1e-12)
    assert s.ci_high == pytest.approx(12 + half, abs=1e-12)


def test_spread_of_four_has_the_mean_of_the_middle_two_as_median():
    # 1, 2, 4, 9: median 3, mean 4, s^2 = (9 + 4 + 0 + 25) / 3 = 38/3
    s = spread([9, 1, 4, 2])
    assert (s.median, s.mean) == (3.0, 4.0)
    half = 3.182446305284263 * math.sqrt(38 / 3) / 2
    assert (s.ci_low, s.ci_high) == (pytest.approx(4 - half), pytest.approx(4 + half))


def test_no_interval_below_three_and_nulls_ignored():
    s = spread([3.0, None, float("nan"), 1.0])
    assert (s.n, s.min, s.median, s.max) == (2, 1.0, 2.0, 3.0)
    assert s.ci_low is None and s.ci_high is None
    assert spread([None]) is None and spread([]) is None


# scipy.stats.t.ppf(0.975, df), printed to 12 digits
T_REFERENCE = {1: 12.7062047362, 2: 4.30265272975, 3: 3.18244630528, 9: 2.2621571628,
               30: 2.0422724563, 31: 2.0395134464, 40: 2.02107539031, 60: 2.00029782201,
               120: 1.97993040508, 1000: 1.96233908083}


def test_t_quantiles_match_the_reference():
    for df, expected in T_REFERENCE.items():
        assert t_975(df) == pytest.approx(expected, abs=1e-6), df
    with pytest.raises(ValueError):
        t_975(0)


def test_step_spreads_pool_valid_steps_of_one_candidate_and_source(runs):
    loaded = [load_run(r, raw=False) for r in runs]
    table = step_spreads(loaded)
    fast = table[table["candidate"] == "p5-scout-bf16-tp8"]
    assert set(fast["step"]) == {"c=1", "c=2", "c=4"}  # c=8 invalid in every run
    assert set(fast["n"]) == {3}
    row = fast[(fast["step"] == "c=4") & (fast["metric"] == "output_tok_s")].iloc[0]
    values = sorted(float(r.metrics.set_index("step").loc["c=4", "output_tok_s"])
                    for r in loaded[:3])
    assert (row["min"], row["median"], row["max"]) == tuple(values)
    assert row["run_ids"] == ["fast-0", "fast-1", "fast-2"]
    expected = spread(values)
    assert (row["ci95_low"], row["ci95_high"]) == (expected.ci_low, expected.ci_high)
    cost = fast[(fast["step"] == "c=4") & (fast["metric"] == "cost_per_1m_output_usd")].iloc[0]
    assert cost["n"] == 3
    emu = table[table["candidate"] == "g6e-scout-fp8-tp8"]
    assert set(emu["source"]) == {"emulated"} and set(emu["n"]) == {1}
