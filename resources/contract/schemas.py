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
        # the step's SLO attainment and slow-tail interactivity (contract §3), beside it
        ("slo_attainment", pa.float64()),
        ("e2e_norm_interactivity_tok_s", pa.float64()),
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


# --- the analyzer's outputs (contract §3, §3.1, §3.2, §4) --------------------------------
# One schema per output file: the analyzer's SQL results are checked against them before
# they are written (`check_output`), and every reader (the report, the store, tests) takes
# its columns from here. A column the contract defines but a run may lack (a newer metric)
# is listed in OPTIONAL_OUTPUT_COLUMNS: checked when present, never required.
STATS = ("p50", "p90", "p95", "p99", "mean", "min", "max", "n")


def _stats(prefix: str) -> list[tuple[str, pa.DataType]]:
    """`<prefix>_p50 … _max` float64 and `<prefix>_n` int64 (contract §3)."""
    return [(f"{prefix}_{s}", pa.int64() if s == "n" else pa.float64()) for s in STATS]


DERIVED_METRICS = pa.schema(
    [
        ("run_id", pa.string()), ("step", pa.string()), ("load_mode", pa.string()),
        ("target", pa.float64()), ("source", pa.string()),
        ("n_requests", pa.int64()), ("n_ok", pa.int64()), ("error_rate", pa.float64()),
        ("window_start", TS), ("window_end", TS), ("window_s", pa.float64()),
        ("input_tokens", pa.int64()), ("output_tokens", pa.int64()),
        ("output_tok_s", pa.float64()), ("request_s", pa.float64()),
        ("achieved_concurrency", pa.float64()), ("goodput_s", pa.float64()),
        *_stats("ttft_s"), *_stats("ttft_sched_s"),
        ("sched_lag_s_p50", pa.float64()), ("sched_lag_s_p99", pa.float64()),
        ("sched_lag_s_max", pa.float64()),
        *_stats("itl_s"), ("itl_multi_token_share", pa.float64()),
        *_stats("tpot_s"), *_stats("e2e_s"),
        ("valid", pa.bool_()), ("invalid_reason", pa.string()),
        *_stats("ttfat_s"), ("reasoning_tokens", pa.int64()),
        ("spec_acceptance_rate", pa.float64()),
        # SLO attainment (failures in the denominator), the slow tail's per-token speed, and
        # the replicas behind the step (contract §3; every run, not only episodes)
        ("slo_attainment", pa.float64()), ("e2e_norm_interactivity_tok_s", pa.float64()),
        ("replicas_mean", pa.float64()), ("output_tok_s_per_replica", pa.float64()),
    ]
)
# contract §3.9: one row per step × model of a run with several models on one node: §3's
# columns over the model's requests (rates over the step's window), TTFT p99 during and
# outside another model's swap, and the node's step cost attributed to the model.
DERIVED_METRICS_BY_MODEL = pa.schema(
    [*list(DERIVED_METRICS)[:2], ("model", pa.string()), *list(DERIVED_METRICS)[2:],
     ("ttft_s_p99_during_swap", pa.float64()), ("ttft_s_p99_outside_swap", pa.float64()),
     ("attributed_cost_per_1m_output_usd", pa.float64())]
)
# contract §3.9: swaps.parquet, one row per model_load, model_sleep or model_wake event
SWAPS = pa.schema(
    [("run_id", pa.string()), ("model", pa.string()), ("kind", pa.string()),
     ("started_at", TS), ("ended_at", TS), ("seconds", pa.float64())]
)
# contract §3.7: episode.parquet, one row per bucket of the steady phase
EPISODE = pa.schema(
    [("run_id", pa.string()), ("bucket_start", TS), ("bucket_end", TS),
     ("offered_rps", pa.float64()), ("completed_rps", pa.float64()),
     ("output_tok_s", pa.float64()), ("replicas_ready", pa.float64()), ("nodes", pa.float64()),
     ("n_requests", pa.int64()), ("ttft_s_p50", pa.float64()), ("ttft_s_p99", pa.float64()),
     ("slo_attainment", pa.float64())]
)
# contract §3.7: scale_events.parquet, one row per scale decision that changed the count
SCALE_EVENTS = pa.schema(
    [("run_id", pa.string()), ("decided_at", TS), ("from_replicas", pa.int64()),
     ("to_replicas", pa.int64()), ("direction", pa.string()),
     ("node_ready_s", pa.float64()), ("replica_ready_s", pa.float64()),
     ("first_token_s", pa.float64()), ("image_pull_s", pa.float64()),
     ("weights_load_s", pa.float64()), ("compile_s", pa.float64()),
     ("graph_capture_s", pa.float64()), ("attainment_before", pa.float64()),
     ("attainment_during", pa.float64()), ("attainment_after", pa.float64())]
)
# contract §3.8: interruptions.parquet, one row per interruption notice of a spot run
INTERRUPTIONS = pa.schema(
    [("run_id", pa.string()), ("node", pa.string()), ("notice_at", TS),
     ("interrupted_at", TS), ("in_flight_at_notice", pa.int64()), ("lost", pa.int64()),
     ("retried_ok", pa.int64()), ("drain_s", pa.float64()), ("replacement_ready_s", pa.float64())]
)
# contract §3.8: spot_pairs.parquet beside the comparison, one row per candidate with an
# accepted on-demand and an accepted spot run (`source`: the two runs'; measured and emulated
# runs are never paired)
SPOT_PAIRS = pa.schema(
    [("candidate", pa.string()), ("on_demand_run_id", pa.string()),
     ("spot_run_id", pa.string()), ("on_demand_cost_per_1m_output_usd", pa.float64()),
     ("spot_cost_per_1m_output_usd", pa.float64()), ("effective_discount", pa.float64()),
     ("what_if_spot_discount", pa.float64()), ("interruptions", pa.int64()),
     ("lost", pa.int64()), ("source", pa.string())]
)
DERIVED_METRICS_BY_CACHE = pa.schema(
    [
        ("run_id", pa.string()), ("step", pa.string()), ("cache", pa.string()),
        ("n_requests", pa.int64()), ("n_ok", pa.int64()),
        *_stats("ttft_s"), *_stats("e2e_s"),
    ]
)
# TTFT by context length (agentic sessions), per step × context bucket × cache class
TTFT_BY_CONTEXT = pa.schema(
    [
        ("run_id", pa.string()), ("step", pa.string()), ("context_lo", pa.int64()),
        ("context_hi", pa.int64()), ("cache", pa.string()), ("n_requests", pa.int64()),
        ("n_ok", pa.int64()), ("ttft_s_p50", pa.float64()), ("ttft_s_p90", pa.float64()),
        ("ttft_s_p99", pa.float64()), ("ttft_s_mean", pa.float64()), ("ttft_s_n", pa.int64()),
        ("cached_share", pa.float64()),
    ]
)
TELEMETRY_STEP_METRICS = pa.schema(
    [
        ("run_id", pa.string()), ("step", pa.string()), ("source", pa.string()),
        ("device", pa.string()), ("metric", pa.string()),
        ("mean", pa.float64()), ("max", pa.float64()), ("n", pa.int64()),
    ]
)
EXCLUDED_ITEM = pa.struct([("service", pa.string()), ("usage_type", pa.string()),
                           ("period_start", TS), ("amount", pa.float64())])
