"""peer_import_job: a folder or an S3 prefix of peer results (here the vLLM fixture, and a
damaged copy) imported and analyzed by a real Dagster run; S3 is moto's server on
127.0.0.1."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest
from servingbench.pipelines.definitions import build_definitions
from servingbench.pipelines.profiles import Settings
from servingbench.resources.contract import manifest as mf

from tests.support.eks.aws import fresh_s3_bucket

pytestmark = pytest.mark.slow  # real Dagster runs (and moto's server): left out of `make check`

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "peers" / "vllm_bench_serve_0.33.0.json"


@pytest.fixture(autouse=True)
def _import_root(tmp_path, monkeypatch):
    """The job reads only under its import roots: here the test's own folder."""
    monkeypatch.setenv("SERVINGBENCH_IMPORT_ROOTS", str(tmp_path))


def results(folder: Path) -> Path:
    folder.mkdir(parents=True)
    shutil.copy(FIXTURE, folder / "a.json")
    doc = json.loads(FIXTURE.read_text())
    doc["itls"].pop()  # one entry short: a cut file
    (folder / "sub").mkdir()
    (folder / "sub" / "b.json").write_text(json.dumps(doc))
    return folder


def run_job(data_dir: Path, source: str):
    defs = build_definitions(Settings(data_dir=data_dir))
    config = {"ops": {"import_peer_results": {"config": {"peer": "vllm", "source": source}}}}
    return defs.resolve_job_def("peer_import_job").execute_in_process(
        run_config=config, instance=dg.DagsterInstance.ephemeral())


def check(result, data_dir: Path) -> None:
    assert result.success
    rows = {r["result"]: r for r in result.output_for_node("import_peer_results")}
    assert rows["a.json"]["outcome"] == "accepted"
    assert rows["sub/b.json"]["outcome"].startswith("malformed: ")
    assert "result.itls: 3 entries" in rows["sub/b.json"]["outcome"]
    run_dir = Path(rows["a.json"]["run_dir"])
    assert run_dir.parent == data_dir / "runs"
    assert mf.load(run_dir / "manifest.json")["import"]["peer"] == "vllm"
    assert (run_dir / "derived_metrics.parquet").exists() and (run_dir / "gates.json").exists()


def test_the_job_imports_and_analyzes_every_result_of_a_folder(tmp_path) -> None:
    data = tmp_path / "data"
    check(run_job(data, str(results(tmp_path / "drop"))), data)
    # run again over the same folder: nothing is overwritten
    again = {r["result"]: r for r in run_job(data, str(tmp_path / "drop"))
             .output_for_node("import_peer_results")}
    assert again["a.json"]["outcome"] == "already imported"


def test_the_job_reads_an_s3_prefix(tmp_path, moto_server, monkeypatch) -> None:
    import boto3

    prefix = fresh_s3_bucket(moto_server, monkeypatch)
    monkeypatch.setenv("SERVINGBENCH_IMPORT_ROOTS", f"{tmp_path},{prefix}/peer-results")
    local = results(tmp_path / "drop")
    s3 = boto3.client("s3")
    bucket, key = prefix[len("s3://"):].split("/", 1)
    for name in ("a.json", "sub/b.json"):
        s3.upload_file(str(local / name), bucket, f"{key}/peer-results/{name}")
    data = tmp_path / "data"
    check(run_job(data, f"{prefix}/peer-results"), data)


def test_a_hostile_file_is_its_own_outcome_and_the_files_after_it_still_import(tmp_path) -> None:
    drop = tmp_path / "drop"
    drop.mkdir()
    doc = json.loads(FIXTURE.read_text())
    bad = {"0-nested.json": "[" * 100_000,
           "1-overflow.json": json.dumps({**doc, "start_times": [1e308, *doc["start_times"][1:]]}),
           "2-itls.json": json.dumps({**doc, "itls": [["x"], *doc["itls"][1:]]})}
    for name, text in bad.items():
        (drop / name).write_text(text)
    shutil.copy(FIXTURE, drop / "9-good.json")
    data = tmp_path / "data"
    result = run_job(data, str(drop))
    assert result.success
    rows = {r["result"]: r for r in result.output_for_node("import_peer_results")}
    for name in bad:
        assert rows[name]["outcome"].startswith("malformed: "), rows[name]
        assert name in rows[name]["outcome"]
    assert rows["9-good.json"]["outcome"] == "accepted"


def _upload(moto_server, monkeypatch, files: dict[str, Path]) -> str:
    import boto3

    prefix = fresh_s3_bucket(moto_server, monkeypatch)
    bucket, key = prefix[len("s3://"):].split("/", 1)
    for name, local in files.items():
        boto3.client("s3").upload_file(str(local), bucket, f"{key}/drop/{name}")
    monkeypatch.setenv("SERVINGBENCH_IMPORT_ROOTS", f"{prefix}/drop")
    return f"{prefix}/drop"


def test_a_result_imported_before_is_not_downloaded_again(tmp_path, moto_server,
                                                          monkeypatch) -> None:
    from servingbench.assets import peer_import

    source = _upload(moto_server, monkeypatch, {"a.json": FIXTURE, "notes/readme.txt": FIXTURE})
    fetched: list[list[str]] = []
    real_get = peer_import.get
    monkeypatch.setattr(peer_import, "get",
                        lambda uri, names, local: fetched.append(list(names)) or
                        real_get(uri, names, local))
    data = tmp_path / "data"
    first = {r["result"]: r for r in run_job(data, source).output_for_node("import_peer_results")}
    assert first["a.json"]["outcome"] == "accepted"
    assert fetched == [["a.json"]]  # what is no peer's result is not downloaded either
    again = {r["result"]: r for r in run_job(data, source).output_for_node("import_peer_results")}
    assert again["a.json"]["outcome"] == "already imported"
    assert fetched[-1] == []  # decided from the listing and the ledger: nothing fetched


def test_a_prefix_past_its_caps_is_refused_and_a_big_file_is_not_fetched(
        tmp_path, moto_server, monkeypatch) -> None:
    from servingbench.assets import peer_prefix
    from servingbench.resources.peers import records

    source = _upload(moto_server, monkeypatch, {"a.json": FIXTURE, "b.json": FIXTURE})
    monkeypatch.setattr(peer_prefix, "MAX_PREFIX_FILES", 1)
    defs = build_definitions(Settings(data_dir=tmp_path / "data"))
    result = defs.resolve_job_def("peer_import_job").execute_in_process(
        run_config={"ops": {"import_peer_results": {"config": {"peer": "vllm",
                                                               "source": source}}}},
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert not result.success
    failure = result.failure_data_for_node("import_peer_results").error.message
    assert "more than 1 objects; import a narrower prefix" in failure
    monkeypatch.setattr(peer_prefix, "MAX_PREFIX_FILES", 100)
    monkeypatch.setattr(records, "MAX_FILE_BYTES", 1024)
    rows = {r["result"]: r for r in run_job(tmp_path / "data", source)
            .output_for_node("import_peer_results")}
    assert rows["a.json"]["outcome"] == ("malformed: a.json: larger than 1024 bytes; "
                                         "not downloaded")
