"""Arrow schemas of the records in contract §2, and the one reader that enforces them.

Readers check column names and types, never Arrow's nullability flags: any column
may hold nulls on disk; the gates (§5) decide what a null means.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
from servingbench.resources.contract import durable

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
        # reasoning models and multimodal prompts (contract §2.2)
        ("reasoning_tokens", pa.int64()),
        ("first_answer_at", TS),
        ("input_images", pa.int32()),
        # several replicas behind one endpoint: the one that served it (a response header)
        ("replica", pa.string()),
        # several models on one node: the served model name it addressed (contract §2.1 models)
        ("model", pa.string()),
        # a resend of a request cut (e.g. by a spot interruption): the request_id it resends
        ("retry_of", pa.string()),
    ]
)
OPTIONAL_COLUMNS = frozenset({"worker", "session_id", "turn", "cached_tokens", "reasoning_tokens",
                              "first_answer_at", "input_images", "replica", "model", "retry_of"})

CHUNK_LOG = pa.schema(
    [
        ("run_id", pa.string()),
        ("request_id", pa.string()),
        ("seq", pa.int64()),
        ("at", TS),
        ("tokens", pa.int64()),
        # optional (contract §2.3): `reasoning` for a reasoning delta; null or `answer` otherwise
        ("kind", pa.string()),
    ]
)
OPTIONAL_CHUNK_COLUMNS = frozenset({"kind"})

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

# contract §2.5: one row per sample; `value` is null on a `sample_error` row.
TELEMETRY = pa.schema(
    [
        ("run_id", pa.string()),
        ("at", TS),
        ("source", pa.string()),
        ("device", pa.string()),
        ("metric", pa.string()),
        ("value", pa.float64()),
    ]
)
TELEMETRY_METRICS = ("accel_util", "accel_mem_used_bytes", "accel_mem_total_bytes", "power_w",
                     "energy_j", "kv_cache_usage", "spec_draft_tokens", "spec_accepted_tokens",
                     "requests_running", "requests_waiting", "host_cpu_util",
                     "host_mem_used_bytes", "sample_error")

# contract §2.6: events.parquet, one row per event during the run (a replica started, a
# phase of its start-up ended, a scale decision...); `value` and `detail` as the kind says.
EVENTS = pa.schema(
    [
        ("run_id", pa.string()),
        ("at", TS),
        ("kind", pa.string()),
        ("subject", pa.string()),
        ("value", pa.float64()),
        ("detail", pa.string()),
    ]
)
EVENT_KINDS = ("scale_decision", "node_requested", "node_ready", "node_gone",
               "replica_requested", "replica_phase", "replica_ready", "replica_stopped",
               "interruption_notice", "interruption", "model_load", "model_sleep", "model_wake")
REPLICA_PHASES = ("image_pull", "weights_load", "compile", "graph_capture", "ready")

PRICE_BASES = ("on_demand", "spot", "reserved_1yr", "reserved_3yr", "savings_plan_1yr",
               "savings_plan_3yr", "capacity_block")
PRICE_SOURCES = ("price_list", "spot_price_history", "capacity_block_offering", "price_sheet")

STATUSES = ("ok", "http_error", "timeout", "disconnect", "protocol_error", "cancelled")
PHASES = ("warmup", "steady")

# Files of a run folder (contract §6) and the schema each must carry.
RUN_FILES: dict[str, pa.Schema] = {
    "warmup_log": REQUEST_LOG,
    "steady_state_request_log": REQUEST_LOG,
    "chunk_log": CHUNK_LOG,
    "bill": BILL,
    "telemetry": TELEMETRY,
    "events": EVENTS,
}

# While a run is in progress the load generator appends Arrow IPC stream batches to
# `<name>.partial.arrows` and turns them into `<name>.parquet` when it finishes. A
# run killed half-way leaves only the stream; every complete batch in it is readable.
PARTIAL_SUFFIX = ".partial.arrows"
# The load generator's record sets (§2.2, §2.3): every run folder has them, the recorder
# writes them, the analysis reads them.
RECORD_SETS = ("warmup_log", "steady_state_request_log", "chunk_log")
# Record sets that several load workers may store as shards `<log>.<worker>.parquet` (§6).
SHARDED = RECORD_SETS
_WORKER = re.compile(r"[A-Za-z0-9_-]{1,64}")


_OPTIONAL = OPTIONAL_COLUMNS | OPTIONAL_CHUNK_COLUMNS


class SchemaError(ValueError):
    """A record file is unreadable or does not match its schema. Names file and column."""


def conform(table: pa.Table, schema: pa.Schema, path: Path | str) -> pa.Table:
    """Check `table` against `schema` by name and type; return it in schema order.

    A missing, unexpected (e.g. misspelt) or mistyped column raises SchemaError naming
    the file, the column and the expected type. Nullability flags are ignored.
    """
    have = {f.name: f.type for f in table.schema}
    for field in schema:
        if field.name not in have and field.name in _OPTIONAL:
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


def _existing_file(path: Path) -> Path | None:
    """`path` if it names a regular file, None if nothing is there; a folder or other
    non-file under a record's name is malformed input, not an absent record."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SchemaError(f"{path}: unreadable ({exc})") from None
    if not stat.S_ISREG(mode):
        raise SchemaError(f"{path}: expected a file, found a folder or special file")
    return path


