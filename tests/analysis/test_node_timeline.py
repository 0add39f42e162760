"""contract §4 with a node timeline (§2.6): the in-window instance usage is ∫ nodes(t) dt,
rule 5's bounds follow the same integral (lower) and the most nodes up at once counted from
their request (upper), the cross-check's hourly price is the mean node count's. Hand-computed.

The run: steady requests over exactly the first hour [0, 3,600,000 ms], p5 at 55.04 USD/h.
Node n0 is up before the run; n1 is requested at 10 min, Ready at 15 min, gone at 45 min.
  ∫ nodes(t) dt over the hour = 1 h (n0) + 0.5 h (n1) = 1.5 node-hours
  EC2 bills n1 from its request: 35 min = 0.5833 h; the hour's honest usage 1.5833 h
  rule 5: lower 0.95 × 1.5 = 1.425 h, upper 1.05 × 2 nodes × 1 h = 2.1 h
"""

from __future__ import annotations

import pytest
from servingbench.resources.analysis.analyze import analyze_run

from tests.support.runbuilder import HOUR_MS, RunBuilder

MIN = 60_000


def hour_run(usage_h: float | None, node_events: bool = True, **fields) -> RunBuilder:
    b = RunBuilder(replicas={"min": 1, "max": 2, "initial": 1}, **fields)
    b.request("c=1", phase="warmup", sent=-2000, chunks=[(-1900, 1)], finished=-1800)
    # steady: 0 → 3,600,000 ms; 4 tokens in all
    b.request("c=1", sent=0, chunks=[(100, 1), (200, 1)], finished=200)
    b.request("c=1", sent=HOUR_MS - 300, chunks=[(HOUR_MS - 200, 1), (HOUR_MS - 100, 1)],
              finished=HOUR_MS)
    if node_events:
        b.event("node_ready", "n0", -30 * MIN)
        b.event("node_requested", "n1", 10 * MIN)
        b.event("node_ready", "n1", 15 * MIN)
        b.event("node_gone", "n1", 45 * MIN)
    if usage_h is not None:
        b.bill_row(0, HOUR_MS, 55.04 * usage_h, usage_h)
    return b


def test_window_cost_integrates_the_node_timeline(tmp_path):
    result = analyze_run(hour_run(1 + 35 / 60).write(tmp_path / "run"))
    assert result.exit_code == 0, result.gates
    (row,) = result.cost.to_pylist()
    assert row["window_cost_usd"] == pytest.approx(55.04 * 1.5, rel=1e-12)
    assert row["cost_per_1m_output_usd"] == pytest.approx(55.04 * 1.5 / 4 * 1e6, rel=1e-12)
    # the cross-check's price: 55.04 × ∫ nodes dt / window_s = 55.04 × 1.5 node-hours / 1 h
    assert row["hourly_price_usd"] == pytest.approx(55.04 * 1.5, rel=1e-12)
    assert row["cross_check_delta"] == pytest.approx(0.0, abs=1e-9)
    assert row["cross_check_note"] is None


def test_without_node_events_every_node_in_scope_serves_the_whole_window(tmp_path):
    result = analyze_run(hour_run(1.0, node_events=False).write(tmp_path / "run"))
    assert result.exit_code == 0, result.gates
    (row,) = result.cost.to_pylist()
    assert row["window_cost_usd"] == pytest.approx(55.04, rel=1e-12)
    assert row["hourly_price_usd"] == pytest.approx(55.04)


def test_a_bill_covering_only_the_first_node_fails_rule_5(tmp_path):
    result = analyze_run(hour_run(1.0).write(tmp_path / "run"))   # 1.0 h < 1.425 h
    assert result.exit_code == 3
    rule5 = result.gates[4]
    assert rule5["passed"] is False and rule5["offending_rows"] == 1
    assert "below 95 % of ∫ nodes(t) dt" in rule5["message"]
    assert rule5["examples"] == ["2026-11-29T02:00:00.000000000Z"]
    assert result.cost is None


@pytest.mark.parametrize("usage_h, passed", [
    (1.425, True),    # exactly the lower bound
    (1.42, False),    # below it
    (2.1, True),      # exactly the upper bound: 2 nodes (n1 from its request) × 1 h × 1.05
    (2.11, False),    # above it: instances outside the scope
])
def test_rule_5_bounds_follow_the_timeline(tmp_path, usage_h, passed):
    result = analyze_run(hour_run(usage_h).write(tmp_path / "run"))
    assert result.gates[4]["passed"] is passed, result.gates[4]


def test_the_upper_bound_counts_a_node_from_its_request(tmp_path):
    # n2 requested at 50 min and never Ready: billed (EC2 counts from launch), never in
    # ∫ nodes; the most at once is then 2 (n0 + n2 after n1 is gone at 45 min): 2.1 h allowed.
    # With n2 requested at 40 min (n1 still up) the most is 3: 3.15 h allowed.
    b = hour_run(2.5)
    b.event("node_requested", "n2", 40 * MIN)
    result = analyze_run(b.write(tmp_path / "run"))
    assert result.gates[4]["passed"] is True, result.gates[4]
    b = hour_run(2.5)
    b.event("node_requested", "n2", 50 * MIN)
    result = analyze_run(b.write(tmp_path / "run2"))
    assert result.gates[4]["passed"] is False
    assert "above 105 %" in result.gates[4]["message"]


def test_a_node_interrupted_mid_window_stops_counting(tmp_path):
    # n1's end is an interruption at 30 min instead: ∫ = 1 h + 0.25 h
    b = hour_run(1.25 + 5 / 60, capacity="spot")
    b.events = [e for e in b.events if e["kind"] != "node_gone"]
    b.event("interruption", "n1", 30 * MIN)
    b.bill[0]["usage_type"] = "USE1-SpotUsage:p5.48xlarge"
    result = analyze_run(b.write(tmp_path / "run"))
    assert result.exit_code == 0, result.gates
    (row,) = result.cost.to_pylist()
    assert row["window_cost_usd"] == pytest.approx(55.04 * 1.25, rel=1e-12)


def test_a_spot_runs_instance_rows_are_its_spot_usage(tmp_path):
    # contract §3.8: for capacity spot the instance rows are the SpotUsage usage types; a
    # BoxUsage row of the same type is then another hourly row, prorated
    b = hour_run(None, node_events=False, capacity="spot")
    b.bill_row(0, HOUR_MS, 20.0, 1.0, usage_type="USE1-SpotUsage:p5.48xlarge")
    b.bill_row(0, HOUR_MS, 55.04 * 0.5, 0.5, usage_type="USE1-BoxUsage:p5.48xlarge")
    result = analyze_run(b.write(tmp_path / "run"))
    assert result.exit_code == 0, result.gates
    (row,) = result.cost.to_pylist()
    # spot: 20 USD/node-h × 1 node × 1 h; the BoxUsage row prorated whole (overlap = period)
    assert row["window_cost_usd"] == pytest.approx(20.0 + 55.04 * 0.5, rel=1e-12)
