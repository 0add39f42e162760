"""The report fixtures are the real analyzer's outputs: `simulated_run` writes raw records
and a bill, then runs `analyze_run` (gates, metrics, cost, headline, frontier), so every
report test reads what the analyzer really writes. Here: that the fixture's outputs are the
analyzer's own, and the reports written from them."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
from servingbench.resources.contract.outputs import OUTPUTS as OUTPUT_SCHEMAS
from servingbench.resources.contract.outputs import required_columns
from servingbench.resources.report import write_comparison_report, write_run_report

from tests.support.html import check_safe

OUTPUTS = ("derived_metrics", "cost_per_1m", "headline", "frontier")


def test_the_fixture_holds_what_the_analyzer_writes(runs):
    # every output the analyzer writes for an accepted run, in the contract's schema, and
    # its gates.json (all six rules run by the analyzer's own gates)
    for run in runs:
        gates = json.loads((run / "gates.json").read_text())
        assert [g["rule"] for g in gates] == [1, 2, 3, 4, 5, 6]
        for name in OUTPUTS:
            got = pq.read_schema(run / f"{name}.parquet")
            assert set(required_columns(name)) <= set(got.names) <= set(OUTPUT_SCHEMAS[name].names)


def test_reports_from_analyzer_outputs(runs, tmp_path):
    page = check_safe(write_comparison_report(runs[3:], tmp_path / "c.html").read_text())
    assert "emulated-banner" in page.ids()
    assert "inf2-scout-bf16-tp24" in page.plain and "meets no step" in page.plain
    run_page = check_safe(write_run_report(runs[4]).read_text())
    assert "AWS Key Management Service KMS-Keys $1.00" in run_page.plain
