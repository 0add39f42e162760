"""Episodes (contract §3.7): a run whose load follows an arrival schedule while replicas and
nodes come and go. `episode.parquet` (the steady phase in buckets), `scale_events.parquet`
(each scale decision: how long until its node, its replica and its first token, the replica's
start-up phases, SLO attainment before / during / after) and `episode.json` (the whole
episode: attainment, replica- and node-time, idle replica-time, cost from the bill).

The SQL is sql/episode_buckets.sql, sql/scale_events.sql and sql/episode_totals.sql over the
timeline of events.parquet (sql/timeline.sql); this module picks the runs, the phase and
the bucket length, and costs the whole steady phase with §4's query.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from servingbench.resources.analysis import sqlfiles
from servingbench.resources.analysis.rundir import RunFolder
from servingbench.resources.contract.outputs import EPISODE_KEYS, check_output
from servingbench.resources.contract.timestamps import parse_ts

DEFAULT_BUCKET_S = 10.0
EPISODE_STEP = "episode"  # the cost row's step name for the whole steady phase


def is_episode(manifest: dict) -> bool:
    """A schedule scenario, a non-null autoscaling, or more than one replica at most."""
    scenario = manifest.get("scenario") or {}
    return (scenario.get("kind") == "schedule" or manifest.get("autoscaling") is not None
            or ((manifest.get("replicas") or {}).get("max") or 1) > 1)


def bucket_s(manifest: dict, override: float | None = None) -> float:
    """`--bucket-s`, else the scenario's `bucket_s`, else 10 s."""
    if override is not None:
        return float(override)
    return float((manifest.get("scenario") or {}).get("bucket_s") or DEFAULT_BUCKET_S)


def steady_span(run: RunFolder) -> tuple[int, int] | None:
    """The steady phase in ns: the manifest's `phases.steady`, else the steady requests'
    [first sent_at, last finished_at]; None when neither is known."""
    steady = run.manifest["phases"].get("steady") or {}
    if steady.get("started_at") and steady.get("ended_at"):
        return parse_ts(steady["started_at"]), parse_ts(steady["ended_at"])
    [(a, b)] = run.con.execute(
        "SELECT epoch_ns(min(sent_at)), epoch_ns(max(finished_at)) FROM steady").fetchall()
    return None if a is None or b is None else (int(a), int(b))


@dataclass
class Episode:
    buckets: pa.Table
    scale_events: pa.Table
    summary: dict


def derive(run: RunFolder, slo: tuple[float, float], cost_rows=None,
           override_bucket_s: float | None = None) -> Episode | None:
    """contract §3.7 for an episode run (None for any other, or without a steady phase).
    `cost_rows(run, metrics)`: §4's query over the given windows, for an accepted run with a
    bill; None leaves the cost fields null (a rejected run, or one without a bill)."""
    m = run.manifest
    if not is_episode(m):
        return None
    span = steady_span(run)
    if span is None:
        return None
    start, end = span
    b_ns = max(1, round(bucket_s(m, override_bucket_s) * 1e9))
    n = max(0, -(-(end - start) // b_ns))
    counts = dict(fixed_replicas=run.fixed_replicas, fixed_nodes=run.fixed_nodes)
    buckets = sqlfiles.query(run.con, "episode_buckets", run_id=m["run_id"], start_ns=start,
                             end_ns=end, bucket_ns=b_ns, n_buckets=n, slo_ttft_s=slo[0],
                             slo_tpot_s=slo[1], **counts)
    initial = int((m.get("replicas") or {}).get("initial") or 1)
    scale = sqlfiles.query(run.con, "scale_events", run_id=m["run_id"], initial=initial,
                           slo_ttft_s=slo[0], slo_tpot_s=slo[1])
    [totals] = sqlfiles.query(run.con, "episode_totals", start_ns=start, end_ns=end,
                              slo_ttft_s=slo[0], slo_tpot_s=slo[1], **counts).to_pylist()
    directions = scale.column("direction").to_pylist()
    summary = {
        "duration_s": (end - start) / 1e9,
        "requests": totals["requests"], "ok": totals["ok"],
        "slo_attainment": totals["slo_attainment"],
        "replica_seconds": totals["replica_seconds"],
        "idle_replica_seconds": totals["idle_replica_seconds"],
        "node_hours": totals["node_hours"],
        "scale_ups": directions.count("up"), "scale_downs": directions.count("down"),
        "cold_start_s_max": totals["cold_start_s_max"],
        "window_cost_usd": None, "cost_per_1m_output_usd": None, "idle_cost_usd": None,
        "bill_status": None,
    }
    if cost_rows is not None:
        summary.update(_cost(run, cost_rows, start, end, totals))
    assert tuple(summary) == EPISODE_KEYS
    return Episode(check_output(buckets, "episode"), check_output(scale, "scale_events"),
                   summary)


def _cost(run: RunFolder, cost_rows, start: int, end: int, totals: dict) -> dict:
    """§4 over the whole steady phase (not a step's window), per 1M of the OK requests'
    output tokens; the idle share of it by replica-time."""
    m = run.manifest
    window_s = (end - start) / 1e9
    tokens = totals["output_tokens"]
    ts = pa.timestamp("ns", tz="UTC")
    metrics = pa.table({
        "run_id": [m["run_id"]], "step": [EPISODE_STEP], "source": [m["source"]],
        "load_mode": pa.array([None], pa.string()), "target": pa.array([None], pa.float64()),
        "output_tokens": pa.array([tokens], pa.int64()),
        "output_tok_s": pa.array([tokens / window_s if tokens is not None and window_s else None],
                                 pa.float64()),
        "window_start": pa.array([start], ts), "window_end": pa.array([end], ts)})
    [row] = cost_rows(run, metrics).to_pylist()
    cost = row["window_cost_usd"]
    idle, seconds = totals["idle_replica_seconds"], totals["replica_seconds"]
    return {"window_cost_usd": cost, "cost_per_1m_output_usd": row["cost_per_1m_output_usd"],
            "idle_cost_usd": (cost * idle / seconds if cost is not None and idle is not None
                              and seconds else None),
            "bill_status": row["bill_status"]}
