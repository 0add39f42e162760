"""contract §6 exact names and worker shards, §2.2 optional columns, §5 rule 3 on run_id and
orphan chunks: a run folder is read by exact path, never as a glob, and only its own rows."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from servingbench.resources.analysis.analyze import analyze_run
from servingbench.resources.contract.schemas import (
    OPTIONAL_COLUMNS,
    REQUEST_LOG,
    read_records,
    write_parquet,
)

from tests.support.runbuilder import RunBuilder, clean_run


def _n_steady(result) -> int:
    return sum(result.metrics.column("n_requests").to_pylist())


def _three_request_run() -> RunBuilder:
    b = clean_run()
    b.request("c=2", sched=1500, sent=1500, chunks=[(1600, 1), (1650, 1)], finished=1660)
    return b


@pytest.mark.parametrize("name", ["a[1]", "run-*", "r?n"])
def test_folder_name_is_never_a_pattern(tmp_path, name):
    # the decoy folder matches the pattern and holds another run's records
    decoy = {"a[1]": "a1", "run-*": "run-x", "r?n": "run"}[name]
    _three_request_run().write(tmp_path / decoy)
    result = analyze_run(clean_run().write(tmp_path / name))
    assert result.exit_code == 0, result.message
    assert _n_steady(result) == 3  # its own three steady requests, not the decoy's four


def test_shards_are_read_as_the_union_with_the_merged_file(tmp_path):
    b = _three_request_run()
    run_dir = b.write(tmp_path / "run")
    steady = pq.read_table(run_dir / "steady_state_request_log.parquet")
    chunks = pq.read_table(run_dir / "chunk_log.parquet")
    last = steady.num_rows - 1
    last_id = steady.column("request_id")[last].as_py()
    mine = pa.compute.equal(chunks.column("request_id"), last_id)
    # worker w1's request and chunks live only in its shards
    write_parquet(steady.slice(0, last), run_dir / "steady_state_request_log.parquet")
    write_parquet(steady.slice(last), run_dir / "steady_state_request_log.w1.parquet")
    write_parquet(chunks.filter(pa.compute.invert(mine)), run_dir / "chunk_log.parquet")
    write_parquet(chunks.filter(mine), run_dir / "chunk_log.w1.parquet")

    result = analyze_run(run_dir)
    assert result.exit_code == 0, result.message
    assert _n_steady(result) == 4
    assert read_records(run_dir, "steady_state_request_log").num_rows == 4


def test_a_killed_workers_stream_is_read_and_a_merged_shard_not_twice(tmp_path):
    import pyarrow.ipc as ipc
    from servingbench.resources.contract.schemas import MERGED_SHARDS_KEY

    run_dir = _three_request_run().write(tmp_path / "run")
    steady = pq.read_table(run_dir / "steady_state_request_log.parquet")
    last = steady.num_rows - 1
    write_parquet(steady.slice(0, last), run_dir / "steady_state_request_log.parquet")
    # w1 was killed: only its stream, cut off mid-batch, is there
    sink = pa.BufferOutputStream()
    ipc.new_stream(sink, steady.schema).write_table(steady.slice(last))  # never closed
    torn = b"\xff\xff\xff\xff\x10\x01"  # and a last batch cut off as it was written
    (run_dir / "steady_state_request_log.w1.partial.arrows").write_bytes(
        sink.getvalue().to_pybytes() + torn)
    assert read_records(run_dir, "steady_state_request_log").num_rows == 4
    assert _n_steady(analyze_run(run_dir)) == 4
    # a merge wrote the merged file (naming w1 in its metadata) and was cut off before it
    # removed w1's shard: the shard is not read a second time
    merged = steady.replace_schema_metadata({MERGED_SHARDS_KEY: b"w1"})
    write_parquet(merged, run_dir / "steady_state_request_log.parquet")
    assert read_records(run_dir, "steady_state_request_log").num_rows == 4
    assert _n_steady(analyze_run(run_dir)) == 4


def test_a_shard_with_a_wrong_type_is_malformed_naming_it(tmp_path):
    run_dir = clean_run().write(tmp_path / "run")
    bad = pq.read_table(run_dir / "chunk_log.parquet")
    bad = bad.set_column(2, "seq", bad.column("seq").cast(pa.int32()))
    pq.write_table(bad, run_dir / "chunk_log.w2.parquet")
    result = analyze_run(run_dir)
    assert result.exit_code == 2
    assert "chunk_log.w2.parquet" in result.message and "'seq'" in result.message


def _with_optional(table: pa.Table, present: dict[str, pa.Array]) -> pa.Table:
    """`table` as an older writer (no optional column) or a newer one (some) would write it."""
    table = table.drop_columns([c for c in OPTIONAL_COLUMNS if c in table.column_names])
    for name, values in present.items():
        table = table.append_column(REQUEST_LOG.field(name), values)
    return table


def test_optional_columns_absent_read_as_null_and_present_are_kept(tmp_path):
    run_dir = clean_run().write(tmp_path / "run")
    path = run_dir / "steady_state_request_log.parquet"
    steady = pq.read_table(path)
    n = steady.num_rows
    write_parquet(_with_optional(steady, {
        "worker": pa.array(["w0"] * n), "cached_tokens": pa.array([0, 256, None], pa.int64())}),
        path)
    wpath = run_dir / "warmup_log.parquet"
    write_parquet(_with_optional(pq.read_table(wpath), {}), wpath)
    assert "worker" not in pq.read_schema(wpath).names

    result = analyze_run(run_dir)
    assert result.exit_code == 0, result.message
    table = read_records(run_dir, "steady_state_request_log")
    assert table.column("cached_tokens").to_pylist() == [0, 256, None]
    assert table.column("session_id").null_count == n  # absent: all null
    assert table.schema.field("turn").type == pa.int32()
    warmup = read_records(run_dir, "warmup_log")  # written without any optional column
    assert warmup.column("worker").null_count == warmup.num_rows


def test_optional_column_with_a_wrong_type_is_malformed(tmp_path):
    run_dir = clean_run().write(tmp_path / "run")
    path = run_dir / "steady_state_request_log.parquet"
    steady = pq.read_table(path)
    pq.write_table(_with_optional(steady, {}).append_column("turn", pa.array(["0"] * steady.num_rows)),
                   path)
    result = analyze_run(run_dir)
    assert result.exit_code == 2
    assert "'turn'" in result.message and "int32" in result.message


def test_unknown_column_is_still_rejected(tmp_path):
    run_dir = clean_run().write(tmp_path / "run")
    path = run_dir / "steady_state_request_log.parquet"
    steady = pq.read_table(path)
    pq.write_table(steady.append_column("cahced_tokens", pa.nulls(steady.num_rows, pa.int64())),
                   path)
    result = analyze_run(run_dir)
    assert result.exit_code == 2 and "'cahced_tokens'" in result.message


def test_foreign_and_orphan_chunk_rows_count_once_each(tmp_path):
    b = clean_run()
    b.chunks[3]["run_id"] = "someone-elses-run"
    b.chunks[4]["run_id"] = "someone-elses-run"
    # one orphan that is also foreign: one row, counted once
    b.chunks.append({**b.chunks[5], "request_id": "in-neither-log", "run_id": "x", "seq": 0})
    b.requests[2]["run_id"] = "someone-elses-run"
    result = analyze_run(b.write(tmp_path / "run"))
    gate = result.gates[2]
    assert gate["passed"] is False
    assert gate["offending_rows"] == 1 + 2 + 1  # request row, two foreign chunks, the orphan
    assert "in-neither-log" in gate["examples"]
    assert b.requests[2]["request_id"] in gate["examples"]
    assert "chunk request_id in neither request log (1 rows)" in gate["message"]
    assert "chunk run_id is not the manifest's (3 rows)" in gate["message"]



def test_the_merged_shards_marker_lists_file_names_and_an_unlisted_shard_is_read(tmp_path):
    """§6: `servingbench.merged_shards` lists the shard files a merged file holds; a listed
    shard left beside it is ignored, an unlisted one is read (its repeated requests then
    fail rule 3 alone: rule 4 never counts a request's chunks twice)."""
    from servingbench.resources.contract.schemas import MERGED_SHARDS_KEY

    run_dir = _three_request_run().write(tmp_path / "run")
    for log in ("steady_state_request_log", "chunk_log"):
        table = pq.read_table(run_dir / f"{log}.parquet")
        pq.write_table(table, run_dir / f"{log}.w1.parquet")  # the same rows, left beside
        write_parquet(table.replace_schema_metadata(
            {MERGED_SHARDS_KEY: f"{log}.w1.parquet".encode()}), run_dir / f"{log}.parquet")
    n = pq.read_table(run_dir / "steady_state_request_log.parquet").num_rows
    assert read_records(run_dir, "steady_state_request_log").num_rows == n  # listed: ignored
    assert analyze_run(run_dir).exit_code == 0
    for log in ("steady_state_request_log", "chunk_log"):  # now unlisted: read again
        table = pq.read_table(run_dir / f"{log}.parquet")
        write_parquet(table.replace_schema_metadata({}), run_dir / f"{log}.parquet")
    assert read_records(run_dir, "steady_state_request_log").num_rows == 2 * n
    assert analyze_run(run_dir).exit_code == 3  # rejected
    gates = {g["rule"]: g for g in json.loads((run_dir / "gates.json").read_text())}
    assert gates[3]["passed"] is False and gates[3]["offending_rows"] >= 2 * n
    assert gates[4]["passed"] is True, gates[4]  # a repeated id never doubles a chunk sum
    assert gates[1]["passed"] is True and gates[2]["passed"] is True
