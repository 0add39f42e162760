"""The analyzer's outputs (contract §3, §3.1, §3.2, §4): the Arrow schema of every output file
and the keys of its JSON outputs. The analyzer's SQL results are checked against them before
they are written (`check_output`), and every reader (the report, the store, tests) takes its
columns from here. The records' own schemas, and their reader, are schemas.py's."""

from __future__ import annotations

import pyarrow as pa
from servingbench.resources.contract.schemas import TS

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
                                    "(add it to resources/contract/outputs.py and docs first)")
        want = schema.field(field.name).type
        if field.type != want and not pa.types.is_null(field.type):
            raise OutputSchemaError(f"{name}: column {field.name!r} is {field.type}, the "
                                    f"contract says {want}")
    return table
