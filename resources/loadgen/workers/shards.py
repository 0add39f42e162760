"""Worker shards (contract §6): a worker's unfinished streams made into its shard files, and
every record set's shards merged into the one file a run normally has.

Crash order: the merged `<log>.parquet` is written first (atomically), naming in its schema
metadata the workers it holds, and the shards are removed after. A merge cut off in between
leaves both; readers skip the shards the merged file names (schemas.record_files), and a
second merge finishes the job. A worker killed before it finished has only its stream
`<log>.<worker>.partial.arrows`: every complete batch in it is kept.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from servingbench.resources.contract import durable
from servingbench.resources.contract.schemas import (
    MERGED_SHARDS_KEY,
    PARTIAL_SUFFIX,
    RUN_FILES,
    merged_entries,
    merged_workers,
    read_file,
    record_files,
    record_path,
    shard_paths,
    write_parquet,
)
from servingbench.resources.loadgen.recorder import NAMES


def worker_of(path: Path, name: str) -> str:
    """`w1` from `chunk_log.w1.parquet` or `chunk_log.w1.partial.arrows`."""
    rest = path.name[len(name) + 1:]
    return rest.removesuffix(PARTIAL_SUFFIX).removesuffix(".parquet")


def seal(run_dir: Path, worker: str) -> list[Path]:
    """Turn a worker's left-over streams (it was killed) into its parquet shards; returns them."""
    out = []
    for name in NAMES:
        stream = run_dir / f"{name}.{worker}{PARTIAL_SUFFIX}"
        if not stream.is_file():
            continue
        final = run_dir / f"{name}.{worker}.parquet"
        if not final.exists():
            write_parquet(read_file(stream, name), final)
        os.remove(stream)
        out.append(final)
    return out


def _write(name: str, files: list[Path], meta: dict, final: Path) -> int:
    """Write the union of `files` to `final` atomically; returns its rows. Request rows are
    put in schedule order; the chunk log (the bulk) is copied file by file, never held whole."""
    schema = RUN_FILES[name].with_metadata(meta)
    if name != "chunk_log":
        table = pa.concat_tables([read_file(p, name) for p in files])
        table = table.take(pc.sort_indices(table, sort_keys=[("scheduled_at", "ascending"),
                                                             ("request_id", "ascending")]))
        write_parquet(table.replace_schema_metadata(meta), final)
        return table.num_rows
    rows = 0

    def copy(f) -> None:
        nonlocal rows
        with pq.ParquetWriter(f, schema) as w:
            for p in files:
                table = read_file(p, name).replace_schema_metadata(meta)
                w.write_table(table)
                rows += table.num_rows

    durable.write_with(final, copy)
    return rows


def merge_shards(run_dir: Path) -> dict:
    """Merge every record set's shards into `<log>.parquet`; returns
    {"workers": [names merged], "rows": {log: rows in the merged file}}."""
    run_dir = Path(run_dir)
    merged: set[str] = set()
    rows: dict[str, int] = {}
    for name in NAMES:
        main = record_path(run_dir, name)
        held = merged_workers(main)
        shards = shard_paths(run_dir, name, held)
        if not shards:
            if main is not None and held:
                _remove(run_dir, name, held)  # a merge cut off after writing: finish it
                merged |= held
            continue
        if main is not None and main.name.endswith(PARTIAL_SUFFIX):
            raise ValueError(f"{main}: an unfinished single-process log beside worker shards")
        names = held | {worker_of(p, name) for p in shards}
        # §6: the merged file lists the shard files it holds, by name (the ones an earlier
        # merge listed, and these)
        entries = {e if "." in e else f"{name}.{e}.parquet" for e in merged_entries(main)}
        entries |= {p.name for p in shards}
        meta = {MERGED_SHARDS_KEY: ",".join(sorted(entries)).encode()}
        files = ([main] if main is not None else []) + shards
        rows[name] = _write(name, files, meta, run_dir / f"{name}.parquet")
        _remove(run_dir, name, names)
        merged |= names
    return {"workers": sorted(merged), "rows": rows}


def _remove(run_dir: Path, name: str, workers: set[str]) -> None:
    for w in workers:
        for suffix in (".parquet", PARTIAL_SUFFIX):
            p = run_dir / f"{name}.{w}{suffix}"
            if p.is_file():
                os.remove(p)


def rows_on_disk(run_dir: Path, name: str) -> int:
    """The rows of record set `name` a reader finds in `run_dir` (merged file, shards and
    streams): what a stopped run really kept. A parquet file is counted from its footer,
    a stream by reading it."""
    rows = 0
    for p in record_files(Path(run_dir), name):
        if p.name.endswith(PARTIAL_SUFFIX):
            rows += read_file(p, name).num_rows
        else:
            with pa.OSFile(str(p), "rb") as f:
                rows += pq.ParquetFile(f).metadata.num_rows
    return rows