COST_PER_1M = pa.schema(
    [
        ("run_id", pa.string()), ("step", pa.string()), ("source", pa.string()),
        ("bill_source", pa.string()), ("bill_status", pa.string()),
        ("window_cost_usd", pa.float64()), ("output_tokens", pa.int64()),
        ("cost_per_1m_output_usd", pa.float64()), ("hourly_price_usd", pa.float64()),
        ("cost_per_1m_via_rate_usd", pa.float64()), ("cross_check_delta", pa.float64()),
        ("cross_check_note", pa.string()), ("included", pa.list_(pa.string())),
        ("excluded_items", pa.list_(EXCLUDED_ITEM)),
        ("price_region", pa.string()), ("purchase_option", pa.string()),
        ("retrieved_on", pa.string()),
    ]
)
HEADLINE = pa.schema(
    [
        ("run_id", pa.string()), ("candidate", pa.string()), ("instance_type", pa.string()),
        ("source", pa.string()), ("slo_ttft_s", pa.float64()), ("slo_tpot_s", pa.float64()),
        ("meets_slo", pa.bool_()), ("step", pa.string()), ("output_tok_s", pa.float64()),
        ("ttft_s_p99", pa.float64()), ("tpot_s_p99", pa.float64()),
        ("cost_per_1m_output_usd", pa.float64()), ("bill_status", pa.string()),
        # an SLO search's capacity and its cost (contract §3.5); null for a run without one
        ("slo_search_capacity", pa.float64()), ("slo_search_step", pa.string()),
        ("slo_search_cost_per_1m_output_usd", pa.float64()),
    ]
)
OUTPUTS: dict[str, pa.Schema] = {
    "derived_metrics": DERIVED_METRICS,
    "derived_metrics_by_cache": DERIVED_METRICS_BY_CACHE,
    "ttft_by_context": TTFT_BY_CONTEXT,
    "telemetry_metrics": TELEMETRY_STEP_METRICS,
    "cost_per_1m": COST_PER_1M,
    "headline": HEADLINE,
    "frontier": FRONTIER,
    "cost_what_if": COST_WHAT_IF,
    "frontier_levels": FRONTIER_LEVELS,  # the comparison's, across runs
    "episode": EPISODE,
    "scale_events": SCALE_EVENTS,
    "interruptions": INTERRUPTIONS,
    "spot_pairs": SPOT_PAIRS,  # the comparison's, across runs
    "derived_metrics_by_model": DERIVED_METRICS_BY_MODEL,
    "swaps": SWAPS,
}
_EPISODE_COLUMNS = ("slo_attainment", "e2e_norm_interactivity_tok_s", "replicas_mean",
                    "output_tok_s_per_replica")
