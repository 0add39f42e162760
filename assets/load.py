"""warmup_log and steady_state_request_log: the load generator's raw records (contract §2.2)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
from servingbench.resources.analysis.summary import table

# The load generator's watch on itself per step (manifest `steps[]`), not the step metrics.
SELF_WATCH_COLUMNS = [("step", "step", ""), ("load_mode", "mode", ""), ("target", "target", ""),
                ("client_limited", "client limited", ""), ("client_cpu_share", "client CPU", ".2f"),
                ("loop_lag_p99_s", "loop lag p99 s", ".4f")]


def log_metadata(run_dir: Path, name: str, manifest: dict, phase: str) -> dict:
    path = Path(run_dir) / f"{name}.parquet"
    statuses = Counter(pq.read_table(path, columns=["status"])["status"].to_pylist())
    span = manifest["phases"].get(phase) or {}
    md = {"rows": dg.MetadataValue.int(sum(statuses.values())),
          "parquet": dg.MetadataValue.path(str(path)),
          "statuses": dg.MetadataValue.json(dict(statuses)),
          "source": dg.MetadataValue.text(manifest["source"]),
          "started_at": dg.MetadataValue.text(str(span.get("started_at"))),
          "ended_at": dg.MetadataValue.text(str(span.get("ended_at")))}
    if phase == "steady":
        md["steps"] = dg.MetadataValue.md(table(manifest["steps"], SELF_WATCH_COLUMNS, markdown=True))
        md["chunk_log"] = dg.MetadataValue.path(str(Path(run_dir) / "chunk_log.parquet"))
        md["scenario"] = dg.MetadataValue.json(manifest["scenario"] or {})
    return md
