"""The outputs of runs beyond one fixed deployment (contract §3.7–§3.9), derived and written
together: episodes (episode.parquet, scale_events.parquet, episode.json), spot interruptions
(interruptions.parquet) and several models on one node (derived_metrics_by_model.parquet,
swaps.parquet). Each is written for the runs its section names, rejected runs included (with
the cost fields null); a run it does not apply to gets none, and a stale copy from an
earlier analysis is removed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from servingbench.resources.analysis import episode as episode_mod
from servingbench.resources.analysis import models as models_mod
from servingbench.resources.analysis import sqlfiles
from servingbench.resources.analysis.rundir import RunFolder
from servingbench.resources.contract import durable, run_files
from servingbench.resources.contract.outputs import check_output
from servingbench.resources.contract.schemas import write_parquet

FILES = ("episode.parquet", "scale_events.parquet", run_files.EPISODE, "interruptions.parquet",
         "derived_metrics_by_model.parquet", "swaps.parquet")


@dataclass
class DeploymentOutputs:
    episode: episode_mod.Episode | None = None
    interruptions: pa.Table | None = None
    by_model: pa.Table | None = None
    swaps: pa.Table | None = None

    def tables(self) -> dict[str, pa.Table | dict | None]:
        e = self.episode
        return {"episode.parquet": e and e.buckets, "scale_events.parquet": e and e.scale_events,
                run_files.EPISODE: e and e.summary, "interruptions.parquet": self.interruptions,
                "derived_metrics_by_model.parquet": self.by_model,
                "swaps.parquet": self.swaps}

    def write(self, run_dir: Path) -> None:
        for name, obj in self.tables().items():
            path = Path(run_dir) / name
            if obj is None:
                path.unlink(missing_ok=True)
            elif isinstance(obj, dict):
                durable.write_json(path, obj)
            else:
                write_parquet(check_output(obj, name.removesuffix(".parquet")), path)


def interruptions(run: RunFolder) -> pa.Table | None:
    """contract §3.8 for a spot run: one row per interruption notice (none: an empty file)."""
    if run.manifest.get("capacity") != "spot":
        return None
    [(known,)] = run.con.execute(
        "SELECT count(*) > 0 FROM steady WHERE replica IS NOT NULL").fetchall()
    table = sqlfiles.query(run.con, "interruptions", run_id=run.manifest["run_id"],
                           replica_known=bool(known))
    return check_output(table, "interruptions")


def derive(run: RunFolder, metrics: pa.Table, cost: pa.Table | None, slo: tuple[float, float],
           cost_rows=None, bucket_s: float | None = None) -> DeploymentOutputs:
    """Every §3.7–§3.9 output that applies to `run`. `cost` (§4's per-step rows) and
    `cost_rows` (§4's query, for the whole episode) only for an accepted run with a bill."""
    return DeploymentOutputs(
        episode=episode_mod.derive(run, slo, cost_rows, bucket_s),
        interruptions=interruptions(run),
        by_model=models_mod.by_model(run, metrics, cost, slo),
        swaps=models_mod.swaps(run))
