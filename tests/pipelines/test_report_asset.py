"""benchmark_report and the nightly regression check, through a real in-process
benchmark_job on the replay fixtures: the report asset writes the run's HTML, plots and
reconciliation.json with them as metadata; `headline_has_not_regressed` (WARN,
non-blocking) fires on a history with a drop, and the run still succeeds. Its function
stays quiet on a stable history (one job run proves the wiring; the function the rest)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assets.report import reconciliation_md, regression
from resources.analysis.analyze import analyze_run
from resources.contract import manifest as mf
from tests.support.chain import FIXTURES, materialized, replay_resources, run_job
from tests.support.replay import ReplayLoad

pytestmark = pytest.mark.slow  # a chain, a job or processes: not in `make check`

CANDIDATE = "p5-scout-bf16-tp8"


@pytest.fixture(scope="module")
def analyzed_good(tmp_path_factory) -> Path:
    """The `good` fixture as the replayed run analyses it (same analyzer, same SLO)."""
    src = tmp_path_factory.mktemp("src") / "good"
    shutil.copytree(FIXTURES / "good", src)
    analyze_run(src, slos=[(2.0, 0.1)])
    return src


@pytest.fixture(scope="module")
def fixture_headline(analyzed_good) -> pa.Table:
    """The headline the replayed `good` fixture yields."""
    return pq.read_table(analyzed_good / "headline.parquet")


def write_history(runs_dir: Path, headline: pa.Table, factors: list[float]) -> list[str]:
    """Earlier runs of the candidate: manifest + headline, throughput x factor and cost / factor."""
    base = mf.load(FIXTURES / "good" / "manifest.json")
    ids = []
    for day, f in enumerate(factors, start=20):
        run_id = f"history-{day}"
        d = runs_dir / run_id
        d.mkdir(parents=True)
        mf.dump(dict(base, run_id=run_id, created_at=f"2026-11-{day}T02:00:00.000000000Z"),
                d / "manifest.json")
        row = headline.to_pylist()[0]
        row.update(run_id=run_id, output_tok_s=row["output_tok_s"] * f,
                   cost_per_1m_output_usd=row["cost_per_1m_output_usd"] / f)
        pq.write_table(pa.Table.from_pylist([row], schema=headline.schema), d / "headline.parquet")
        ids.append(run_id)
    return ids


def recording_with_server_metrics(tmp_path: Path) -> Path:
    """The `good` fixture plus recorded engine counters: 12 generated tokens where the
    client counted 9 (a deliberately wrong server count) for its only step, c=2."""
    rec = tmp_path / "recording"
    shutil.copytree(FIXTURES / "good", rec)
    step = {"step": "c=2", "steps": ["c=2"], "available": True, "reason": None,
            "counter_reset": False, "generation_tokens": 12.0, "prompt_tokens": 48.0,
            "ttft_count": 3.0, "ttft_sum": 0.3, "request_success": {"stop": 0.0, "length": 3.0},
            "requests_finished": 3.0, "requests_ok": 3.0,
            "ttft_buckets": [["0.1", 1.0], ["0.25", 3.0], ["+Inf", 3.0]]}
    (rec / "server_metrics.json").write_text(json.dumps(
        {"schema_version": 1, "endpoint": "http://127.0.0.1:1/metrics", "available": True,
         "reason": None, "emulated": True, "steps": [step]}))
    return rec


def regression_check(result):
    (ev,) = [e.event_specific_data for e in result.all_events
             if e.event_type_value == "ASSET_CHECK_EVALUATION"
             and e.event_specific_data.check_name == "headline_has_not_regressed"]
    return ev, {k: v.value for k, v in ev.metadata.items()}


def test_report_asset_and_the_check_firing_as_a_warning_on_a_history_with_a_drop(
        tmp_path, fixture_headline):
    # earlier runs were 1.5x faster and cheaper: this run's throughput fell by a third
    ids = write_history(tmp_path / "runs", fixture_headline, [1.5, 1.5, 1.45, 1.55])
    rec = recording_with_server_metrics(tmp_path)
    resources = replay_resources("good") | {"load_generator": ReplayLoad(rec)}
    result, _ = run_job(tmp_path, resources=resources)
    assert result.success  # non-blocking: the run and its report still complete
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
    assert "| c=2 | 9 | 12 | +33.33% | 3 | 3 | **FLAGGED** |" in md["reconciliation"]
    assert "derived_metrics.parquet" in {p.name for p in run_dir.iterdir()}
    # the regression check: fired, a warning only, against the four earlier runs
    ev, meta = regression_check(result)
    assert not ev.passed and ev.severity == dg.AssetCheckSeverity.WARN
    assert meta["n_history"] == 4 and sorted(meta["history_run_ids"]) == ids
    assert meta["regressed_metrics"] == ["output_tok_s", "cost_per_1m_output_usd"]
    assert meta["output_tok_s_change"] == pytest.approx(1 / 1.5 - 1)
    assert meta["cost_per_1m_output_usd_change"] == pytest.approx(0.5)
    assert "REGRESSION" in ev.description


def test_the_check_is_quiet_on_a_stable_history(tmp_path, analyzed_good, fixture_headline):
    """The check's own function on the analysed `good` run: the job run above proves how its
    result becomes the check's outcome, severity and metadata; a second job run would prove
    that again."""
    ids = write_history(tmp_path / "runs", fixture_headline, [1.0, 1.03, 0.97])
    res = regression(analyzed_good, tmp_path / "runs")
    assert res.passed
    meta = res.metadata
    assert meta["n_history"] == 3 and sorted(meta["history_run_ids"]) == ids
    assert meta["regressed_metrics"] == [] and meta["output_tok_s_change"] == pytest.approx(0.0)
    assert "no regression" in res.summary()


def test_a_run_without_server_counters_says_so():
    # the report asset's reconciliation text when the folder has no server_metrics.json
    # (the job run above has one; without it the report writes no reconciliation.json:
    # resources/report/reconciliation.reconcile_run)
    assert reconciliation_md(None).startswith("no server_metrics.json")
