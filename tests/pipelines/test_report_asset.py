"""The nightly regression check's own function: quiet on a stable history. Its run in a
real benchmark_job (the report asset, the reconciliation, the check firing as a warning on a
history with a drop while the run still succeeds) shares the `good` fixture's one job run in
test_assets_fixtures.py; a job run here would prove that wiring again."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from servingbench.assets.report import reconciliation_md, regression

from tests.support.history import analyzed_good, write_history

pytestmark = pytest.mark.slow  # analyses a run folder (Great Expectations): not in `make check`


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return analyzed_good(tmp_path_factory.mktemp("src"))


def test_the_check_is_quiet_on_a_stable_history(tmp_path, good):
    ids = write_history(tmp_path / "runs", pq.read_table(good / "headline.parquet"),
                        [1.0, 1.03, 0.97])
    res = regression(good, tmp_path / "runs")
    assert res.passed
    meta = res.metadata
    assert meta["n_history"] == 3 and sorted(meta["history_run_ids"]) == ids
    assert meta["regressed_metrics"] == [] and meta["output_tok_s_change"] == pytest.approx(0.0)
    assert "no regression" in res.summary()


def test_a_run_without_server_counters_says_so():
    # the report asset's reconciliation text when the folder has no server_metrics.json
    # (the job run has one; without it the report writes no reconciliation.json:
    # resources/report/reconciliation.reconcile_run)
    assert reconciliation_md(None).startswith("no server_metrics.json")
