"""contract §4 by hand: prorated window cost, cost per 1M, the hourly cross-check, bill status,
included and excluded items, and the SLO headline."""

from __future__ import annotations

import pytest
from servingbench.resources.analysis.analyze import analyze_run

from tests.support.runbuilder import HOUR_MS, RunBuilder, clean_run

EKS = {"service": "Amazon Elastic Kubernetes Service", "usage_type": "USE1-AmazonEKS-Hours:perCluster",
       "instance_type": None}


def cost_row(run_dir, **kw) -> dict:
    result = analyze_run(run_dir, **kw)
    assert result.exit_code == 0, result.gates
    (row,) = result.cost.to_pylist()
    return row


def test_clean_bill_cost_per_1m_by_hand(tmp_path):
    # window 0.4 s at 55.04 USD/h for one node; 9 output tokens.
    row = cost_row(clean_run().write(tmp_path / "run"))
    window_cost = 55.04 * 0.4 / 3600
    assert row["window_cost_usd"] == pytest.approx(window_cost, rel=1e-12)
    assert row["cost_per_1m_output_usd"] == pytest.approx(window_cost / 9 * 1e6, rel=1e-12)
    assert row["hourly_price_usd"] == 55.04
    assert row["cost_per_1m_via_rate_usd"] == pytest.approx(55.04 * 1e6 / (22.5 * 3600), rel=1e-12)
    assert row["cross_check_delta"] == pytest.approx(0.0, abs=1e-12)
    assert row["cross_check_note"] is None
    assert (row["bill_source"], row["bill_status"], row["source"]) == ("price_sheet", "final", "emulated")
    assert row["included"] == ["instance"] and row["excluded_items"] == []
    assert (row["price_region"], row["purchase_option"], row["retrieved_on"]) == (
        "us-east-1", "on_demand", "2026-11-28")


def test_estimated_bill_row_makes_the_cost_provisional(tmp_path):
    b = clean_run()
    b.bill[0]["estimated"] = True
    assert cost_row(b.write(tmp_path / "run"))["bill_status"] == "provisional"


def test_monthly_fee_is_listed_apart_and_never_prorated(tmp_path):
    b = clean_run()
    b.bill_row(0, 30 * 24 * HOUR_MS, 29.0, 1.0, usage_unit="Month", service="AWS Support",
               usage_type="Support-Business", instance_type=None)
    b.bill_row(0, HOUR_MS, 0.08, 1.0, usage_unit="GB-Mo", service="Amazon Elastic Compute Cloud",
               usage_type="USE1-EBS:VolumeUsage.gp3", instance_type=None)
    row = cost_row(b.write(tmp_path / "run"))
    assert row["window_cost_usd"] == pytest.approx(55.04 * 0.4 / 3600, rel=1e-12)
    assert [(i["service"], i["usage_type"], i["amount"]) for i in row["excluded_items"]] == [
        ("AWS Support", "Support-Business", 29.0),
        ("Amazon Elastic Compute Cloud", "USE1-EBS:VolumeUsage.gp3", 0.08)]
    assert row["included"] == ["instance"]
    assert row["cross_check_note"] is None


def test_other_hourly_rows_are_prorated_included_and_explained(tmp_path):
    b = clean_run()
    b.bill_row(0, HOUR_MS, 0.10, 1.0, **EKS)
    b.bill_row(0, HOUR_MS, 0.60, 1.0, service="AWS Data Transfer",
               usage_type="USE1-DataTransfer-Out-Bytes", instance_type=None)
    row = cost_row(b.write(tmp_path / "run"))
    extra = (0.10 + 0.60) * 0.4 / 3600
    assert row["window_cost_usd"] == pytest.approx(55.04 * 0.4 / 3600 + extra, rel=1e-12)
    assert row["included"] == ["eks_control_plane", "instance", "network"]
    assert row["cross_check_delta"] == pytest.approx(0.70 / 55.04, rel=1e-9)  # > 1 %
    assert "other hourly items" in row["cross_check_note"]


