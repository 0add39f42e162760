"""The load pods' S3 policy (docs/policies/load-pods-s3.json) is a tested artifact: the code
a pod runs (the shard upload, runstore.put, and the meeting board) works as an identity
whose only permissions are that policy, on moto's server with IAM enforced
(tests/support/eks/iam.py), and nothing outside the run folders can be written or listed."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from servingbench.resources.storage import runstore
from servingbench.resources.storage.board import Board

from tests.support.eks import iam

ROOT = Path(__file__).resolve().parents[2]
ADMIN = {"Version": "2012-10-17",
         "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}


def pod_policy(bucket: str, prefix: str) -> dict:
    text = (ROOT / "docs/policies/load-pods-s3.json").read_text()
    return json.loads(text.replace("BUCKET", bucket).replace("PREFIX", prefix))


@pytest.fixture
def as_pod(s3_bucket, moto_server, monkeypatch):
    """(run prefix URI, switch(identity)) with IAM enforced from here on."""
    bucket, _, prefix = s3_bucket[len("s3://"):].partition("/")
    creds = {"pod": iam.identity(moto_server, "sb-loadpod", pod_policy(bucket, prefix)),
             "admin": iam.identity(moto_server, "sb-admin", ADMIN)}

    def switch(who: str) -> None:
        for k, v in creds[who].items():
            monkeypatch.setenv(k, v)

    switch("pod")
    with iam.enforce(monkeypatch):
        yield f"{s3_bucket}/runs/20261129T020000Z-r1", switch


def test_a_pod_uploads_its_shards_and_meets_the_others_under_the_policy(as_pod, tmp_path):
    run, switch = as_pod
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for name in ("steady_state_request_log.parquet", "worker.json"):
        (scratch / name).write_bytes(b"records of " + name.encode())
    runstore.put(scratch, run, {"steady_state_request_log.parquet":
                                "steady_state_request_log.pod-0.parquet",
                                "worker.json": "worker.pod-0.json"})
    board = Board(f"{run}/barrier")
    assert board.names("1-c4") == []          # the meeting's folder before anyone came
    board.put("1-c4/0.pod-0.1764381600000000000", b"")
    board.put("gone/1.pod-1", b"")
    assert board.names("1-c4") == ["0.pod-0.1764381600000000000"]
    assert iam.DENIED == []
    switch("admin")
    got = runstore.get(run, ["steady_state_request_log.pod-0.parquet", "worker.pod-0.json"],
                       tmp_path / "back")
    assert got == ["steady_state_request_log.pod-0.parquet", "worker.pod-0.json"]
    assert (tmp_path / "back" / "worker.pod-0.json").read_bytes() == b"records of worker.json"


def test_the_policy_allows_nothing_outside_the_run_folders(as_pod, s3_bucket, tmp_path):
    run, _ = as_pod
    (tmp_path / "x").write_bytes(b"x")
    with pytest.raises(OSError, match="(?i)access ?denied|forbidden"):
        runstore.put(tmp_path, f"{s3_bucket}/elsewhere", {"x": "x"})
    with pytest.raises(OSError, match="listing"):
        Board(s3_bucket).names("")              # the bucket's top, not a run folder
    fs, base = runstore.filesystem(run)
    with pytest.raises(OSError):
        fs.create_dir(base, recursive=True)     # HeadBucket: what the old upload asked first
    assert ("s3:ListBucket", f"arn:aws:s3:::{s3_bucket[5:].split('/')[0]}") in iam.DENIED
    assert isinstance(fs, pafs.S3FileSystem)


def test_a_pod_can_neither_forge_the_marker_nor_touch_a_published_run(as_pod, s3_bucket,
                                                                      tmp_path):
    """Pods write only where they write (the barrier, `_tmp/`, their own shard names): a
    compromised pod cannot overwrite or delete another run's results or forge its
    `_COMPLETE` marker."""
    run, switch = as_pod
    switch("admin")
    published = tmp_path / "published"
    published.mkdir()
    for name in ("manifest.json", "cost_per_1m.parquet"):
        (published / name).write_bytes(b"published " + name.encode())
    other = f"{s3_bucket}/runs/20261129T010000Z-other"
    runstore.publish(published, other)
    switch("pod")
    (tmp_path / "x").write_bytes(b"forged")
    for target, name in ((other, "_COMPLETE"), (other, "cost_per_1m.parquet"),
                         (other, "manifest.json"), (run, "_COMPLETE"), (run, "gates.json")):
        with pytest.raises(OSError, match="(?i)access ?denied|forbidden"):
            runstore.put(tmp_path, target, {"x": name})
    fs, base = runstore.filesystem(other)
    for name in ("_COMPLETE", "cost_per_1m.parquet"):
        with pytest.raises(OSError, match="(?i)access ?denied|forbidden"):
            fs.delete_file(f"{base}/{name}")
    switch("admin")
    assert runstore.marker(other)["status"] == "accepted"
    assert fs.open_input_stream(f"{base}/cost_per_1m.parquet").read() == \
        b"published cost_per_1m.parquet"


def test_a_shard_a_pod_plants_in_a_published_run_is_never_read(as_pod, s3_bucket, tmp_path):
    """The policy lets a pod put its shard names under any run's prefix (it cannot tell runs
    apart); a published run's readers take only the files its marker lists, and the marker
    lists the publisher's own folder, never whatever else is under the prefix."""
    import shutil

    run, switch = as_pod
    switch("admin")
    published = tmp_path / "published"
    shutil.copytree(ROOT / "tests" / "fixtures" / "good", published)
    other = f"{s3_bucket}/runs/20261129T010000Z-other"
    runstore.publish(published, other)
    own = sorted(p.name for p in published.iterdir())
    switch("pod")
    planted = {"chunk_log.parquet": "chunk_log.pod-7.parquet",
               "steady_state_request_log.parquet": "steady_state_request_log.pod-7.parquet"}
    runstore.put(published, other, planted)  # allowed: the names a pod writes
    assert iam.DENIED == []
    switch("admin")
    assert sorted(runstore.marker(other)["files"]) == own
    back = runstore.fetch(other, tmp_path / "back")
    assert sorted(p.name for p in back.iterdir()) == own
    # published again (a re-analysis), the planted shards stay unlisted
    runstore.publish(published, other, names=["manifest.json"])
    assert sorted(runstore.marker(other)["files"]) == own
