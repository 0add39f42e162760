"""contract §3: the per-step metrics of a run's steady phase (`step_metrics.sql`).

The analyzer, the telemetry join and an SLO search's verdict on a probe all read them from
here, below each of them."""

from __future__ import annotations

import pyarrow as pa
from servingbench.resources.analysis import sqlfiles
from servingbench.resources.analysis.rundir import RunFolder
from servingbench.resources.contract.outputs import check_output

DEFAULT_SLO = (2.0, 0.1)  # p99 TTFT s, p99 TPOT s


def _manifest_steps(manifest: dict) -> pa.Table:
    steps = manifest["steps"]
    return pa.table({"step": pa.array([s["step"] for s in steps], pa.string()),
                     "client_limited": pa.array([bool(s["client_limited"]) for s in steps],
                                                pa.bool_())})


def step_metrics(run: RunFolder, slo: tuple[float, float] = DEFAULT_SLO,
                 telemetry: pa.Table | None = None) -> pa.Table:
    """contract §3 for every step of the steady phase; `spec_acceptance_rate` from the
    telemetry's speculative-decoding counters (null without them)."""
    metrics = query(run, slo)
    return check_output(with_spec_acceptance(run, metrics, telemetry), "derived_metrics")


def query(run: RunFolder, slo: tuple[float, float], model: str | None = None) -> pa.Table:
    """sql/step_metrics.sql over every steady request, or (`model`) one model's requests
    over each step's own window (contract §3.9)."""
    run.con.register("manifest_steps", _manifest_steps(run.manifest))
    return sqlfiles.query(run.con, "step_metrics", run_id=run.manifest["run_id"],
                          source=run.manifest["source"], slo_ttft_s=slo[0], slo_tpot_s=slo[1],
                          fixed_replicas=run.fixed_replicas, model=model)


def with_spec_acceptance(run: RunFolder, metrics: pa.Table,
                         telemetry: pa.Table | None) -> pa.Table:
    """`metrics` with contract §3's `spec_acceptance_rate` (sql/spec_acceptance.sql) placed
    before `valid`; all null when the run has no telemetry or no speculative counters."""
    rates: dict[str, float | None] = {}
    if telemetry is not None and metrics.num_rows:
        run.con.register("telemetry", telemetry)
        run.con.register("metrics", metrics)
        out = sqlfiles.query(run.con, "spec_acceptance")
        rates = dict(zip(out.column("step").to_pylist(),
                         out.column("spec_acceptance_rate").to_pylist(), strict=True))
    column = pa.array([rates.get(s) for s in metrics.column("step").to_pylist()], pa.float64())
    return metrics.add_column(metrics.schema.get_field_index("valid"),
                              pa.field("spec_acceptance_rate", pa.float64()), column)
