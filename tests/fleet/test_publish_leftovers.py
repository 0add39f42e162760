"""What a killed run leaves in its folder is never published: the temp files of writes that
were cut (`.events.parquet.<random>.tmp`, the disk reserve's `.reserve.<random>.tmp`) stay
behind; the run's own files go, and the marker lists only them."""

from __future__ import annotations

import shutil
from pathlib import Path

from servingbench.pipelines.cli import main as cli
from servingbench.resources.storage import runstore

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LEFTOVERS = (".events.parquet.k3j2x9.tmp", ".reserve.a1b2c3.tmp", ".manifest.json.zz1.tmp")


def test_temp_files_of_a_killed_write_are_not_published(s3_bucket, tmp_path):
    folder = tmp_path / "run-t"
    shutil.copytree(FIXTURES / "good", folder)
    for name in LEFTOVERS:
        (folder / name).write_bytes(b"half a file")
    uri = f"{s3_bucket}/runs/run-t"
    assert cli(["publish", str(folder), uri]) == 0
    listed = runstore.marker(uri)["files"]
    assert listed and not [n for n in listed if n.endswith(".tmp")]
    back = runstore.fetch(uri, tmp_path / "back")
    assert sorted(p.name for p in back.iterdir()) == sorted(
        p.name for p in folder.iterdir() if p.name not in LEFTOVERS)
    # named explicitly (a re-analysis publishing what it wrote), a temp file is left out too
    runstore.publish(folder, uri, names=["manifest.json", LEFTOVERS[0]])
    assert LEFTOVERS[0] not in runstore.marker(uri)["files"]
