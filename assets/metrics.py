"""derived_metrics: contract §3 per step, from the gated raw records (derived_metrics.parquet)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from assets.partitions import run_value
from resources.analysis.analyze import NO_ROOM, analyze_run
from resources.analysis.summary import STEP_COLUMNS, table


def build(partitions_def) -> dg.AssetsDefinition:
    @dg.asset(partitions_def=partitions_def, group_name="benchmark",
              required_resource_keys={"slos"},
              description="Per-step latency, throughput, error rate and validity (contract §3), "
                          "written by the same analyzer as `servingbench analyze`.")
    def derived_metrics(context, steady_state_request_log: dict,
                        cost_explorer_bill: dict) -> dg.Output:
        run_dir = Path(steady_state_request_log["run_dir"])
        result = analyze_run(run_dir, slos=list(context.resources.slos))
        if result.exit_code == 2:
            raise dg.Failure(description=f"malformed run folder: {result.message}")
        if result.exit_code == NO_ROOM:
            raise dg.Failure(description=f"analysis outputs not written: {result.message}")
        rows = result.metrics.to_pylist()
        invalid = {r["step"]: r["invalid_reason"] for r in rows if not r["valid"]}
        return dg.Output(
            run_value(result.manifest["run_id"], run_dir, accepted=result.accepted,
                      source=result.manifest["source"]),
            metadata={
                "source": dg.MetadataValue.text(result.manifest["source"]),
                "steps": dg.MetadataValue.md(table(rows, STEP_COLUMNS, markdown=True)),
                "invalid_steps": dg.MetadataValue.json(invalid),
                "gates": dg.MetadataValue.text(result.message),
                "parquet": dg.MetadataValue.path(str(run_dir / "derived_metrics.parquet")),
            })

    return derived_metrics
