"""Bills from our normalizer through the analyzer: a clean bill is accepted with a
hand-computed cost; a bill that does not cover the window, each scope mismatch and a
mixed-source bill are rejected by rules 5 / 6. Skipped until `servingbench.resources.analysis.analyze`
(and the run-folder builder `tests/runbuilder.py`) are on the branch.
"""

from __future__ import annotations

import copy
import json

import pyarrow as pa
import pytest
from servingbench.resources.analysis import analyze
from servingbench.resources.billing.normalize import (
    price_list_rows,
    rows_from_cost_explorer,
    to_table,
)
from servingbench.resources.contract.schemas import write_parquet

from tests.support import runbuilder
from tests.support.eks.billdata import ACCOUNT, INSTANCE, PAGES, PRICE, RUN_ID


def ce_bill(pages=PAGES, *, run_id=RUN_ID, account=ACCOUNT, region="us-east-1"):
    results = [r for page in pages for r in page["ResultsByTime"]]
    return to_table(rows_from_cost_explorer(results, run_id=run_id, account_id=account,
                                            region=region))


def run_folder(tmp_path, bill: pa.Table):
    """The builder's hand-computed steady run (T0 = 02:00:00Z, sent 1.000 s → done 1.400 s)
    for one p5.48xlarge node, with `bill` as its bill.parquet."""
    b = runbuilder.RunBuilder(run_id=RUN_ID, instance_type=INSTANCE, node_count=1,
                              hourly=PRICE, source="measured")
    b.request("c=2", phase="warmup", sent=0, chunks=[(100, 1), (110, 1)], finished=120)
    b.request("c=2", sched=1000, sent=1000, chunks=[(1100, 1), (1120, 1), (1150, 1)], finished=1160)
    b.request("c=2", sched=1000, sent=1010, chunks=[(1210, 1), (1250, 1)], finished=1400)
    b.request("c=2", sched=1160, sent=1160, chunks=[(1260, 1), (1300, 1), (1330, 1), (1400, 1)],
              finished=1400)
    run_dir = b.write(tmp_path / "run", bill=False)
    write_parquet(bill, run_dir / "bill.parquet")
    return run_dir


def result(tmp_path, bill):
    out = analyze.analyze_run(run_folder(tmp_path, bill))
    return out, {g["rule"]: g for g in out.gates}


def test_clean_cost_explorer_bill_is_accepted_with_hand_computed_cost(tmp_path):
    out, gates = result(tmp_path, ce_bill())
    assert out.exit_code == 0, out.message
    assert gates[5]["passed"] is True and gates[6]["passed"] is True
    row = out.cost.to_pylist()[0]
    # instance rate 45.8666666667 / 0.8333333333 = $55.04/h; window 0.4 s; 9 output tokens
    assert row["window_cost_usd"] == pytest.approx(55.04 * 0.4 / 3600, rel=1e-9)
    assert row["cost_per_1m_output_usd"] == pytest.approx(55.04 * 0.4 / 3600 / 9 * 1e6, rel=1e-9)
    assert row["bill_source"] == "cost_explorer" and row["bill_status"] == "provisional"
    assert json.loads((out.run_dir / "gates.json").read_text())[4]["passed"] is True


def _edit_first_group(**changes):
    pages = copy.deepcopy(PAGES)
    group = pages[0]["ResultsByTime"][0]["Groups"][0]
    if "hours" in changes:
        group["Metrics"]["UsageQuantity"]["Amount"] = changes["hours"]
    return pages


@pytest.mark.parametrize("pages, why, message", [
    ([copy.deepcopy(PAGES[2])], "hour 02's usage not in Cost Explorer yet",
     "steady phase not covered by instance rows from 2026-11-29T02:00:01.000000000Z"),
    (_edit_first_group(hours="2.0"), "two node-hours in one hour for a one-node run",
     "instance-hours above 105 %"),
])
def test_bills_that_miss_the_window_or_hold_more_nodes_are_rejected(tmp_path, pages, why, message):
    out, gates = result(tmp_path, ce_bill(pages))
    assert out.exit_code == 3, why
    assert gates[5]["passed"] is False and message in gates[5]["message"], gates[5]["message"]
    assert not (out.run_dir / "cost_per_1m.parquet").exists()


def test_each_scope_mismatch_is_named_and_rejected(tmp_path):
    """One bill, one foreign row per kind of mismatch (a run per kind would spend the
    analyzer's time for the same evidence): each is counted under its own check."""
    hour = {"Start": "2026-11-29T02:00:00Z", "End": "2026-11-29T03:00:00Z"}
    foreign = [{"TimePeriod": hour, "Estimated": True, "Groups": [
        {"Keys": [usage, itype], "Metrics": {"UnblendedCost": {"Amount": "0.01", "Unit": unit},
                                             "UsageQuantity": {"Amount": "0.1", "Unit": "GB-Mo"}}}]}
        for usage, itype, unit in [("EBS:VolumeUsage.gp3", "NoInstanceType", "USD"),
                                   ("EBS:VolumeUsage.gp3", "NoInstanceType", "EUR"),
                                   ("BoxUsage:p4d.24xlarge", "p4d.24xlarge", "USD")]]

    def rows(run_id=RUN_ID, account=ACCOUNT, region="us-east-1", which=0):
        return rows_from_cost_explorer([foreign[which]], run_id=run_id, account_id=account,
                                       region=region)

    bill = pa.concat_tables([ce_bill(), to_table(
        rows(account="999999999999") + rows(region="us-west-2") + rows(run_id="another-run")
        + rows(which=1) + rows(which=2))])
    out, gates = result(tmp_path, bill)
    assert out.exit_code == 3 and gates[5]["passed"] is False
    for check in ["names another account (1 rows)", "names another region (1 rows)",
                  "carries another run-id tag value (1 rows)",
                  "names another instance type (1 rows)", "is not in USD (1 rows)"]:
        assert check in gates[5]["message"], (check, gates[5]["message"])
    assert gates[5]["offending_rows"] == 5


def test_mixed_sources_are_rejected(tmp_path):
    pl = to_table(price_list_rows(
        run_id=RUN_ID, account_id=ACCOUNT, region="us-east-1", instance_type=INSTANCE,
        node_count=1, start_ns=runbuilder.T0, end_ns=runbuilder.T0 + 3600 * 10**9,
        usd_per_hour=PRICE, usage_type="BoxUsage:p5.48xlarge", service=None))
    out, gates = result(tmp_path, pa.concat_tables([ce_bill(), pl]))
    assert out.exit_code == 3 and gates[6]["passed"] is False
    assert gates[6]["offending_rows"] == 1  # the price-list row, against 3 Cost Explorer rows


def test_price_list_bill_alone_is_accepted(tmp_path):
    pl = to_table(price_list_rows(
        run_id=RUN_ID, account_id=ACCOUNT, region="us-east-1", instance_type=INSTANCE,
        node_count=1, start_ns=runbuilder.T0, end_ns=runbuilder.T0 + 3600 * 10**9,
        usd_per_hour=PRICE, usage_type="BoxUsage:p5.48xlarge", service=None))
    out, gates = result(tmp_path, pl)
    assert out.exit_code == 0, out.message
    assert out.cost.to_pylist()[0]["bill_status"] == "final"
