"""cost_per_1m_output_tokens: contract §4 per step and the SLO headline, into the DuckDB file
(and cost_per_1m.parquet / headline.parquet in the run folder). Never for a rejected run."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
from servingbench.assets.partitions import run_value
from servingbench.resources.analysis.frontier import levels_of_folders
from servingbench.resources.analysis.metrics import DEFAULT_SLO
from servingbench.resources.analysis.spot import pairs_of_folders
from servingbench.resources.analysis.summary import (
    FRONTIER_COLUMNS,
    WHAT_IF_COLUMNS,
    cost_rows,
    headline_columns,
    headline_rows,
    levels_text,
    not_measured,
    table,
)
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract import run_files


def build(partitions_def) -> dg.AssetsDefinition:
    @dg.asset(partitions_def=partitions_def, group_name="benchmark",
              required_resource_keys={"storage"},
              description="Cost per 1M output tokens per step and the SLO headline (contract §4).")
    def cost_per_1m_output_tokens(context, derived_metrics: dict,
                                  quality: dict) -> dg.Output:
        # `quality` is an input so that its blocking parity check withholds this table:
        # candidates are compared on cost only under the same quality.
        run_dir = Path(derived_metrics["run_dir"])
        if not derived_metrics["accepted"] or not (run_dir / "cost_per_1m.parquet").exists():
            raise dg.Failure(description="the run was rejected by a gate: its cost is withheld "
                                         f"(see {run_dir / run_files.GATES})")
        tables = {name: pq.read_table(run_dir / f"{name}.parquet")
                  for name in ("derived_metrics", "cost_per_1m", "headline", "telemetry_metrics",
                               "frontier", "cost_what_if")
                  if name in ("derived_metrics", "cost_per_1m", "headline")
                  or (run_dir / f"{name}.parquet").exists()}
        manifest = mf.load(run_dir / "manifest.json")
        storage = context.resources.storage
        storage.publish(derived_metrics["run_id"], str(context.partition_key), manifest, tables)
        cost, headline = tables["cost_per_1m"].to_pylist(), tables["headline"].to_pylist()
        title = "EMULATED — " if manifest["source"] == "emulated" else ""
        headline_md = table(headline_rows(headline), headline_columns(headline), markdown=True)
        if any(r["meets_slo"] is None for r in headline):
            # contract §4: no valid step is "not measured", with each step's reason
            headline_md += "\n\n**Not measured** (no valid step):\n\n" + "\n".join(
                f"- {line}" for line in not_measured(tables["derived_metrics"].to_pylist(),
                                                     manifest))
        frontier_md = _frontier_metadata(storage, tables, headline, title)
        return dg.Output(
            run_value(derived_metrics["run_id"], run_dir,
                      bill_status=sorted({r["bill_status"] for r in cost})),
            metadata={
                "source": dg.MetadataValue.text(manifest["source"]),
                "cost_per_1m": dg.MetadataValue.md(f"{title}cost per 1M output tokens\n\n"
                                                   + table(*cost_rows(
                                                       cost, tables["derived_metrics"].to_pylist()),
                                                       markdown=True)),
                "headline": dg.MetadataValue.md(headline_md),
                "bill_status": dg.MetadataValue.text(",".join(sorted({r["bill_status"] for r in cost}))),
                "duckdb": dg.MetadataValue.path(str(storage.duckdb_path)),
                "run_dir": dg.MetadataValue.path(str(run_dir)),
                "parquet": dg.MetadataValue.path(str(run_dir / "cost_per_1m.parquet")),
            } | frontier_md)

    return cost_per_1m_output_tokens


def _frontier_metadata(storage, tables: dict, headline: list[dict], title: str) -> dict:
    """The run's frontier and its what-if costs (contract §3.6, §4.1), and the interactivity
    levels across the latest accepted run of every candidate in the data folder, which also
    replace the DuckDB table `frontier_levels`."""
    md = {}
    if "frontier" in tables:
        md["frontier"] = dg.MetadataValue.md(
            f"{title}frontier (steps on it: on_frontier)\n\n"
            + table(tables["frontier"].to_pylist(), FRONTIER_COLUMNS, markdown=True))
    if "cost_what_if" in tables:
        md["cost_what_if"] = dg.MetadataValue.md(
            f"{title}WHAT-IF cost per 1M output tokens at other price bases (not billed)\n\n"
            + table(tables["cost_what_if"].to_pylist(), WHAT_IF_COLUMNS, markdown=True))
    slo_ttft = headline[0]["slo_ttft_s"] if headline else DEFAULT_SLO[0]
    dirs = sorted(p.parent for p in storage.runs_dir.glob("*/manifest.json"))
    levels = levels_of_folders(dirs, slo_ttft, skip_broken=True)
    storage.replace_levels(levels)
    # contract §3.8: spot against on-demand per candidate, across the same folders
    storage.replace_spot_pairs(pairs_of_folders(dirs, skip_broken=True))
    md["interactivity_levels"] = dg.MetadataValue.md(
        f"{title}cheapest candidate at each interactivity level (p99 TTFT <= {slo_ttft:g} s), "
        f"latest accepted run of each candidate\n\n" + levels_text(levels.to_pylist(),
                                                                     markdown=True))
    return md
