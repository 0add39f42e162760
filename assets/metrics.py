"""derived_metrics: contract §3 per step, from the gated raw records (derived_metrics.parquet)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from servingbench.assets.partitions import run_value
from servingbench.resources.analysis.analyze import NO_ROOM, analyze_run
from servingbench.resources.analysis.gates import recorded
from servingbench.resources.analysis.summary import job_text, slo_search_text, step_columns, table


def build(partitions_def) -> dg.AssetsDefinition:
    @dg.asset(partitions_def=partitions_def, group_name="benchmark",
              required_resource_keys={"slos"},
              description="Per-step latency, throughput, error rate and validity (contract §3), "
                          "written by the same analyzer as `servingbench analyze`.")
    def derived_metrics(context, steady_state_request_log: dict,
                        cost_explorer_bill: dict) -> dg.Output:
        run_dir = Path(steady_state_request_log["run_dir"])
        # the blocking checks gated the run just before and wrote gates.json
        result = analyze_run(run_dir, slos=list(context.resources.slos),
                             gated=recorded(run_dir))
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
                "steps": dg.MetadataValue.md(table(rows, step_columns(rows), markdown=True)),
                "invalid_steps": dg.MetadataValue.json(invalid),
                "gates": dg.MetadataValue.text(result.message),
                "parquet": dg.MetadataValue.path(str(run_dir / "derived_metrics.parquet")),
            } | workload_metadata(result, run_dir))

    return derived_metrics


def workload_metadata(result, run_dir: Path) -> dict:
    """A batch job's job.json (contract §3.4) and an SLO search's slo_capacity.json (§3.5),
    with the search's SLO cost when the run has a bill."""
    md = {}
    if result.job is not None:
        md["job"] = dg.MetadataValue.json(result.job)
        md["job_summary"] = dg.MetadataValue.md(job_text(result.job, markdown=True))
    if result.slo_capacity is not None:
        cost = None
        if result.headline is not None and result.headline.num_rows:
            cost = result.headline.to_pylist()[0].get("slo_search_cost_per_1m_output_usd")
        md["slo_capacity"] = dg.MetadataValue.json(result.slo_capacity)
        md["slo_search"] = dg.MetadataValue.md(
            slo_search_text(result.slo_capacity, cost, markdown=True))
        md["slo_cost_per_1m_output_usd"] = (dg.MetadataValue.float(float(cost))
                                            if cost is not None else dg.MetadataValue.null())
    return md
