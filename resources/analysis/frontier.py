"""The frontier (contract §3.6) and the what-if price bases (§4.1): per run
`frontier.parquet` and `cost_what_if.parquet`, across runs `frontier_levels.parquet`.

The SQL lives in sql/frontier.sql, sql/cost_what_if.sql and sql/frontier_levels.sql; this
module only hands each query its inputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
import pyarrow as pa

from resources.analysis import sqlfiles
from resources.analysis.rundir import RunFolder
from resources.contract.accelerators import accelerators
from resources.contract.schemas import COST_WHAT_IF, FRONTIER, FRONTIER_LEVELS

DEFAULT_LEVELS = (5.0, 10.0, 20.0, 50.0, 100.0, 200.0)  # tok/s one user sees
_NO_COST = pa.schema([("step", pa.string()), ("window_cost_usd", pa.float64()),
                      ("cost_per_1m_output_usd", pa.float64()), ("bill_status", pa.string())])


def frontier(run: RunFolder, metrics: pa.Table, cost: pa.Table | None) -> pa.Table:
    """contract §3.6 per step; the cost columns only from an accepted bill (`cost`)."""
    m, con = run.manifest, run.con
    con.register("metrics", metrics)
    con.register("cost", (cost.select(_NO_COST.names) if cost is not None
                          else _NO_COST.empty_table()))
    table = sqlfiles.query(con, "frontier", candidate=m.get("candidate"),
                           accelerators=accelerators(m))
    return table.cast(FRONTIER)


def what_if(run: RunFolder, metrics: pa.Table) -> pa.Table | None:
    """contract §4.1: every step at every price basis of the manifest; None without any."""
    m, con = run.manifest, run.con
    bases = m.get("price_bases") or []
    if not bases:
        return None
    con.register("metrics", metrics)
    con.register("bases", pa.table({
        "ord": pa.array(range(len(bases)), pa.int64()),
        "basis": pa.array([b["basis"] for b in bases], pa.string()),
        "hourly_usd_per_node": pa.array([float(b["hourly_usd_per_node"]) for b in bases],
                                        pa.float64()),
        "price_source": pa.array([b["price_source"] for b in bases], pa.string()),
        "retrieved_on": pa.array([b.get("retrieved_on") for b in bases], pa.string()),
        "region": pa.array([b.get("region") for b in bases], pa.string())}))
    table = sqlfiles.query(con, "cost_what_if", node_count=m["node_count"])
    return table.cast(COST_WHAT_IF)


def levels(frontiers: Sequence[pa.Table], runs: Sequence[dict],
           slo_ttft_s: float, level_values: Sequence[float] = DEFAULT_LEVELS) -> pa.Table:
    """contract §3.6 across runs: `frontiers` are the frontier tables of the latest accepted
    run of each candidate, `runs` one {run_id, candidate, source, rankable} each (rankable
    false: a run that failed quality parity is shown, never ranked)."""
    con = duckdb.connect()
    try:
        con.register("frontier", pa.concat_tables([f.cast(FRONTIER) for f in frontiers])
                     if frontiers else FRONTIER.empty_table())
        con.register("level_runs", pa.table({
            "run_id": pa.array([r["run_id"] for r in runs], pa.string()),
            "candidate": pa.array([r["candidate"] for r in runs], pa.string()),
            "source": pa.array([r["source"] for r in runs], pa.string()),
            "rankable": pa.array([bool(r["rankable"]) for r in runs], pa.bool_())}))
        con.register("levels", pa.table({"level_tok_s": pa.array(
            sorted({float(v) for v in level_values}), pa.float64())}))
        return sqlfiles.query(con, "frontier_levels", slo_ttft_s=float(slo_ttft_s)).cast(
            FRONTIER_LEVELS)
    finally:
        con.close()
