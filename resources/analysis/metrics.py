"""contract §3: the per-step metrics of a run's steady phase (`step_metrics.sql`).

The analyzer, the telemetry join and an SLO search's verdict on a probe all read them from
here, below each of them."""

from __future__ import annotations

import pyarrow as pa

from resources.analysis import sqlfiles
from resources.analysis.rundir import RunFolder
from resources.contract.schemas import check_output

DEFAULT_SLO = (2.0, 0.1)  # p99 TTFT s, p99 TPOT s


def _manifest_steps(manifest: dict) -> pa.Table:
    steps = manifest["steps"]
    return pa.table({"step": pa.array([s["step"] for s in steps], pa.string()),
                     "client_limited": pa.array([bool(s["client_limited"]) for s in steps],
                                                pa.bool_())})


def step_metrics(run: RunFolder, slo: tuple[float, float] = DEFAULT_SLO) -> pa.Table:
    """contract §3 for every step of the steady phase."""
    run.con.register("manifest_steps", _manifest_steps(run.manifest))
    return check_output(sqlfiles.query(run.con, "step_metrics", run_id=run.manifest["run_id"],
                                       source=run.manifest["source"], slo_ttft_s=slo[0],
                                       slo_tpot_s=slo[1]), "derived_metrics")
