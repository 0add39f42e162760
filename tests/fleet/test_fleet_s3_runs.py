"""Run folders on S3 (moto's server): published with a completion marker written last,
listed only when complete, analyzed in place with the same outputs as on disk, and
queryable across runs by DuckDB through pyarrow datasets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from servingbench.pipelines.cli import main as cli
from servingbench.resources.storage import runstore

pytestmark = pytest.mark.slow  # a chain, a job or processes: not in `make check`

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
OUTPUTS = ("derived_metrics.parquet", "cost_per_1m.parquet", "headline.parquet")


def _tables(folder: Path) -> dict:
    return {n: pq.read_table(folder / n).to_pylist() for n in OUTPUTS}


def _same(a: dict, b: dict) -> bool:
    """Equal tables, floats to the last few bits: DuckDB sums in parallel, so two analyses
    of one folder may differ in the order of additions, never in anything else."""
    def norm(v):
        if isinstance(v, float):
            return pytest.approx(v, rel=1e-12, abs=1e-15)
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        if isinstance(v, list):
            return [norm(x) for x in v]
        return v
    return norm(a) == b


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory) -> Path:
    """The good fixture analyzed once on disk: the reference the analysis on S3 must
    reproduce, and the finished folder the listing and query tests publish copies of (an
    analysis of a copy is the same analysis; only the S3 side is what those tests prove)."""
    disk = tmp_path_factory.mktemp("disk") / "run-good"
    shutil.copytree(FIXTURES / "good", disk)
    assert cli(["analyze", str(disk)]) == 0
    return disk


def test_analyze_on_s3_gives_the_same_outputs_as_on_disk(analyzed, s3_bucket, tmp_path, capsys):
    disk = analyzed
    capsys.readouterr()
    raw = tmp_path / "raw"
    shutil.copytree(FIXTURES / "good", raw)
    uri = f"{s3_bucket}/runs/run-good"
    runstore.publish(raw, uri)
    assert cli(["analyze", uri]) == 0
    assert uri in capsys.readouterr().out
    back = runstore.fetch(uri, tmp_path / "back")
    assert _same(_tables(back), _tables(disk))
    assert json.loads((back / "gates.json").read_text()) == json.loads(
        (disk / "gates.json").read_text())
    assert runstore.is_complete(uri)


def test_a_listing_skips_a_folder_without_its_marker(s3_bucket, tmp_path, capsys):
    runs = f"{s3_bucket}/runs"
    for run_id in ("run-a", "run-b"):
        folder = tmp_path / run_id
        shutil.copytree(FIXTURES / "good", folder)
        runstore.publish(folder, f"{runs}/{run_id}")
    # a run still being written: its files are there, its marker is not
    fs, base = runstore.filesystem(f"{runs}/run-half")
    with fs.open_output_stream(f"{base}/manifest.json") as out:
        out.write((FIXTURES / "good" / "manifest.json").read_bytes())
    assert runstore.complete_runs(runs) == ["run-a", "run-b"]
    assert cli(["analyze", f"{runs}/run-half"]) == 2
    assert "no _COMPLETE marker" in capsys.readouterr().err


def test_duckdb_queries_the_runs_on_s3_through_pyarrow_datasets(analyzed, s3_bucket, tmp_path):
    runs = f"{s3_bucket}/runs"
    for run_id in ("run-a", "run-b"):
        folder = tmp_path / run_id
        shutil.copytree(analyzed, folder)
        runstore.publish(folder, f"{runs}/{run_id}")
    con = duckdb.connect()
    con.register("headline", runstore.scan(runs, "headline.parquet"))
    rows = con.execute("SELECT count(*) FROM headline").fetchall()[0][0]
    one = len(pq.read_table(tmp_path / "run-a" / "headline.parquet"))
    assert rows == 2 * one > 0


def test_the_endpoint_comes_from_the_standard_variables():
    fs, path = runstore.filesystem("s3://b/p/runs", env={
        "AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:2",
        "AWS_REGION": "eu-west-1"})
    settings = fs.__reduce__()[1][0]  # the constructor's arguments, as pickling keeps them
    assert path == "b/p/runs"
    assert (settings["endpoint_override"], settings["scheme"], settings["region"]) == (
        "127.0.0.1:2", "http", "eu-west-1")
    fs, _ = runstore.filesystem("s3://b/p", env={"AWS_ENDPOINT_URL": "http://127.0.0.1:1"})
    assert fs.__reduce__()[1][0]["endpoint_override"] == "127.0.0.1:1"


def test_a_local_chain_run_publishes_its_folder_to_s3(s3_bucket, tmp_path, capsys):
    """The whole chain (emulator as the engine) with SERVINGBENCH_DATA_URI set: the finished
    folder lands on S3 with its marker, and analyzing it there reproduces the run's tables."""
    from servingbench.pipelines.profiles import Settings
    from servingbench.resources.loadgen.generator import LoadGenerator

    from tests.support.chain import materialized, run_job

    settings = Settings(data_dir=tmp_path / "staging", time_scale=0.2, cold_start_s=0.2,
                        data_uri=s3_bucket,
                        load=LoadGenerator(concurrency=(1,), requests_per_step=4,
                                          warmup_requests=1, output_tokens=8, input_tokens=32))
    result, _ = run_job(tmp_path, settings=settings)
    assert result.success
    published = materialized(result)["benchmark_report"]["published"]
    run_id = Path(materialized(result)["provisioned_cluster"]["run_dir"]).name
    assert published == f"{s3_bucket}/runs/{run_id}"
    assert runstore.complete_runs(f"{s3_bucket}/runs") == [run_id]
    local = tmp_path / "staging" / "runs" / run_id
    assert cli(["analyze", published]) == 0
    back = runstore.fetch(published, tmp_path / "back")
    assert _same(_tables(back), _tables(local))
    assert (back / "manifest.json").read_text() == (local / "manifest.json").read_text()


