"""Run folders on S3 (moto's server) are safe and self-healing: a listed key never names a
file outside the destination, a write that fails midway never leaves a truncated object
under its real name, a publish that died halfway is completed by `servingbench publish`,
and one malformed run never breaks the index of the others."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import boto3
import pytest
from servingbench.pipelines.cli import main as cli
from servingbench.resources.storage import runstore

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _s3(s3_bucket: str):
    import os

    bucket, _, prefix = s3_bucket[len("s3://"):].partition("/")
    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                          region_name=os.environ["AWS_REGION"])
    return client, bucket, prefix


def _published(s3_bucket: str, tmp_path: Path, run_id: str) -> str:
    folder = tmp_path / run_id
    shutil.copytree(FIXTURES / "good", folder)
    uri = f"{s3_bucket}/runs/{run_id}"
    runstore.publish(folder, uri)
    return uri


@pytest.mark.parametrize("key", ["../../x/evil.txt", "a//b.txt", "/abs.txt"])
def test_a_listed_key_that_is_not_a_plain_path_is_refused_naming_it(s3_bucket, tmp_path, capsys,
                                                                      key):
    uri = _published(s3_bucket, tmp_path, "run-k")
    client, bucket, prefix = _s3(s3_bucket)
    client.put_object(Bucket=bucket, Key=f"{prefix}/runs/run-k/{key}", Body=b"evil")
    listed = [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]]
    assert f"{prefix}/runs/run-k/{key}" in listed  # the store really holds that key
    dest = tmp_path / "deep" / "er" / "back"
    with pytest.raises(runstore.RunStoreError, match="not a plain relative path"):
        runstore.fetch(uri, dest)
    assert not (tmp_path / "deep" / "x").exists() and not list(tmp_path.rglob("evil.txt"))
    assert not dest.exists()  # refused before one file was written
    assert cli(["analyze", uri]) == 2
    err = capsys.readouterr().err
    assert "not a plain relative path" in err and "Traceback" not in err


def test_keys_given_to_the_store_are_checked_too(s3_bucket, tmp_path):
    folder = tmp_path / "run-p"
    folder.mkdir()
    (folder / "a.txt").write_text("a")
    for bad in ("../a.txt", "x/../../a.txt", "", "/etc/a.txt"):
        with pytest.raises(runstore.RunStoreError, match="refused"):
            runstore.put(folder, f"{s3_bucket}/runs/run-p", {"a.txt": bad})
        with pytest.raises(runstore.RunStoreError, match="refused"):
            runstore.get(f"{s3_bucket}/runs/run-p", [bad], tmp_path / "back")


def test_an_error_mid_copy_never_commits_a_truncated_object(s3_bucket, tmp_path, monkeypatch):
    uri = _published(s3_bucket, tmp_path, "run-t")
    before = runstore.get(uri, ["manifest.json"], tmp_path / "before")
    old = (tmp_path / "before" / "manifest.json").read_bytes()
    folder = tmp_path / "run-t"
    (folder / "manifest.json").write_bytes(old + b" " * 100)

    real = runstore._write

    def dying(fs, base, name, fill):
        def half(out):
            out.write(b'{"half": ')
            raise OSError("connection reset mid-copy")
        return real(fs, base, name, half if name == "manifest.json" else fill)

    monkeypatch.setattr(runstore, "_write", dying)
    with pytest.raises(OSError, match="mid-copy"):
        runstore.publish(folder, uri)
    monkeypatch.setattr(runstore, "_write", real)
    assert before == ["manifest.json"]
    assert runstore.get(uri, ["manifest.json"], tmp_path / "after") == ["manifest.json"]
    assert (tmp_path / "after" / "manifest.json").read_bytes() == old  # untouched, not half
    client, bucket, prefix = _s3(s3_bucket)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]]
    assert not [k for k in keys if "/_tmp/" in k and not k.endswith("/")]  # no leftover
    assert not runstore.is_complete(uri)  # the marker went first and stays away


def test_a_publish_that_died_halfway_is_completed_by_running_it_again(s3_bucket, tmp_path,
                                                                       monkeypatch, capsys):
    folder = tmp_path / "run-h"
    shutil.copytree(FIXTURES / "good", folder)
    uri = f"{s3_bucket}/runs/run-h"
    real, calls = runstore._copy, []

    def dies_on_the_third(*args):
        calls.append(args)
        if len(calls) == 3:
            raise OSError("the pod was evicted")
        real(*args)

    monkeypatch.setattr(runstore, "_copy", dies_on_the_third)
    assert cli(["publish", str(folder), uri, "--status", "accepted"]) == 1
    assert "run it again" in capsys.readouterr().err
    monkeypatch.setattr(runstore, "_copy", real)
    assert runstore.complete_runs(f"{s3_bucket}/runs") == []
    with pytest.raises(runstore.RunStoreError, match="servingbench publish"):
        runstore.fetch(uri, tmp_path / "refused")
    assert cli(["publish", str(folder), uri]) == 0  # no gates.json: published as failed
    assert runstore.complete_runs(f"{s3_bucket}/runs") == ["run-h"]
    assert runstore.marker(uri)["status"] == "failed"
    back = runstore.fetch(uri, tmp_path / "back")
    assert sorted(p.name for p in back.iterdir()) == sorted(p.name for p in folder.iterdir())


def test_publish_refuses_what_is_not_a_run_or_not_its_prefix(s3_bucket, tmp_path, capsys):
    folder = tmp_path / "run-x"
    shutil.copytree(FIXTURES / "good", folder)
    assert cli(["publish", str(folder), f"{s3_bucket}/runs/run-y"]) == 2
    assert "run-x" in capsys.readouterr().err
    assert cli(["publish", str(folder), str(tmp_path / "runs" / "run-x")]) == 2
    assert "expected s3://" in capsys.readouterr().err
    assert cli(["publish", str(tmp_path), f"{s3_bucket}/runs/{tmp_path.name}"]) == 2
    assert "no manifest.json" in capsys.readouterr().err
    (folder / "gates.json").write_text('{"not": "a list"}')
    assert cli(["publish", str(folder), f"{s3_bucket}/runs/run-x"]) == 2
    assert "gates.json" in capsys.readouterr().err
    # the analyzer's gates, read by the contract's one reader (as the report reads them)
    gate = {"name": "", "offending_rows": 0, "examples": [], "message": ""}
    (folder / "gates.json").write_text(json.dumps([{**gate, "rule": 1, "passed": True},
                                                   {**gate, "rule": 4, "passed": False}]))
    assert cli(["publish", str(folder), f"{s3_bucket}/runs/run-x"]) == 0
    assert runstore.marker(f"{s3_bucket}/runs/run-x")["status"] == "rejected"


def test_one_malformed_run_never_breaks_the_index_of_the_others(s3_bucket, tmp_path):
    for run_id in ("run-a", "run-b", "run-c", "run-d"):
        _published(s3_bucket, tmp_path, run_id)
    client, bucket, prefix = _s3(s3_bucket)
    runs = f"{prefix}/runs"
    client.put_object(Bucket=bucket, Key=f"{runs}/run-b/_COMPLETE", Body=b"\xff not json")
    client.put_object(Bucket=bucket, Key=f"{runs}/run-c/manifest.json", Body=b"[1, 2]")
    client.put_object(Bucket=bucket, Key=f"{runs}/run-d/manifest.json",
                      Body=json.dumps({"candidate": {"nested": 1}, "source": 7}).encode())
    con = runstore.catalog(f"{s3_bucket}/runs")
    rows = con.execute("SELECT run_id, status, candidate, source FROM runs ORDER BY run_id").fetchall()
    assert rows == [("run-a", "accepted", "p5-scout-bf16-tp8", "emulated"),
                    ("run-b", None, "p5-scout-bf16-tp8", "emulated"),
                    ("run-c", "accepted", None, None),
                    ("run-d", "accepted", None, None)]
    with pytest.raises(runstore.RunStoreError, match="malformed marker"):
        runstore.marker(f"{s3_bucket}/runs/run-b")


def test_a_deeply_nested_manifest_or_marker_never_breaks_the_index(s3_bucket, tmp_path):
    """`[` nested 100,000 deep: json raises RecursionError, not ValueError; the index must
    still list every run, the bad one with its fields empty."""
    for run_id in ("run-a", "run-b", "run-c"):
        _published(s3_bucket, tmp_path, run_id)
    client, bucket, prefix = _s3(s3_bucket)
    runs = f"{prefix}/runs"
    client.put_object(Bucket=bucket, Key=f"{runs}/run-b/manifest.json", Body=b"[" * 100_000)
    client.put_object(Bucket=bucket, Key=f"{runs}/run-c/_COMPLETE", Body=b'{"a":' * 100_000)
    con = runstore.catalog(f"{s3_bucket}/runs")
    rows = con.execute("SELECT run_id, status, candidate, manifest IS NULL FROM runs "
                       "ORDER BY run_id").fetchall()
    assert rows == [("run-a", "accepted", "p5-scout-bf16-tp8", False),
                    ("run-b", "accepted", None, True),
                    ("run-c", None, "p5-scout-bf16-tp8", False)]
    with pytest.raises(runstore.RunStoreError, match="malformed marker"):
        runstore.marker(f"{s3_bucket}/runs/run-c")


def test_a_remote_analyze_that_died_mid_publish_is_completed_from_the_folder_itself(
        s3_bucket, tmp_path, monkeypatch, capsys):
    """`servingbench analyze s3://…` fetches into a temporary folder that dies with it: the
    only copy left is the unmarked folder on S3. `analyze --complete` pulls that folder
    without its marker, analyzes it again and publishes it, marker last."""
    uri = _published(s3_bucket, tmp_path, "run-m")
    real, calls = runstore._copy, []

    def dies_publishing(*args):
        calls.append(args)
        if len(calls) > 1 and args[0].type_name == "local":  # the second upload of the analyze
            raise OSError("the pod was evicted")
        real(*args)

    monkeypatch.setattr(runstore, "_copy", dies_publishing)
    assert cli(["analyze", uri]) == 2
    monkeypatch.setattr(runstore, "_copy", real)
    assert runstore.marker(uri) is None  # taken away first, never written back
    capsys.readouterr()
    assert cli(["analyze", uri]) == 2  # a folder without its marker is refused ...
    assert "analyze --complete" in capsys.readouterr().err  # ... saying how to complete it
    assert cli(["analyze", "--complete", uri]) == 0
    assert runstore.marker(uri)["status"] == "accepted"
    back = runstore.fetch(uri, tmp_path / "back")
    assert {"gates.json", "cost_per_1m.parquet", "manifest.json"} <= {p.name for p in back.iterdir()}
    # a folder that is no run (no manifest) is not completed into one
    assert cli(["analyze", "--complete", f"{s3_bucket}/runs/nothing-here"]) == 2
    assert runstore.marker(f"{s3_bucket}/runs/nothing-here") is None
