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

from resources.contract.schemas import (
    MERGED_SHARDS_KEY,
    PARTIAL_SUFFIX,
    merged_workers,
    read_file,
    record_path,
    shard_paths,
    write_parquet,
)
from resources.loadgen.recorder import NAMES


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


def _ordered(table: pa.Table, name: str) -> pa.Table:
    # the order one process would have written: request rows by their schedule, chunks
    # by request and sequence
    keys = ([("request_id", "ascending"), ("seq", "ascending")] if name == "chunk_log"
            else [("scheduled_at", "ascending"), ("request_id", "ascending")])
    return table.take(pc.sort_indices(table, sort_keys=keys))


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
        workers = {worker_of(p, name) for p in shards}
        tables = ([read_file(main, name)] if main is not None else []) + [read_file(p, name) for p in shards]
        table = _ordered(pa.concat_tables(tables), name)
        names = held | workers
        meta = {MERGED_SHARDS_KEY: ",".join(sorted(names)).encode()}
        write_parquet(table.replace_schema_metadata(meta), run_dir / f"{name}.parquet")
        _remove(run_dir, name, names)
        merged |= names
        rows[name] = table.num_rows
    return {"workers": sorted(merged), "rows": rows}


def _remove(run_dir: Path, name: str, workers: set[str]) -> None:
    for w in workers:
        for suffix in (".parquet", PARTIAL_SUFFIX):
            p = run_dir / f"{name}.{w}{suffix}"
            if p.is_file():
                os.remove(p)
