"""The frontier (contract §3.6) and the what-if price bases (§4.1): per run
`frontier.parquet` and `cost_what_if.parquet`, across runs `frontier_levels.parquet`.

The SQL lives in sql/frontier.sql, sql/cost_what_if.sql and sql/frontier_levels.sql; this
module only hands each query its inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from servingbench.resources.analysis import sqlfiles
from servingbench.resources.analysis.rundir import RunFolder
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract import parity, run_files
from servingbench.resources.contract.accelerators import accelerators
from servingbench.resources.contract.outputs import COST_WHAT_IF, FRONTIER, FRONTIER_LEVELS

DEFAULT_LEVELS = (5.0, 10.0, 20.0, 50.0, 100.0, 200.0)  # tok/s one user sees
_NO_COST = pa.schema([("step", pa.string()), ("window_cost_usd", pa.float64()),
                      ("cost_per_1m_output_usd", pa.float64()), ("bill_status", pa.string())])


def frontier(run: RunFolder, metrics: pa.Table, cost: pa.Table | None) -> pa.Table:
    """contract §3.6 per step; the cost columns only from an accepted bill (`cost`)."""
    return derive(run.manifest, metrics, cost, run.con)


def derive(manifest: dict, metrics: pa.Table, cost: pa.Table | None,
           con: duckdb.DuckDBPyConnection | None = None) -> pa.Table:
    """The frontier from a run's derived metrics and cost rows (also for a folder analysed
    before frontier.parquet existed: the report derives it the same way)."""
    own = con is None
    con = duckdb.connect() if own else con
    try:
        con.register("metrics", _with_columns(metrics, _METRICS_ADDED))
        con.register("cost", (cost.select(_NO_COST.names) if cost is not None
                              else _NO_COST.empty_table()))
        points = sqlfiles.query(con, "frontier", candidate=manifest.get("candidate"),
                                accelerators=accelerators(manifest))
        table = pareto(points, con=con)
    finally:
        if own:
            con.close()
    return as_frontier(table)


# derived metrics written before contract §3's SLO attainment columns lack them (null there)
_METRICS_ADDED = (("slo_attainment", pa.float64()), ("e2e_norm_interactivity_tok_s", pa.float64()))


def _with_columns(table: pa.Table, columns) -> pa.Table:
    for name, typ in columns:
        if name not in table.column_names:
            table = table.append_column(pa.field(name, typ), pa.nulls(table.num_rows, typ))
    return table


def as_frontier(table: pa.Table) -> pa.Table:
    """`table` in FRONTIER's columns and order (a frontier written before its optional
    columns existed gets them as nulls)."""
    return _with_columns(table, [(f.name, f.type) for f in FRONTIER]).select(
        FRONTIER.names).cast(FRONTIER)


def pareto(points: pa.Table, ranked: Sequence[bool] | None = None,
           con: duckdb.DuckDBPyConnection | None = None) -> pa.Table:
    """`points` (frontier rows of one run, or of several pooled; other columns kept, in
    order) with `on_frontier` by contract §3.6's rule, which sql/pareto.sql alone writes.
    `ranked`, one flag per row: false for a point never on a frontier (its run failed
    quality parity); an `on_frontier` column already there is recomputed."""
    if "on_frontier" in points.column_names:
        points = points.drop_columns(["on_frontier"])
    n = points.num_rows
    points = points.append_column("ord", pa.array(range(n), pa.int64())).append_column(
        "ranked", pa.array([True] * n if ranked is None else [bool(r) for r in ranked],
                           pa.bool_()))
    own = con is None
    con = duckdb.connect() if own else con
    try:
        con.register("points", points)
        return sqlfiles.query(con, "pareto")
    finally:
        if own:
            con.close()
        else:
            con.unregister("points")


def what_if(run: RunFolder, metrics: pa.Table) -> pa.Table | None:
    """contract §4.1: every step at every price basis of the manifest; None without any."""
    return price_what_if(run.manifest, metrics, run.con)


def price_what_if(m: dict, metrics: pa.Table, con: duckdb.DuckDBPyConnection) -> pa.Table | None:
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
        con.register("frontier", pa.concat_tables([as_frontier(f) for f in frontiers])
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


def cheapest_by_level(levels: Sequence[Mapping], bands: Mapping[str, float | None] | None = None
                      ) -> list[dict]:
    """frontier_levels rows (contract §3.6) as one row per level and source: the cheapest
    candidate (rank 1), the runner-up (the next ranked row) and how much dearer it is. Measured
    and emulated are ranked apart, so each level has a row per source present. `bands`
    (candidate -> an emulated candidate's relative error band): `within_bands` says when the
    emulated cheapest and runner-up lie within each other's bands (no winner between them)."""
    from servingbench.resources.analysis.ranking import overlap
    bands = bands or {}
    groups: dict[tuple, list[Mapping]] = {}
    for r in levels:
        groups.setdefault((r["level_tok_s"], r["source"]), []).append(r)
    out = []
    for (level, source), rows in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        ranked = sorted((r for r in rows if r.get("rank") is not None),
                        key=lambda r: (r["rank"], r["candidate"]))
        first = ranked[0] if ranked else None
        second = ranked[1] if len(ranked) > 1 else None
        ratio = None
        if first and second and first["cost_per_1m_output_usd"]:
            ratio = second["cost_per_1m_output_usd"] / first["cost_per_1m_output_usd"]
        out.append({
            "level_tok_s": level, "source": source,
            "reached": sum(r.get("step") is not None for r in rows), "of": len(rows),
            "cheapest": first["candidate"] if first else None,
            "step": first["step"] if first else None,
            "cost_per_1m_output_usd": first["cost_per_1m_output_usd"] if first else None,
            "runner_up": second["candidate"] if second else None,
            "runner_up_cost_per_1m_output_usd": (second["cost_per_1m_output_usd"]
                                                 if second else None),
            "ratio": ratio,
            "within_bands": bool(
                source == "emulated" and first and second and first["cost_per_1m_output_usd"]
                and second["cost_per_1m_output_usd"]
                and overlap(first["cost_per_1m_output_usd"], bands.get(first["candidate"]),
                            second["cost_per_1m_output_usd"], bands.get(second["candidate"])))})
    return out


def read_frontier(run_dir: Path, manifest: dict) -> pa.Table | None:
    """A run folder's frontier.parquet; for a folder analysed before it existed, derived from
    derived_metrics.parquet (and cost_per_1m.parquet); None when the run was never analysed."""
    run_dir = Path(run_dir)
    if (run_dir / "frontier.parquet").exists():
        return as_frontier(pq.read_table(run_dir / "frontier.parquet"))
    if not (run_dir / "derived_metrics.parquet").exists():
        return None
    metrics = pq.read_table(run_dir / "derived_metrics.parquet")
    cost = (pq.read_table(run_dir / "cost_per_1m.parquet")
            if (run_dir / "cost_per_1m.parquet").exists() else None)
    return derive(manifest, metrics, cost)


@dataclass(frozen=True)
class LevelRun:
    """One run as the levels see it: its frontier, and whether it may be ranked."""

    run_id: str
    candidate: str
    source: str
    created_at: str
    accepted: bool
    rankable: bool            # false: quality parity failed (shown, never ranked)
    frontier: pa.Table


def level_run(run_dir: Path) -> LevelRun | None:
    """Read what the levels need from a run folder; None when it has no frontier yet."""
    run_dir = Path(run_dir)
    manifest = mf.load(run_dir / "manifest.json")
    table = read_frontier(run_dir, manifest)
    if table is None:
        return None
    try:
        accepted = bool(run_files.accepted(run_files.read_gates(run_dir)))
    except run_files.RunFileError:
        accepted = False  # gates that cannot be read accept nothing
    return LevelRun(manifest["run_id"], manifest.get("candidate") or manifest["run_id"],
                    manifest["source"], manifest["created_at"], accepted,
                    not parity.run_failed(run_dir), table)


def latest_accepted(runs: Sequence[LevelRun]) -> list[LevelRun]:
    """The latest accepted run of each candidate (by created_at, then run_id)."""
    best = run_files.latest([r for r in runs if r.accepted], lambda r: r.candidate,
                            lambda r: (mf.parse_ts(r.created_at), r.run_id))
    return [best[c] for c in sorted(best)]


def levels_of(runs: Sequence[LevelRun], slo_ttft_s: float,
              level_values: Sequence[float] = DEFAULT_LEVELS) -> pa.Table:
    """frontier_levels over the latest accepted run of each candidate among `runs`."""
    chosen = latest_accepted(runs)
    return levels([r.frontier for r in chosen],
                  [{"run_id": r.run_id, "candidate": r.candidate, "source": r.source,
                    "rankable": r.rankable} for r in chosen], slo_ttft_s, level_values)


def levels_of_folders(run_dirs: Sequence[Path], slo_ttft_s: float,
                      level_values: Sequence[float] = DEFAULT_LEVELS,
                      skip_broken: bool = False) -> pa.Table:
    """frontier_levels over run folders; `skip_broken`: a folder that cannot be read (a
    broken manifest or output, as a data folder may hold) is left out instead of raising."""
    runs = []
    for d in run_dirs:
        try:
            r = level_run(Path(d))
        except (mf.ManifestError, pa.ArrowException, OSError, ValueError):
            if not skip_broken:
                raise
            continue
        if r is not None:
            runs.append(r)
    return levels_of(runs, slo_ttft_s, level_values)