OPTIONAL_OUTPUT_COLUMNS: dict[str, frozenset[str]] = {
    "derived_metrics": frozenset([name for name, _ in _stats("ttfat_s")]
                                 + ["reasoning_tokens", "spec_acceptance_rate", *_EPISODE_COLUMNS]),
    # a frontier written before SLO attainment joined it lacks the two columns
    "frontier": frozenset(["slo_attainment", "e2e_norm_interactivity_tok_s"]),
    # a headline written before the search columns existed lacks them
    "headline": frozenset(["slo_search_capacity", "slo_search_step",
                           "slo_search_cost_per_1m_output_usd"]),
}
# The JSON outputs' keys (contract §5, §3.4, §3.5).
GATE_KEYS = ("rule", "name", "passed", "offending_rows", "examples", "message")
JOB_KEYS = ("requests", "ok", "makespan_s", "output_tokens", "output_tok_s",
            "window_cost_usd", "cost_per_job_usd")
PROBE_KEYS = ("step", "target", "valid", "met")
# contract §3.7: episode.json
EPISODE_KEYS = ("duration_s", "requests", "ok", "slo_attainment", "replica_seconds",
                "idle_replica_seconds", "node_hours", "scale_ups", "scale_downs",
                "cold_start_s_max", "window_cost_usd", "cost_per_1m_output_usd", "idle_cost_usd",
                "bill_status")


def required_columns(name: str) -> tuple[str, ...]:
    """The columns every `<name>.parquet` has (the optional ones left out)."""
    optional = OPTIONAL_OUTPUT_COLUMNS.get(name, frozenset())
    return tuple(n for n in OUTPUTS[name].names if n not in optional)


class OutputSchemaError(AssertionError):
    """An analyzer output does not match its contract schema: a bug of the analyzer (or a
    column added to the SQL without its place in the contract), never bad input."""


def check_output(table: pa.Table, name: str) -> pa.Table:
    """`table` as the analyzer is about to write `<name>.parquet`, checked against
    OUTPUTS[name]: every required column present, every column the contract's, each of its
    type (a column of nulls only may be typed null). Returns the table unchanged."""
    schema = OUTPUTS[name]
    optional = OPTIONAL_OUTPUT_COLUMNS.get(name, frozenset())
    have = set(table.column_names)
    missing = [n for n in schema.names if n not in have and n not in optional]
    if missing:
        raise OutputSchemaError(f"{name}: column {missing[0]!r} missing (contract schema "
                                "resources/contract/schemas.py)")
    for field in table.schema:
        if field.name not in schema.names:
            raise OutputSchemaError(f"{name}: column {field.name!r} is not in its contract schema "
                                    "(add it to resources/contract/schemas.py and docs first)")
        want = schema.field(field.name).type
        if field.type != want and not pa.types.is_null(field.type):
            raise OutputSchemaError(f"{name}: column {field.name!r} is {field.type}, the "
                                    f"contract says {want}")
    return table
