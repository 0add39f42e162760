"""Asset tests with fixture data: benchmark_job replays recorded run folders from
tests/fixtures. A good one produces exactly the expected cost rows in DuckDB; a bad one is
stopped at the check of the rule it breaks, and the cost table never materializes. Every
bad one breaks exactly its rule, proven with the gate functions the checks run (one job run
is the Dagster part; nine would prove the same blocking nine times). The good one's run also
carries benchmark_report and the nightly regression check (WARN, non-blocking): its report,
plots and server reconciliation, and the check firing on a history with a drop while the run
still succeeds (the check's quiet side is its function's, in test_report_asset.py)."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import duckdb
import pyarrow.parquet as pq
import pytest
from servingbench.resources.analysis.gates import CHECK_NAMES, bill_gates, request_gates
from servingbench.resources.analysis.rundir import open_run

from tests.support.chain import FIXTURES, checks, materialized, replay_resources, run_job
from tests.support.history import (
    analyzed_good,
    recording_with_server_metrics,
    regression_check,
    write_history,
)
from tests.support.replay import ReplayLoad

pytestmark = pytest.mark.slow  # a chain, a job or processes: not in `make check`

REQUEST = ["steady_requests_are_complete", "request_timestamps_are_ordered",
           "warmup_and_steady_are_separated", "output_tokens_are_counted"]
BILL = ["bill_matches_run_scope", "bill_has_a_single_source"]
REGRESSION = ["headline_has_not_regressed"]
QUALITY = ["quality_matches_reference"]


BAD = {
    "missing_timestamps": "steady_requests_are_complete",
    "other_account": "bill_matches_run_scope",
    "other_region": "bill_matches_run_scope",
    "other_instance_type": "bill_matches_run_scope",
    "other_tag_value": "bill_matches_run_scope",
    "window_not_covered": "bill_matches_run_scope",
    "instance_hours_off": "bill_matches_run_scope",
    "non_usd": "bill_matches_run_scope",
    "mixed_sources": "bill_has_a_single_source",
}


def gate_checks(fixture: str) -> dict[str, bool]:
    """What the job's gate checks report on a recorded folder: the same gate functions that
    assets/checks.py runs, under the check names and the pass rule it gives them. The job
    tests below prove both agree on a passing and a failing fixture."""
    with open_run(FIXTURES / fixture) as run:
        gates = [*request_gates(run), *bill_gates(run)]
    return {CHECK_NAMES[g.rule]: g.passed is not False for g in gates}


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    """benchmark_job once on the `good` fixture, for every test that reads a passing run:
    replayed with recorded engine counters (12 generated tokens where the client counted 9)
    and after four earlier runs of its candidate that were 1.5x faster and cheaper, so its
    report flags the reconciliation and the nightly regression check fires (WARN)."""
    tmp = tmp_path_factory.mktemp("good-run")
    good = analyzed_good(tmp_path_factory.mktemp("src"))
    ids = write_history(tmp / "runs", pq.read_table(good / "headline.parquet"),
                        [1.5, 1.5, 1.45, 1.55])
    rec = recording_with_server_metrics(tmp)
    resources = replay_resources("good") | {"load_generator": ReplayLoad(rec)}
    result, _ = run_job(tmp, resources=resources)
    return result, tmp, ids


def test_good_fixture_produces_the_exact_cost_rows(good_run):
    result, tmp_path, _ = good_run
    assert result.success
    found = checks(result)
    assert set(found) == set(REQUEST + BILL + REGRESSION + QUALITY)
    assert {k: v for k, v in found.items() if k in REQUEST + BILL} == gate_checks("good")
    # an emulated replay has no quality: "not applicable" is never a pass, and never blocks
    assert found.pop("quality_matches_reference") is False
    # the regression check fired on the faster history (next tests), and blocked nothing
    assert found.pop("headline_has_not_regressed") is False
    assert all(found.values())
    md = materialized(result)
    assert md["quality"]["accuracy"] is None
    assert set(md) == {"provisioned_cluster", "deployed_model", "warmup_log",
                       "steady_state_request_log", "quality", "cost_explorer_bill", "derived_metrics",
                       "cost_per_1m_output_tokens", "benchmark_report"}
    assert md["steady_state_request_log"]["rows"] == 3 and md["warmup_log"]["rows"] == 1
    assert "EMULATED" in md["cost_per_1m_output_tokens"]["cost_per_1m"]
    con = duckdb.connect(str(tmp_path / "servingbench.duckdb"), read_only=True)
    rows = con.execute("SELECT step, window_cost_usd, output_tokens, cost_per_1m_output_usd, "
                       "bill_status, bill_source, source FROM cost_per_1m").fetchall()
    (run_id, partition), = con.execute("SELECT run_id, partition FROM runs").fetchall()
    head = con.execute("SELECT step, meets_slo, output_tok_s FROM headline").fetchall()
    con.close()
    # the clean run of tests/analysis: 9 tokens in a 0.4 s window at 55.04 USD/h
    ((step, cost, tokens, per_1m, status, bill_source, source),) = rows
    assert (step, tokens, status, bill_source, source) == ("c=2", 9, "final", "price_sheet", "emulated")
    assert cost == pytest.approx(55.04 * 0.4 / 3600, rel=1e-12)
    assert per_1m == pytest.approx(55.04 * 0.4 / 3600 / 9 * 1e6, rel=1e-12)
    assert head == [("c=2", True, pytest.approx(22.5))]
    assert partition == "p5-scout-bf16-tp8|2026-11-29"
    run_dir = tmp_path / "runs" / run_id
    assert (run_dir / "cost_per_1m.parquet").exists() and (run_dir / "gates.json").exists()


def test_report_asset_writes_the_report_plots_and_reconciliation(good_run):
    result, _, _ = good_run
    md = materialized(result)["benchmark_report"]
    run_dir = Path(md["report"]).parent
    assert md["report"] == str(run_dir / "report.html") and "EMULATED" in Path(md["report"]).read_text()
    plots = {k: v for k, v in md.items() if k.startswith("plot_")}
    assert {"plot_ttft_cdf", "plot_itl_cdf", "plot_scaling", "plot_server_ttft"} <= set(plots)
    assert all(Path(p).stat().st_size > 10_000 for p in plots.values())
    # reconciliation: written beside derived_metrics.parquet, flagged, in the metadata
    rec_json = json.loads((run_dir / "reconciliation.json").read_text())
    assert rec_json["flagged_steps"] == ["c=2"] == md["flagged_steps"]
    assert (rec_json["steps"][0]["client_tokens"], rec_json["steps"][0]["server_tokens"]) == (9, 12)
    # every cell is escaped (a name from a file never renders as markdown), so no bold marker
    assert "| c=2 | 9 | 12 | \\+33.33% | 3 | 3 | FLAGGED |" in md["reconciliation"]
    assert "derived_metrics.parquet" in {p.name for p in run_dir.iterdir()}


def test_regression_check_fires_as_a_warning_on_a_history_with_a_drop(good_run):
    # earlier runs were 1.5x faster and cheaper: this run's throughput fell by a third
    result, _, ids = good_run
    assert result.success  # non-blocking: the run and its report still complete
    assert "benchmark_report" in materialized(result)
    ev, meta = regression_check(result)
    assert not ev.passed and ev.severity == dg.AssetCheckSeverity.WARN
    assert meta["n_history"] == 4 and sorted(meta["history_run_ids"]) == ids
    assert meta["regressed_metrics"] == ["output_tok_s", "cost_per_1m_output_usd"]
    assert meta["output_tok_s_change"] == pytest.approx(1 / 1.5 - 1)
    assert meta["cost_per_1m_output_usd_change"] == pytest.approx(0.5)
    assert "REGRESSION" in ev.description


@pytest.mark.parametrize("fixture", sorted(BAD))
def test_each_bad_fixture_breaks_exactly_its_rule(fixture):
    # the job itself runs once, on a failing fixture (next test): every gate check is
    # blocking (test_definitions), so which gate fails decides where each one stops
    got = gate_checks(fixture)
    assert set(got) == set(REQUEST + BILL)
    assert [name for name, passed in got.items() if not passed] == [BAD[fixture]]


def test_a_bad_fixture_blocks_the_cost_table_at_its_check_with_the_evidence(tmp_path):
    result, _ = run_job(tmp_path, resources=replay_resources("other_account"))
    assert not result.success
    got = checks(result)
    # an emulated replay's quality is not applicable: reported unpassed (WARN), never a block
    got.pop("quality_matches_reference", None)
    assert got == gate_checks("other_account")
    assert [name for name, passed in got.items() if not passed] == ["bill_matches_run_scope"]
    md = materialized(result)
    assert "cost_per_1m_output_tokens" not in md and "derived_metrics" not in md
    assert not (tmp_path / "servingbench.duckdb").exists()
    (run_dir,) = list((tmp_path / "runs").iterdir())
    raw = {"manifest.json", "warmup_log.parquet", "steady_state_request_log.parquet",
           "chunk_log.parquet"}
    assert raw <= {p.name for p in run_dir.iterdir()}      # every raw record is kept
    assert not (run_dir / "cost_per_1m.parquet").exists()
    # the check's metadata carries the evidence
    (ev,) = [e.event_specific_data for e in result.all_events
             if e.event_type_value == "ASSET_CHECK_EVALUATION"
             and e.event_specific_data.check_name == "bill_matches_run_scope"]
    md = {k: v.value for k, v in ev.metadata.items()}
    assert md["rule"] == 5 and md["offending_rows"] == 1
    assert md["examples"] == ["2026-11-29T02:00:00.000000000Z"]
    assert "another account" in md["message"]


def test_preflight_refuses_a_model_that_does_not_fit_before_provisioning(tmp_path):
    cands = tmp_path / "c.yaml"
    cands.write_text("candidates:\n  - {name: p5-maverick-bf16, instance_type: p5.48xlarge, "
                     "model: meta-llama/Llama-4-Maverick-17B-128E-Instruct, precision: bf16, "
                     "tensor_parallel: 8}\n")
    from servingbench.pipelines.profiles import Settings

    result, _ = run_job(tmp_path, candidate="p5-maverick-bf16",
                        settings=Settings(data_dir=tmp_path, candidates_file=cands))
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = failure.event_specific_data.error.message
    assert "DOES NOT FIT" in message and "801.4 GB" in message
    assert not Path(tmp_path / "runs").exists()   # nothing was provisioned
