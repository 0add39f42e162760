"""The report on the real analyzer's outputs: the fixture's raw records go through the
analyzer's own metric and cost SQL (`servingbench.resources.analysis.metrics.step_metrics`,
`cost_tables`), whose tables must equal the ones the fixture computed itself (so the other
report tests read what the analyzer really writes), and the reports are written from them.

The gates (Great Expectations) are left out: importing GX alone takes ~12 s of CPU here;
the fixture's gates.json follows contract §5 and the report was checked once on a full
`analyze_run` output by hand."""

from __future__ import annotations

import math

import pyarrow.parquet as pq
import pytest
from servingbench.resources.analysis.analyze import cost_tables
from servingbench.resources.analysis.metrics import step_metrics
from servingbench.resources.analysis.rundir import open_run
from servingbench.resources.contract.schemas import write_parquet
from servingbench.resources.report import write_comparison_report, write_run_report

from tests.support.html import check_safe

OUTPUTS = ("derived_metrics.parquet", "cost_per_1m.parquet", "headline.parquet")


def analyze(run_dir) -> dict:
    """Derived tables from the analyzer's SQL, written over the fixture's own."""
    folder = open_run(run_dir)
    try:
        metrics = step_metrics(folder)
        cost, headline = cost_tables(folder, metrics, [(2.0, 0.1)])
    finally:
        folder.close()
    tables = dict(zip(OUTPUTS, (metrics, cost, headline), strict=True))
    for name, table in tables.items():
        write_parquet(table, run_dir / name)
    return tables


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


@pytest.mark.parametrize("index", [0, 3, 4])  # measured with an invalid step, emulated, slow
def test_fixture_outputs_equal_the_analyzers(runs, index):
    run = runs[index]
    fixture = {name: pq.read_table(run / name).to_pylist() for name in OUTPUTS}
    for name, table in analyze(run).items():
        assert table.column_names == list(fixture[name][0]), name
        for mine, theirs in zip(fixture[name], table.to_pylist(), strict=True):
            for col in mine:
                assert _same(mine[col], theirs[col]), (name, mine.get("step"), col)


def test_reports_from_analyzer_outputs(runs, tmp_path):
    for run in runs[3:]:
        analyze(run)
    page = check_safe(write_comparison_report(runs[3:], tmp_path / "c.html").read_text())
    assert "emulated-banner" in page.ids()
    assert "inf2-scout-bf16-tp24" in page.plain and "meets no step" in page.plain
    run_page = check_safe(write_run_report(runs[4]).read_text())
    assert "AWS Key Management Service KMS-Keys $1.00" in run_page.plain
