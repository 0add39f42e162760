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

from resources.contract import durable

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
    ]
)
OPTIONAL_COLUMNS = frozenset({"worker", "session_id", "turn", "cached_tokens", "reasoning_tokens",
                              "first_answer_at", "input_images"})

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
CHUNK_KINDS = ("answer", "reasoning")

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
TELEMETRY_SOURCES = ("dcgm", "neuron_monitor", "engine_metrics", "host", "emulated")
TELEMETRY_METRICS = ("accel_util", "accel_mem_used_bytes", "accel_mem_total_bytes", "power_w",
                     "energy_j", "kv_cache_usage", "spec_draft_tokens", "spec_accepted_tokens",
                     "requests_running", "requests_waiting", "host_cpu_util",
                     "host_mem_used_bytes", "sample_error")

# contract §3.6: frontier.parquet, one row per step of a run.
FRONTIER = pa.schema(
    [
        ("run_id", pa.string()),
        ("candidate", pa.string()),
        ("step", pa.string()),
        ("source", pa.string()),
        ("valid", pa.bool_()),
        ("accelerators", pa.int64()),
        ("interactivity_tok_s", pa.float64()),
        ("output_tok_s_per_accel", pa.float64()),
        ("total_tok_s_per_accel", pa.float64()),
        ("ttft_s_p99", pa.float64()),
        ("tpot_s_p99", pa.float64()),
        ("cost_per_1m_output_usd", pa.float64()),
        ("bill_status", pa.string()),
        ("cost_per_1m_total_usd", pa.float64()),
        ("on_frontier", pa.bool_()),
    ]
)

# contract §3.6: frontier_levels.parquet, one row per interactivity level × candidate.
FRONTIER_LEVELS = pa.schema(
    [
        ("level_tok_s", pa.float64()),
        ("candidate", pa.string()),
        ("run_id", pa.string()),
        ("step", pa.string()),
        ("interactivity_tok_s", pa.float64()),
        ("output_tok_s_per_accel", pa.float64()),
        ("cost_per_1m_output_usd", pa.float64()),
        ("bill_status", pa.string()),
        ("source", pa.string()),
        ("rank", pa.int64()),
    ]
)

# contract §4.1: cost_what_if.parquet, one row per step × price basis of the manifest. Its
# figures are what-if prices, never the bill; `source` (§1: on every row) is the run's.
COST_WHAT_IF = pa.schema(
    [
        ("run_id", pa.string()),
        ("step", pa.string()),
        ("basis", pa.string()),
        ("hourly_usd_per_node", pa.float64()),
        ("price_source", pa.string()),
        ("retrieved_on", pa.string()),
        ("region", pa.string()),
        ("cost_per_1m_output_usd", pa.float64()),
        ("cost_per_1m_total_usd", pa.float64()),
        ("source", pa.string()),
    ]
)
PRICE_BASES = ("on_demand", "spot", "reserved_1yr", "reserved_3yr", "savings_plan_1yr",
               "savings_plan_3yr", "capacity_block")
PRICE_SOURCES = ("price_list", "spot_price_history", "capacity_block_offering", "price_sheet")

STATUSES = ("ok", "http_error", "timeout", "disconnect", "protocol_error", "cancelled")
PHASES = ("warmup", "steady")
BILL_SOURCES = ("cost_explorer", "price_list", "price_sheet", "fixture")

# Files of a run folder (contract §6) and the schema each must carry.
RUN_FILES: dict[str, pa.Schema] = {
    "warmup_log": REQUEST_LOG,
    "steady_state_request_log": REQUEST_LOG,
    "chunk_log": CHUNK_LOG,
    "bill": BILL,
    "telemetry": TELEMETRY,
}

# While a run is in progress the load generator appends Arrow IPC stream batches to
# `<name>.partial.arrows` and turns them into `<name>.parquet` when it finishes. A
# run killed half-way leaves only the stream; every complete batch in it is readable.
PARTIAL_SUFFIX = ".partial.arrows"
# Record sets that several load workers may store as shards `<log>.<worker>.parquet` (§6).
SHARDED = ("warmup_log", "steady_state_request_log", "chunk_log")
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


def merged_workers(path: Path | None) -> set[str]:
    """The workers whose shards a merged parquet file already holds (its schema metadata).

    A merge writes the merged file first and removes the shards after; a merge cut off
    between the two leaves both, and the shards it names are then not read twice."""
    if path is None or path.name.endswith(PARTIAL_SUFFIX):
        return set()
    try:
        with pa.OSFile(str(path), "rb") as f:  # a file handle: never a path pattern
            meta = pq.read_schema(f).metadata or {}
    except (pa.ArrowException, OSError):
        return set()  # an unreadable file is named when it is read
    raw = meta.get(MERGED_SHARDS_KEY)
    return set(raw.decode().split(",")) - {""} if raw else set()


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
