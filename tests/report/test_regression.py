"""The nightly regression check fires on a drop and stays quiet on a stable history."""

from __future__ import annotations

import json

import pytest
from servingbench.resources.report.regression import Thresholds, compare_to_history, headline_record

from tests.support.runbuilder import FAST, simulated_run


def row(i: int, tok: float = 100.0, ttft: float = 1.0, cost: float = 10.0, **kw) -> dict:
    r = dict(run_id=f"r{i}", candidate="p5", source="measured", slo_ttft_s=2.0, slo_tpot_s=0.1,
             created_at=f"2026-11-{10 + i:02d}T02:00:00Z", meets_slo=True, output_tok_s=tok,
             ttft_s_p99=ttft, cost_per_1m_output_usd=cost)
    r.update(kw)
    return r


STABLE = [row(i, tok=100 + (i % 3), ttft=1.0 + 0.01 * (i % 2), cost=10.0 - 0.1 * (i % 3))
          for i in range(8)]


def test_stable_history_stays_quiet():
    res = compare_to_history(row(9, tok=99.0, ttft=1.05, cost=10.2), STABLE)
    assert not res.regressed and res.passed
    assert res.metadata["regressed_metrics"] == []
    assert res.metadata["n_history"] == 5
    assert res.metadata["history_run_ids"] == ["r3", "r4", "r5", "r6", "r7"]
    assert "no regression" in res.summary()


def test_throughput_drop_fires_with_the_numbers_in_metadata():
    # trailing 5: r3..r7 -> tok 100, 101, 102, 100, 101 -> median 101
    res = compare_to_history(row(9, tok=90.0), STABLE)
    assert res.regressed
    assert res.metadata["regressed_metrics"] == ["output_tok_s"]
    assert res.metadata["output_tok_s_baseline_median"] == 101.0
    assert res.metadata["output_tok_s_change"] == pytest.approx(90 / 101 - 1)
    assert res.metadata["thresholds"] == {"throughput_drop": 0.1, "ttft_p99_rise": 0.2,
                                          "cost_rise": 0.1}
    json.dumps(res.metadata)  # metadata-ready: plain JSON values
    assert "REGRESSION" in res.summary() and "output_tok_s" in res.summary()


def test_ttft_and_cost_rises_fire_and_limits_are_exclusive():
    # ttft median 1.0 (r3..r7: 1.01, 1.0, 1.01, 1.0, 1.01 -> 1.01); cost median 9.9
    res = compare_to_history(row(9, ttft=1.01 * 1.25, cost=9.9 * 1.12), STABLE)
    assert res.metadata["regressed_metrics"] == ["ttft_s_p99", "cost_per_1m_output_usd"]
    edge = compare_to_history(row(9, ttft=1.01 * 1.19, cost=9.9 * 1.09), STABLE)
    assert not edge.regressed


def test_thresholds_and_window_are_configurable():
    loose = Thresholds(throughput_drop=0.5, ttft_p99_rise=1.0, cost_rise=1.0)
    assert not compare_to_history(row(9, tok=60.0), STABLE, thresholds=loose).regressed
    res = compare_to_history(row(9, tok=95.0), STABLE, n=2,
                             thresholds=Thresholds(throughput_drop=0.05))
    assert res.metadata["history_run_ids"] == ["r6", "r7"]
    assert res.metadata["output_tok_s_baseline_median"] == 100.5 and res.regressed


def test_only_earlier_runs_of_the_same_candidate_source_and_slo_count():
    noise = [row(6, tok=10.0, candidate="other", run_id="o"),
             row(7, tok=10.0, source="emulated", run_id="e"),
             row(7, tok=10.0, slo_ttft_s=5.0, run_id="s"),
             row(18, tok=10.0)]  # r18 is created after r9
    res = compare_to_history(row(9, tok=99.0), STABLE + noise)
    assert not res.regressed
    assert res.metadata["history_run_ids"] == ["r3", "r4", "r5", "r6", "r7"]
    # the current run itself in the history is ignored
    assert compare_to_history(row(7), STABLE).metadata["history_run_ids"][-1] == "r6"


def test_losing_the_slo_is_a_regression_and_nulls_are_not_zero():
    lost = row(9, meets_slo=False, tok=None, ttft=None, cost=None)
    res = compare_to_history(lost, STABLE)
    assert res.regressed and res.metadata["regressed_metrics"] == ["meets_slo"]
    assert res.metadata["output_tok_s_current"] is None
    assert res.metadata["output_tok_s_change"] is None


def test_no_history_is_quiet_and_says_so():
    res = compare_to_history(row(1), [], min_history=3)
    assert not res.regressed and res.metadata["n_history"] == 0
    assert "not enough history" in res.summary()


def test_history_from_run_folders(tmp_path):
    dirs = [simulated_run(tmp_path, FAST, f"n{i}", f"2026-11-2{i}T02:00:00Z", seed=i)
            for i in range(4)]
    slow = FAST.__class__(**{**FAST.__dict__, "itl_s": FAST.itl_s * 1.6})
    dirs.append(simulated_run(tmp_path, slow, "n4", "2026-11-25T02:00:00Z", seed=4))
    records = [headline_record(d) for d in dirs]
    assert records[0]["created_at"] == "2026-11-20T02:00:00.000000000Z"
    assert not compare_to_history(records[3], records[:3]).regressed
    res = compare_to_history(records[4], records[:4])
    assert res.regressed and "output_tok_s" in res.metadata["regressed_metrics"]
