"""An import's memory is bounded by what a run's 4 GiB pod holds: the file is read by its
size (a read of the cap allocated the whole cap), chunk times are kept as int64 arrays, and
the chunk log is built in compact buffers a row group at a time (a Python list per column
took six times the file's size on top of the parsed requests). The peak per byte of file is
measured in docs/performance.md (benchmarks/peer_import_memory.py); here Python's own
allocations are traced, which is what the fix removed."""

from __future__ import annotations

import sys
import tracemalloc
from array import array
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
from servingbench.resources.peers import records, run_writer, vllm

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from peer_import_memory import vllm_result  # noqa: E402


def test_reading_and_writing_an_import_stays_near_the_files_size(tmp_path):
    small = tmp_path / "small.json"
    vllm_result(small, 4096, 64)  # Arrow's first use allocates once: not the file's doing
    run_writer.write_run(records.read_result(vllm, small), tmp_path / "warm", {}, run_id="r0")
    src = tmp_path / "result.json"
    n = vllm_result(src, 4 << 20, 64)
    size = src.stat().st_size
    tracemalloc.start()
    try:
        run = records.read_result(vllm, src)
        read_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        held = tracemalloc.get_traced_memory()[0]
        run_writer.write_run(run, tmp_path / "run", {}, run_id="r1")
        write_peak = tracemalloc.get_traced_memory()[1] - held
    finally:
        tracemalloc.stop()
    assert read_peak < 8 * size, read_peak / size
    assert write_peak < 2 * size, write_peak / size
    assert isinstance(run.requests[0].chunk_ns, array)  # 8 bytes a chunk time, not 40
    chunks = pq.read_table(tmp_path / "run" / "chunk_log.parquet")
    assert chunks.num_rows == 64 * n
    # one request's rows, picked by Arrow: 400k rows as Python dicts took seconds
    first = chunks.filter(pc.equal(chunks["request_id"], "vllm-1")).to_pylist()
    assert [c["seq"] for c in first] == list(range(64)) and {c["tokens"] for c in first} == {1}
    assert {c["run_id"] for c in first} == {"r1"} and {c["kind"] for c in first} == {None}


def test_the_chunk_log_is_written_in_row_groups(tmp_path, monkeypatch):
    monkeypatch.setattr(run_writer, "CHUNK_BATCH", 500)
    src = tmp_path / "result.json"
    n = vllm_result(src, 64 << 10, 64)
    run_writer.write_run(records.read_result(vllm, src), tmp_path / "run", {}, run_id="r1")
    meta = pq.ParquetFile(tmp_path / "run" / "chunk_log.parquet").metadata
    assert meta.num_rows == 64 * n and meta.num_row_groups >= n * 64 // 512


def test_a_file_past_the_cap_is_refused_before_it_is_read(tmp_path, monkeypatch):
    import pytest

    monkeypatch.setattr(records, "MAX_FILE_BYTES", 1000)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 1001)
    with pytest.raises(records.PeerFileError, match="larger than 1000 bytes"):
        records.read_bytes(big, "missing")
    big.write_bytes(b" " * 1000)
    assert len(records.read_bytes(big, "missing")) == 1000
