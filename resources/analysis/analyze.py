"""The offline analyzer (contract §6): gates, metrics and cost for one run folder.

One implementation: `servingbench analyze`, the Dagster assets and the tests all call
`analyze_run`. Exit codes: 0 accepted, 3 rejected by a gate, 2 unreadable/malformed input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
from servingbench.resources.analysis import deployment_outputs, sqlfiles, workload_outputs
from servingbench.resources.analysis import frontier as frontier_mod
from servingbench.resources.analysis.gates import Gate, run_gates
from servingbench.resources.analysis.metrics import DEFAULT_SLO, step_metrics
from servingbench.resources.analysis.rundir import (
    MEMORY_ENV,
    RunFolder,
    is_disk_full,
    locate_unreadable,
    memory_limit,
    open_run,
)
from servingbench.resources.analysis.telemetry import read_telemetry, telemetry_metrics
from servingbench.resources.contract import durable, exits, run_files
from servingbench.resources.contract.manifest import ManifestError
from servingbench.resources.contract.outputs import check_output
from servingbench.resources.contract.schemas import SchemaError, write_parquet

ACCEPTED, MALFORMED, REJECTED = 0, 2, 3
NO_ROOM = exits.DISK_FULL  # the outputs did not fit on the disk (the input is fine)
NO_MEMORY = exits.NO_MEMORY  # more memory than DuckDB was allowed (raise it, analyze again)
COST_FILES = ("cost_per_1m.parquet", "headline.parquet")


@dataclass
class Analysis:
    run_dir: Path
    exit_code: int
    message: str = ""
    manifest: dict | None = None
    gates: list[dict] = field(default_factory=list)
    metrics: pa.Table | None = None
    cost: pa.Table | None = None
    headline: pa.Table | None = None
    partial: list[str] = field(default_factory=list)
    telemetry: pa.Table | None = None  # contract §3.2, when the run has telemetry.parquet
    job: dict | None = None            # contract §3.4, a batch run's job.json
    slo_capacity: dict | None = None   # contract §3.5, an SLO-search run's slo_capacity.json
    frontier: pa.Table | None = None   # contract §3.6, every readable run
    what_if: pa.Table | None = None    # contract §4.1, a run not rejected with price_bases
    context: pa.Table | None = None    # ttft_by_context.parquet: TTFT by context length
    # contract §3.7-§3.9: episodes, spot interruptions, several models (what applies)
    outputs: deployment_outputs.DeploymentOutputs | None = None

    @property
    def accepted(self) -> bool:
        return self.exit_code == ACCEPTED

    @property
    def failed_rules(self) -> list[dict]:
        return [g for g in self.gates if g["passed"] is False]


def cost_tables(run: RunFolder, metrics: pa.Table,
                slos: list[tuple[float, float]]) -> tuple[pa.Table, pa.Table]:
    """contract §4: the cost per 1M output tokens per step, and the SLO headline."""
    m, con = run.manifest, run.con
    cost = cost_rows(run, metrics)
    con.register("cost", cost)
    con.register("slos", pa.table({"slo_ttft_s": [float(a) for a, _ in slos],
                                   "slo_tpot_s": [float(b) for _, b in slos]}))
    headline = sqlfiles.query(con, "headline", run_id=m["run_id"], candidate=m["candidate"],
                              instance_type=m["instance_type"], source=m["source"])
    return cost, headline


def cost_rows(run: RunFolder, metrics: pa.Table) -> pa.Table:
    """contract §4 over each row's window of `metrics` (a step's, or a whole episode's):
    the bill's instance rate times the nodes in scope (the manifest's count, or the node
    timeline's integral for a run with node events)."""
    m, con = run.manifest, run.con
    basis = m["price_basis"] or {}
    con.register("metrics", metrics)
    return sqlfiles.query(
        con, "cost_per_1m", instance_type=m["instance_type"], node_count=m["node_count"],
        hourly_usd_per_node=basis.get("hourly_usd_per_node"), price_region=basis.get("region"),
        purchase_option=basis.get("purchase_option"), retrieved_on=basis.get("retrieved_on"),
        node_events=run.node_events, spot=is_spot(m))


def is_spot(manifest: dict) -> bool:
    """contract §2.1 `capacity` (absent: on-demand)."""
    return manifest.get("capacity") == "spot"


def _write_gates(run_dir: Path, gates: list[Gate]) -> None:
    run_files.write_gates(run_dir, [g.as_dict() for g in gates])


def write_workload_outputs(run: RunFolder, job: dict | None, capacity: dict | None,
                           context: pa.Table | None = None) -> None:
    """contract §3.1 always, TTFT by context length for session runs; §3.4 for a batch job, §3.5 for an
    SLO search."""
    write_parquet(check_output(workload_outputs.by_cache(run), "derived_metrics_by_cache"),
                  run.path / "derived_metrics_by_cache.parquet")
    context = context if context is not None else workload_outputs.by_context(run)
    if context is not None:
        write_parquet(check_output(context, "ttft_by_context"),
                      run.path / "ttft_by_context.parquet")
    for name, obj in (("job.json", job), ("slo_capacity.json", capacity)):
        if obj is not None:
            durable.write_json(run.path / name, obj)


