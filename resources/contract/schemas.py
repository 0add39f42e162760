"""Arrow schemas of the records in contract §2, and the one reader that enforces them.

Readers check column names and types, never Arrow's nullability flags: any column
may hold nulls on disk; the gates (§5) decide what a null means.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

TS = pa.timestamp("ns", tz="UTC")

REQUEST_LOG = pa.schema(
    [
        ("run_id", pa.string()),
        ("request_id", pa.string()),
        ("phase", pa.string()),
        ("step", pa.string()),
        ("load_mode", pa.string()),
        ("target", pa.float64()),
        ("scheduled_at", TS),
        ("sent_at", TS),
        ("first_token_at", TS),
        ("last_token_at", TS),
        ("finished_at", TS),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("output_tokens_source", pa.string()),
        ("chunks", pa.int64()),
        ("status", pa.string()),
        ("http_status", pa.int32()),
        ("error", pa.string()),
        # optional (contract §2.2): older files lack them; a reader fills them with nulls
        ("worker", pa.string()),
        ("session_id", pa.string()),
        ("turn", pa.int32()),
        ("cached_tokens", pa.int64()),
    ]
)
OPTIONAL_COLUMNS = frozenset({"worker", "session_id", "turn", "cached_tokens"})

CHUNK_LOG = pa.schema(
    [
        ("run_id", pa.string()),
        ("request_id", pa.string()),
        ("seq", pa.int64()),
        ("at", TS),
        ("tokens", pa.int64()),
    ]
)

BILL = pa.schema(
    [
        ("run_id", pa.string()),
        ("period_start", TS),
        ("period_end", TS),
        ("account_id", pa.string()),
        ("region", pa.string()),
        ("service", pa.string()),
        ("usage_type", pa.string()),
        ("instance_type", pa.string()),
        ("tag_key", pa.string()),
        ("tag_value", pa.string()),
        ("metric", pa.string()),
        ("amount", pa.float64()),
        ("unit", pa.string()),
        ("usage_quantity", pa.float64()),
        ("usage_unit", pa.string()),
        ("estimated", pa.bool_()),
        ("source", pa.string()),
    ]
)

STATUSES = ("ok", "http_error", "timeout", "disconnect", "protocol_error", "cancelled")
PHASES = ("warmup", "steady")
BILL_SOURCES = ("cost_explorer", "price_list", "price_sheet", "fixture")

# Files of a run folder (contract §6) and the schema each must carry.
RUN_FILES: dict[str, pa.Schema] = {
    "warmup_log": REQUEST_LOG,
    "steady_state_request_log": REQUEST_LOG,
    "chunk_log": CHUNK_LOG,
    "bill": BILL,
}

# While a run is in progress the load generator appends Arrow IPC stream batches to
# `<name>.partial.arrows` and turns them into `<name>.parquet` when it finishes. A
# run killed half-way leaves only the stream; every complete batch in it is readable.
PARTIAL_SUFFIX = ".partial.arrows"


class SchemaError(ValueError):
    """A record file is unreadable or does not match its schema. Names file and column."""


def conform(table: pa.Table, schema: pa.Schema, path: Path | str) -> pa.Table:
    """Check `table` against `schema` by name and type; return it in schema order.

    A missing, unexpected (e.g. misspelt) or mistyped column raises SchemaError naming
    the file, the column and the expected type. Nullability flags are ignored.
    """
    have = {f.name: f.type for f in table.schema}
    for field in schema:
        if field.name not in have and field.name in OPTIONAL_COLUMNS:
            table = table.append_column(field.name, pa.nulls(table.num_rows, field.type))
            continue
        if field.name not in have:
            extra = sorted(set(have) - set(schema.names))
            hint = f" (found unexpected {', '.join(map(repr, extra))}: misspelt?)" if extra else ""
            raise SchemaError(
                f"{path}: missing column {field.name!r}, expected type {field.type}{hint}"
            )
        if have[field.name] != field.type:
            raise SchemaError(
                f"{path}: column {field.name!r} has type {have[field.name]}, "
                f"expected {field.type}"
            )
    extra = [name for name in have if name not in schema.names]
    if extra:
        raise SchemaError(f"{path}: unexpected column {extra[0]!r} (not in the contract: misspelt?)")
    return table.select(schema.names).cast(schema)


def read_partial_stream(path: Path) -> pa.Table:
    """Every complete record batch of an Arrow IPC stream cut off mid-write."""
    batches: list[pa.RecordBatch] = []
    with pa.OSFile(str(path), "rb") as f:
        try:
            reader = ipc.open_stream(f)
        except pa.ArrowInvalid as exc:
            raise SchemaError(f"{path}: not an Arrow IPC stream ({exc})") from exc
        schema = reader.schema
        while True:
            try:
                batches.append(reader.read_next_batch())
            except StopIteration:
                break
            except (pa.ArrowInvalid, OSError):
                break  # a torn final batch: keep what came before it
    return pa.Table.from_batches(batches, schema=schema)


def record_path(run_dir: Path, name: str) -> Path | None:
    """The file holding record set `name` in `run_dir`: parquet, else a partial stream."""
    final = run_dir / f"{name}.parquet"
    if final.exists():
        return final
    partial = run_dir / f"{name}{PARTIAL_SUFFIX}"
    return partial if partial.exists() else None


def read_records(run_dir: Path, name: str) -> pa.Table | None:
    """Read and check one record set of a run folder; None when the folder has none."""
    schema = RUN_FILES[name]
    path = record_path(run_dir, name)
    if path is None:
        return None
    try:
        if path.suffix == ".parquet":
            table = pq.read_table(path)
        elif path.stat().st_size == 0:  # Arrow writes a stream's schema with its first batch
            table = schema.empty_table()
        else:
            table = read_partial_stream(path)
    except SchemaError:
        raise
    except (pa.ArrowException, OSError) as exc:
        raise SchemaError(f"{path}: unreadable ({exc})") from exc
    return conform(table, schema, path)


def write_parquet(table: pa.Table, path: Path) -> None:
    """Write atomically: a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
