"""The contract §5 gates as blocking asset checks: rules 1-4 on the steady request log (with the
warm-up and chunk logs), rules 5-6 on the bill. Same implementation as `servingbench
analyze` (resources.analysis.gates); a failed check stops derived_metrics and the cost table
from materializing, and every raw record stays where it is. Each check writes its rules'
verdicts into the run folder's gates.json, which the analysis in derived_metrics reads
instead of validating again: the gates run once per chain run."""

from __future__ import annotations

import warnings
from pathlib import Path

import dagster as dg
from servingbench.resources.analysis.gates import (
    BILL_RULES,
    CHECK_NAMES,
    REQUEST_RULES,
    bill_gates,
    record,
    request_gates,
)
from servingbench.resources.analysis.rundir import open_run

REQUEST_CHECKS = {rule: CHECK_NAMES[rule] for rule in REQUEST_RULES}
BILL_CHECKS = {rule: CHECK_NAMES[rule] for rule in BILL_RULES}


def _results(asset: str, names: dict, gates) -> list[dg.AssetCheckResult]:
    return [dg.AssetCheckResult(
        asset_key=asset, check_name=names[g.rule], passed=g.passed is not False,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"rule": dg.MetadataValue.int(g.rule), "name": dg.MetadataValue.text(g.name),
                  "offending_rows": dg.MetadataValue.int(g.offending_rows),
                  "examples": dg.MetadataValue.json(g.examples),
                  "message": dg.MetadataValue.text(g.message)})
        for g in gates]


def _specs(asset: str, names: dict, partitions_def) -> list[dg.AssetCheckSpec]:
    # Partitioned checks are a preview feature in dagster 1.13 (pinned): one result per
    # date × candidate partition, which is what a gate on one run means.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return [dg.AssetCheckSpec(name, asset=asset, blocking=True, partitions_def=partitions_def,
                              description=f"contract §5 rule {rule}")
                for rule, name in names.items()]


def _evaluate(asset: str, names: dict, value: dict, gates) -> list[dg.AssetCheckResult]:
    run_dir = Path(value["run_dir"])
    with open_run(run_dir) as run:
        verdicts = gates(run)
    record(run_dir, verdicts)
    return _results(asset, names, verdicts)


def build(partitions_def) -> list:
    @dg.multi_asset_check(specs=_specs("steady_state_request_log", REQUEST_CHECKS, partitions_def),
                          ins={"log": dg.AssetIn("steady_state_request_log")},
                          name="request_log_gates")
    def request_log_gates(log: dict):
        yield from _evaluate("steady_state_request_log", REQUEST_CHECKS, log, request_gates)

    @dg.multi_asset_check(specs=_specs("cost_explorer_bill", BILL_CHECKS, partitions_def),
                          ins={"bill": dg.AssetIn("cost_explorer_bill")}, name="bill_gates")
    def bill_gate_checks(bill: dict):
        yield from _evaluate("cost_explorer_bill", BILL_CHECKS, bill, bill_gates)

    return [request_log_gates, bill_gate_checks]