def record_path(run_dir: Path, name: str) -> Path | None:
    """The file holding record set `name` in `run_dir`: parquet, else a partial stream."""
    return (_existing_file(run_dir / f"{name}.parquet")
            or _existing_file(run_dir / f"{name}{PARTIAL_SUFFIX}"))


MERGED_SHARDS_KEY = b"servingbench.merged_shards"


def merged_entries(path: Path | None) -> set[str]:
    """The shard file names a merged parquet file lists in its schema metadata
    `servingbench.merged_shards` (§6: comma-separated file names); empty for none."""
    if path is None or path.name.endswith(PARTIAL_SUFFIX):
        return set()
    try:
        with pa.OSFile(str(path), "rb") as f:  # a file handle: never a path pattern
            meta = pq.read_schema(f).metadata or {}
    except (pa.ArrowException, OSError):
        return set()  # an unreadable file is named when it is read
    raw = meta.get(MERGED_SHARDS_KEY)
    return set(raw.decode("utf-8", "replace").split(",")) - {""} if raw else set()


def merged_workers(path: Path | None) -> set[str]:
    """The workers whose shards a merged parquet file already holds (its schema metadata).

    A merge writes the merged file first and removes the shards after; a merge cut off
    between the two leaves both, and the shards it lists are then not read twice; a shard
    it does not list is read (a repeated request then fails rule 3). An entry is a shard's
    file name, `<log>.<worker>.parquet` or `<log>.<worker>.partial.arrows`; a bare worker
    name (what merges wrote before §6 named files) is read as that worker's shards."""
    if path is None:
        return set()
    log = path.name.removesuffix(".parquet")
    workers = set()
    for entry in merged_entries(path):
        for suffix in (".parquet", PARTIAL_SUFFIX):
            if entry.startswith(f"{log}.") and entry.endswith(suffix):
                worker = entry[len(log) + 1:-len(suffix)]
                break
        else:
            worker = entry
        if _WORKER.fullmatch(worker):
            workers.add(worker)
    return workers


def shard_paths(run_dir: Path, name: str, skip: set[str] | None = None) -> list[Path]:
    """The worker shards `<name>.<worker>.parquet` of a record set (§6), by exact name; for a
    worker that never finished (killed), its stream `<name>.<worker>.partial.arrows`.

    The folder is listed and names compared as strings: a run folder whose name holds
    `*`, `?` or `[` is never read as a pattern. Workers in `skip` are left out.
    """
    if name not in SHARDED:
        return []
    prefix = f"{name}."
    try:
        entries = sorted(os.listdir(run_dir))
    except (FileNotFoundError, NotADirectoryError):
        return []  # no folder, no records (as for the merged file)
    except OSError as exc:
        raise SchemaError(f"{run_dir}: unreadable ({exc})") from None
    found: dict[str, Path] = {}
    for suffix in (".parquet", PARTIAL_SUFFIX):  # parquet first: it wins over its stream
        for entry in entries:
            if entry.startswith(prefix) and entry.endswith(suffix):
                worker = entry[len(prefix):-len(suffix)]
                if (_WORKER.fullmatch(worker) and worker not in found
                        and worker not in (skip or ()) and (path := _existing_file(run_dir / entry))):
                    found[worker] = path
    return [found[w] for w in sorted(found)]


def record_files(run_dir: Path, name: str) -> list[Path]:
    """Every file of record set `name`: the merged file (or its partial stream) and shards
    (less those the merged file says it already holds)."""
    main = record_path(run_dir, name)
    return ([main] if main else []) + shard_paths(run_dir, name, merged_workers(main))


def read_file(path: Path, name: str) -> pa.Table:
    """One record file (parquet or partial stream), checked against record set `name`."""
    schema = RUN_FILES[name]
    try:
        if not path.name.endswith(PARTIAL_SUFFIX):
            with pa.OSFile(str(path), "rb") as f:  # a file handle: never a path pattern
                table = pq.read_table(f)
        elif path.stat().st_size == 0:  # Arrow writes a stream's schema with its first batch
            table = schema.empty_table()
        else:
            table = read_partial_stream(path)
    except SchemaError:
        raise
    except (pa.ArrowException, OSError) as exc:
        raise SchemaError(f"{path}: unreadable ({exc})") from exc
    return conform(table, schema, path)


def read_records(run_dir: Path, name: str) -> pa.Table | None:
    """Read and check one record set of a run folder (the union of its file and shards);
    None when the folder has none."""
    files = record_files(Path(run_dir), name)
    if not files:
        return None
    return pa.concat_tables([read_file(p, name) for p in files])


def write_parquet(table: pa.Table, path: Path) -> None:
    """Write atomically and durably (resources/contract/durable.py): never half a file."""
    durable.write_with(path, lambda f: pq.write_table(table, f))
