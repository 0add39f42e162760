"""Nothing written is ever half-written (resources/contract/durable.py): outputs appear whole
or not at all, temp names are unique and removed on failure (a full disk included), record
streams are created exclusively and never follow a planted symlink."""

from __future__ import annotations

import errno
import json
import os
import threading

import pyarrow as pa
import pytest
from servingbench.resources.analysis.analyze import NO_ROOM, analyze_run
from servingbench.resources.contract import durable
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.schemas import CHUNK_LOG, read_records, write_parquet
from servingbench.resources.loadgen.clock import Clock
from servingbench.resources.loadgen.errors import DiskFullError, RunExistsError
from servingbench.resources.loadgen.recorder import Recorder

from tests.support.runbuilder import clean_run


class _FullDisk:
    """os.fsync that fails with ENOSPC (what a full disk reports at the write layer)."""

    def __init__(self, monkeypatch):
        self.real = os.fsync
        monkeypatch.setattr(durable.os, "fsync", self)

    def __call__(self, fd):
        raise OSError(errno.ENOSPC, "No space left on device")


def _names(folder) -> list[str]:
    return sorted(os.listdir(folder))


def test_a_write_replaces_the_file_whole_and_leaves_no_temp(tmp_path):
    target = tmp_path / "gates.json"
    durable.write_json(target, [1])
    durable.write_json(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 2}
    assert _names(tmp_path) == ["gates.json"]
    assert oct(target.stat().st_mode & 0o777) == "0o644"


def test_full_disk_keeps_the_old_file_and_removes_the_temp(tmp_path, monkeypatch):
    target = tmp_path / "derived_metrics.parquet"
    write_parquet(pa.table({"x": [1]}), target)
    before = target.read_bytes()
    _FullDisk(monkeypatch)
    with pytest.raises(OSError) as exc:
        write_parquet(pa.table({"x": [1, 2, 3]}), target)
    assert exc.value.errno == errno.ENOSPC
    assert target.read_bytes() == before
    assert _names(tmp_path) == ["derived_metrics.parquet"]


def test_concurrent_writers_never_share_a_temp_file(tmp_path):
    target = tmp_path / "reconciliation.json"
    docs = [{"writer": i, "pad": "x" * 50_000} for i in range(8)]
    errors = []

    def write(doc):
        try:
            for _ in range(5):
                durable.write_json(target, doc)
        except Exception as exc:  # a shared temp name shows up as a failed rename
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(d,)) for d in docs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert json.loads(target.read_text()) in docs  # one writer's whole document
    assert _names(tmp_path) == ["reconciliation.json"]


def test_a_planted_symlink_at_the_old_temp_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    run_dir = clean_run().write(tmp_path / "run")
    os.symlink(victim, run_dir / "gates.json.tmp")  # the fixed temp name of old
    assert analyze_run(run_dir).exit_code == 0
    assert victim.read_text() == "keep me"
    assert json.loads((run_dir / "gates.json").read_text())[0]["rule"] == 1


def test_record_streams_are_created_exclusively_never_through_a_symlink(tmp_path):
    # a dangling link passes any "does it exist?" check; only O_EXCL refuses it
    victim = tmp_path / "victim.bin"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.symlink(victim, run_dir / "chunk_log.partial.arrows")
    with pytest.raises(RunExistsError, match="chunk_log.partial.arrows"):
        Recorder(run_dir, "run-1", Clock.start())
    assert not victim.exists()
    with pytest.raises(FileExistsError):
        durable.create_exclusive(run_dir / "chunk_log.partial.arrows")


def test_full_disk_at_finalize_keeps_flushed_records_readable(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    rec = Recorder(run_dir, "run-1", Clock.start())
    stream = rec.streams["chunk_log"]
    stream.add("req-1", [1_000, 2_000], [1, 1])
    rec.flush()
    mf.dump(mf.empty("run-1", "emulated", 0), run_dir / "manifest.json")
    _FullDisk(monkeypatch)
    with pytest.raises(DiskFullError, match="disk full") as exc:
        rec.finalize()
    assert not any(exc.value.unwritten.values())  # everything was flushed before
    # no parquet half-written, no temp left; the flushed stream and the manifest still read
    assert not (run_dir / "chunk_log.parquet").exists()
    assert not [n for n in _names(run_dir) if n.endswith(durable.TEMP_SUFFIX)]
    chunks = read_records(run_dir, "chunk_log")
    assert chunks.num_rows == 2 and chunks.schema.equals(CHUNK_LOG)
    assert mf.load(run_dir / "manifest.json")["run_id"] == "run-1"


def test_full_disk_during_analysis_loses_no_earlier_output(tmp_path, monkeypatch):
    run_dir = clean_run().write(tmp_path / "run")
    assert analyze_run(run_dir).exit_code == 0
    before = {n: (run_dir / n).read_bytes() for n in _names(run_dir)}
    _FullDisk(monkeypatch)
    result = analyze_run(run_dir)
    assert result.exit_code == NO_ROOM
    assert result.message.startswith(f"disk full: cannot write {run_dir / 'gates.json'} (")
    assert {n: (run_dir / n).read_bytes() for n in _names(run_dir)} == before