def _write_outputs(run: RunFolder, gates, metrics, tm, cost, headline, job, capacity,
                   frontier, what_if, context, outputs) -> None:
    run_dir = run.path
    _write_gates(run_dir, gates)
    write_parquet(check_output(metrics, "derived_metrics"), run_dir / "derived_metrics.parquet")
    if tm is not None:
        write_parquet(check_output(tm, "telemetry_metrics"), run_dir / "telemetry_metrics.parquet")
    write_workload_outputs(run, job, capacity, context)
    write_parquet(check_output(frontier, "frontier"), run_dir / "frontier.parquet")
    outputs.write(run_dir)
    # a stale copy of a withheld output (a re-analysis now rejects the run) is removed
    for name, table in zip((*COST_FILES, "cost_what_if.parquet"), (cost, headline, what_if),
                           strict=True):
        if table is not None:
            write_parquet(check_output(table, name.removesuffix(".parquet")), run_dir / name)
        else:
            (run_dir / name).unlink(missing_ok=True)


def _no_scratch(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    return (f"disk full: DuckDB could not spill to the temporary directory ({text}); nothing "
            "was written: free space under TMPDIR (or point TMPDIR elsewhere) and analyze again")


def _no_memory(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    limit = memory_limit()
    return (f"out of memory: the analysis needed more than {MEMORY_ENV}={limit} allows ({text}); "
            f"nothing was written and the records are untouched: set {MEMORY_ENV} higher "
            "(e.g. 8GB) and analyze again")


def analyze_run(run_dir: Path, slos: list[tuple[float, float]] | None = None,
                write: bool = True, gated: list[Gate] = (),
                bucket_s: float | None = None) -> Analysis:
    """Gate, measure and cost one run folder; write its outputs beside the raw records.

    Raw records are never modified. A rejected run keeps them all; only the cost files
    are withheld (and a stale copy from an earlier analysis is removed). `gated`: rules
    already run on this folder in the same chain run (the pipeline's blocking checks, as
    they recorded them in gates.json), which are not run again. `bucket_s`: an episode's
    bucket length (contract §3.7), instead of its scenario's.
    """
    run_dir = Path(run_dir)
    slos = slos or [DEFAULT_SLO]
    try:
        run = open_run(run_dir)
    except (ManifestError, SchemaError) as exc:
        return Analysis(run_dir, MALFORMED, message=str(exc))
    except duckdb.OutOfMemoryException as exc:
        return Analysis(run_dir, NO_MEMORY, message=_no_memory(exc))
    except (duckdb.Error, OSError) as exc:
        if not is_disk_full(exc):
            raise
        return Analysis(run_dir, NO_ROOM, message=_no_scratch(exc))
    with run:
        try:
            telemetry = read_telemetry(run_dir)
        except SchemaError as exc:
            return Analysis(run_dir, MALFORMED, message=str(exc), manifest=run.manifest)
        try:
            # the metrics first: DuckDB releases the GIL while it works, so this overlaps
            # the Great Expectations import that the CLI started on a thread (gx.preload);
            # the gates, which need GX, then find it (nearly) ready
            metrics = step_metrics(run, slos[0], telemetry)
            tm = None if telemetry is None else telemetry_metrics(run, metrics, telemetry)
            gates = run_gates(run, gated)
            accepted = all(g.passed is not False for g in gates)
            cost = headline = None
            if accepted and run.has_bill:
                cost, headline = cost_tables(run, metrics, slos)
            job = workload_outputs.job(run.manifest, metrics, cost)
            capacity = workload_outputs.slo_capacity(run.manifest, metrics)
            context = workload_outputs.by_context(run)
            if headline is not None:
                headline = workload_outputs.with_slo_cost(headline, capacity, cost)
            frontier = frontier_mod.frontier(run, metrics, cost)
            what_if = frontier_mod.what_if(run, metrics) if accepted else None
            outputs = deployment_outputs.derive(
                run, metrics, cost, slos[0],
                cost_rows if accepted and run.has_bill else None, bucket_s)
        except (duckdb.Error, pa.ArrowException, OSError) as exc:
            if is_disk_full(exc):
                return Analysis(run_dir, NO_ROOM, message=_no_scratch(exc), manifest=run.manifest)
            if isinstance(exc, duckdb.OutOfMemoryException):
                return Analysis(run_dir, NO_MEMORY, message=_no_memory(exc), manifest=run.manifest)
            # a corrupt page passes the schema check and fails only when scanned: malformed
            # input, named by file; nothing has been written yet
            return Analysis(run_dir, MALFORMED, message=str(locate_unreadable(run_dir, exc)),
                            manifest=run.manifest)
        if write:
            try:
                _write_outputs(run, gates, metrics, tm, cost, headline, job, capacity,
                               frontier, what_if, context, outputs)
            except OSError as exc:
                if not durable.is_disk_full(exc):
                    raise
                # each output is whole or as before (durable writes); say which did not fit
                return Analysis(run_dir, NO_ROOM, manifest=run.manifest, message=(
                    f"disk full: cannot write {exc.filename or run_dir} ({exc.strerror}); "
                    "the records are untouched: make room and analyze again"))
        failed = [g for g in gates if g.passed is False]
        message = ("rejected by " + ", ".join(f"rule {g.rule} ({g.name})" for g in failed)
                   if failed else "accepted")
        return Analysis(run_dir, REJECTED if failed else ACCEPTED, message, run.manifest,
                        [g.as_dict() for g in gates], metrics, cost, headline, run.partial, tm,
                        job, capacity, frontier, what_if, context, outputs)