def test_two_nodes_across_an_hour_boundary_with_a_discounted_second_hour(tmp_path):
    # node_count 2, window [HOUR-200 ms, HOUR+200 ms]; hour 0 billed at 55.04/node-h,
    # hour 1 at 40.00/node-h (a discount): each period counts 2 nodes × 0.2 s.
    b = RunBuilder(node_count=2)
    b.request("c=1", phase="warmup", sent=0, chunks=[(50, 1)], finished=60)
    t = HOUR_MS - 200
    b.request("c=1", sent=t, chunks=[(t + 100, 1), (t + 200, 1), (t + 300, 1), (t + 400, 1)],
              finished=t + 400)
    b.bill_row(0, HOUR_MS, 2 * 55.04, 2.0)
    b.bill_row(HOUR_MS, 2 * HOUR_MS, 2 * 40.0, 2.0)
    row = cost_row(b.write(tmp_path / "run"))
    window_cost = 55.04 * 2 * 0.2 / 3600 + 40.0 * 2 * 0.2 / 3600
    assert row["window_cost_usd"] == pytest.approx(window_cost, rel=1e-12)
    assert row["cost_per_1m_output_usd"] == pytest.approx(window_cost / 4 * 1e6, rel=1e-12)
    assert row["hourly_price_usd"] == pytest.approx(2 * 55.04)
    via = 2 * 55.04 * 1e6 / (4 / 0.4 * 3600)
    assert row["cost_per_1m_via_rate_usd"] == pytest.approx(via, rel=1e-12)
    assert row["cross_check_delta"] == pytest.approx((window_cost / 4 * 1e6 - via) / via, rel=1e-9)
    assert "differs from the price basis" in row["cross_check_note"]


def test_rate_is_counted_once_per_period_however_many_rows(tmp_path):
    # the same hour split into two instance rows (e.g. two usage types): 30 + 25.04 for 1 node-h
    b = clean_run()
    b.bill.clear()
    b.bill_row(0, HOUR_MS, 30.0, 0.5, usage_type="USE1-BoxUsage:p5.48xlarge")
    b.bill_row(0, HOUR_MS, 25.04, 0.5, usage_type="USE1-SpotUsage:p5.48xlarge")
    row = cost_row(b.write(tmp_path / "run"))
    assert row["window_cost_usd"] == pytest.approx(55.04 * 0.4 / 3600, rel=1e-12)


def test_without_price_basis_the_cross_check_says_why(tmp_path):
    b = RunBuilder(hourly=None)
    b.request("c=1", phase="warmup", sent=0, chunks=[(50, 1)], finished=60)
    b.request("c=1", sent=100, chunks=[(200, 1), (210, 1)], finished=210)
    b.bill_row(0, HOUR_MS, 55.04, 1.0)
    row = cost_row(b.write(tmp_path / "run"))
    assert row["hourly_price_usd"] is None and row["cross_check_delta"] is None
    assert "no price basis" in row["cross_check_note"]
    assert row["price_region"] is None


def _two_step_run() -> RunBuilder:
    # c=1: TTFT 0.1 s, 2 tokens in 0.11 s;  c=2: TTFT 0.5 s, 2 × 41 tokens in 0.55 s.
    b = RunBuilder()
    b.request("c=1", phase="warmup", sent=0, chunks=[(50, 1)], finished=60)
    b.request("c=1", sent=100, chunks=[(200, 1), (210, 1)], finished=200 + 10)
    for sent in (1000, 1000):
        b.request("c=2", sent=sent, chunks=[(sent + 500, 1), (sent + 550, 40)], finished=sent + 550)
    b.hourly_bill()
    return b


def test_headline_picks_the_fastest_valid_step_within_each_slo(tmp_path):
    run_dir = _two_step_run().write(tmp_path / "run")
    result = analyze_run(run_dir, slos=[(2.0, 0.1), (0.2, 0.1), (0.05, 0.001)])
    rows = {(r["slo_ttft_s"], r["slo_tpot_s"]): r for r in result.headline.to_pylist()}
    loose, mid, tight = rows[(2.0, 0.1)], rows[(0.2, 0.1)], rows[(0.05, 0.001)]
    assert (loose["meets_slo"], loose["step"]) == (True, "c=2")
    assert loose["output_tok_s"] == pytest.approx(82 / 0.55)
    assert loose["tpot_s_p99"] == pytest.approx(0.05 / 40)
    assert (mid["meets_slo"], mid["step"]) == (True, "c=1")
    assert mid["ttft_s_p99"] == pytest.approx(0.1) and mid["bill_status"] == "final"
    assert tight["meets_slo"] is False
    assert all(tight[k] is None for k in ("step", "output_tok_s", "ttft_s_p99", "tpot_s_p99",
                                          "cost_per_1m_output_usd", "bill_status"))
    assert (tight["run_id"], tight["candidate"], tight["instance_type"], tight["source"]) == (
        "run-1", "p5-scout-bf16-tp8", "p5.48xlarge", "emulated")


def test_headline_never_ranks_an_invalid_step(tmp_path):
    b = _two_step_run()
    b.client_limited.add("c=2")
    result = analyze_run(b.write(tmp_path / "run"))
    (row,) = result.headline.to_pylist()
    assert row["step"] == "c=1"
    assert len(result.cost) == 2   # invalid steps stay in every output
