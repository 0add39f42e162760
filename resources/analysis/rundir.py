"""A run folder (contract §6) opened for analysis: its manifest, checked record sets, and a
DuckDB connection with one view per record set (`steady`, `warmup`, `chunks`, `bill`) and
the table `chunk_gaps` (sql/chunk_gaps.sql) that the gates and the metrics share.

Parquet files are scanned by DuckDB directly (only their schema is read here), so a
12.8M-row chunk log never passes through Python. A run killed half-way is read from its
`.partial.arrows` streams.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from resources.analysis import sqlfiles
from resources.contract import manifest as manifest_mod
from resources.contract.schemas import RUN_FILES, SchemaError, conform, read_records, record_path

VIEWS = {"steady_state_request_log": "steady", "warmup_log": "warmup", "chunk_log": "chunks",
         "bill": "bill"}
REQUIRED = ("steady_state_request_log", "warmup_log", "chunk_log")


@dataclass
class RunFolder:
    path: Path
    manifest: dict
    con: duckdb.DuckDBPyConnection
    has_bill: bool
    partial: list[str] = field(default_factory=list)  # record sets read from a partial stream

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _check_parquet_schema(path: Path, schema: pa.Schema) -> None:
    try:
        found = pq.read_schema(path)
    except (pa.ArrowException, OSError) as exc:
        raise SchemaError(f"{path}: unreadable parquet ({exc})") from exc
    conform(found.empty_table(), schema, path)


def _columns(path: Path, schema: pa.Schema) -> list[str]:
    """The schema's columns; an optional one the file lacks is read as a typed null."""
    have = set(pq.read_schema(path).names)
    cols = []
    for f in schema:
        if f.name in have:
            cols.append(f'"{f.name}"')
        else:  # only optional columns get here: _check_parquet_schema refused the rest
            sql_type = {pa.string(): "VARCHAR", pa.int32(): "INTEGER", pa.int64(): "BIGINT"}[f.type]
            cols.append(f'CAST(NULL AS {sql_type}) AS "{f.name}"')
    return cols


def open_run(path: Path, duckdb_path: str = ":memory:") -> RunFolder:
    """Open and check a run folder. Raises ManifestError or SchemaError (→ exit 2)."""
    path = Path(path)
    if not path.is_dir():
        raise SchemaError(f"{path}: not a run folder (no such directory)")
    manifest = manifest_mod.load(path / "manifest.json")
    con = duckdb.connect(duckdb_path)
    con.execute("SET TimeZone = 'UTC'")
    partial: list[str] = []
    has_bill = False
    try:
        for name, view in VIEWS.items():
            where = record_path(path, name)
            if where is None:
                if name in REQUIRED:
                    raise SchemaError(f"{path / (name + '.parquet')}: missing")
                continue
            schema = RUN_FILES[name]
            has_bill = has_bill or name == "bill"
            if where.suffix == ".parquet":
                _check_parquet_schema(where, schema)
                rel = con.read_parquet(str(where)).project(", ".join(_columns(where, schema)))
            else:
                partial.append(name)
                con.register(view, read_records(path, name))
                continue
            rel.create_view(view)
        # chunk gaps are needed by both the gates and the metrics: compute them once
        con.sql(sqlfiles.load("chunk_gaps")).create("chunk_gaps")
    except Exception:
        con.close()
        raise
    return RunFolder(path=path, manifest=manifest, con=con, has_bill=has_bill, partial=partial)