def test_a_data_uri_that_is_not_s3_is_a_clear_error(tmp_path):
    import pytest
    from servingbench.pipelines.config import ConfigError
    from servingbench.pipelines.definitions import build_definitions
    from servingbench.pipelines.profiles import Settings

    with pytest.raises(ConfigError, match=r"SERVINGBENCH_DATA_URI='gs://b/p': expected s3://"):
        build_definitions(Settings(data_dir=tmp_path, data_uri="gs://b/p"))


def test_rejected_and_failed_runs_are_published_with_their_status(s3_bucket, tmp_path):
    """A run a gate rejected keeps its raw records on S3 (gates.json, no cost tables); a
    run that failed mid-chain is published as failed; both behind the marker."""
    from servingbench.pipelines.profiles import Settings
    from servingbench.resources.loadgen import LoadError

    from tests.support.chain import replay_resources, run_job
    from tests.support.replay import ReplayLoad

    runs = f"{s3_bucket}/runs"
    settings = Settings(data_dir=tmp_path / "a", data_uri=s3_bucket)
    result, _ = run_job(tmp_path / "a", resources=replay_resources("other_account"),
                        settings=settings)
    assert not result.success
    (rejected,) = runstore.complete_runs(runs)
    assert runstore.marker(f"{runs}/{rejected}")["status"] == "rejected"
    back = runstore.fetch(f"{runs}/{rejected}", tmp_path / "rejected")
    assert (back / "steady_state_request_log.parquet").exists() and (back / "gates.json").exists()
    assert not (back / "cost_per_1m.parquet").exists()

    class Broken(ReplayLoad):
        def run(self, *args, **kwargs):
            raise LoadError("the engine went away")

    broken = replay_resources("good") | {"load_generator": Broken(FIXTURES / "good")}
    result, _ = run_job(tmp_path / "b", resources=broken,
                        settings=Settings(data_dir=tmp_path / "b", data_uri=s3_bucket))
    assert not result.success
    (failed,) = set(runstore.complete_runs(runs)) - {rejected}
    assert runstore.marker(f"{runs}/{failed}")["status"] == "failed"
    assert runstore.get(f"{runs}/{failed}", ["manifest.json"], tmp_path / "f") == ["manifest.json"]


def test_an_update_takes_the_marker_away_while_it_rewrites(s3_bucket, tmp_path, monkeypatch):
    uri = f"{s3_bucket}/runs/run-u"
    folder = tmp_path / "run-u"
    shutil.copytree(FIXTURES / "good", folder)
    runstore.publish(folder, uri)
    seen = []
    real_copy = runstore._copy

    def copy(*args):  # what a reader listing the runs sees during the update
        seen.append(runstore.complete_runs(f"{s3_bucket}/runs"))
        real_copy(*args)

    monkeypatch.setattr(runstore, "_copy", copy)
    runstore.publish(folder, uri, ["manifest.json"], status="rejected", drop=["bill.parquet"])
    assert seen == [[]]
    assert runstore.complete_runs(f"{s3_bucket}/runs") == ["run-u"]
    assert runstore.marker(uri)["status"] == "rejected"
    assert runstore.get(uri, ["bill.parquet"], tmp_path / "x") == []


def test_the_run_index_and_cost_table_are_queryable_from_any_pod(analyzed, s3_bucket, tmp_path):
    """What the DuckDB file of one pod held, read from the published runs: `runs` (with
    each run's status) and the cross-run tables, in a fresh process-local DuckDB."""
    runs = f"{s3_bucket}/runs"
    for run_id, status in (("run-a", "accepted"), ("run-r", "rejected")):
        folder = tmp_path / run_id
        shutil.copytree(analyzed, folder)
        if status == "rejected":  # a rejected run has no cost tables
            for name in ("cost_per_1m.parquet", "headline.parquet"):
                (folder / name).unlink()
        runstore.publish(folder, f"{runs}/{run_id}", status=status)
    fs, base = runstore.filesystem(f"{runs}/run-half")  # no marker: not in the index
    with fs.open_output_stream(f"{base}/manifest.json") as out:
        out.write((FIXTURES / "good" / "manifest.json").read_bytes())
    con = runstore.catalog(runs)
    assert con.execute("SELECT run_id, status, candidate FROM runs ORDER BY run_id").fetchall() == [
        ("run-a", "accepted", "p5-scout-bf16-tp8"), ("run-r", "rejected", "p5-scout-bf16-tp8")]
    one = len(pq.read_table(tmp_path / "run-a" / "cost_per_1m.parquet"))
    assert con.execute("SELECT count(*) FROM cost_per_1m").fetchall()[0][0] == one > 0
    steps = len(pq.read_table(tmp_path / "run-a" / "derived_metrics.parquet"))
    assert con.execute("SELECT count(*) FROM derived_metrics").fetchall()[0][0] == 2 * steps
