"""Where outputs live: one data folder of run folders (contract §6) and one DuckDB file with the
tables people query across runs (`runs`, `derived_metrics`, `cost_per_1m`, `headline`,
`telemetry_metrics`, `frontier`, `cost_what_if`, and `frontier_levels` across the latest
accepted run of each candidate, `spot_pairs` across its spot and on-demand runs), and the
candidates ranked on cost from them (`ranking`)."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from servingbench.resources.contract.timestamps import format_ts

TABLES = ("derived_metrics", "cost_per_1m", "headline", "telemetry_metrics", "frontier",
          "cost_what_if")
LOCK_WAIT_S = 120.0  # parallel runs publish one after another: each holds the file briefly


def connect(path: Path, read_only: bool = False, wait_s: float = LOCK_WAIT_S):
    """Open the DuckDB file, waiting (bounded) while another process holds its lock: DuckDB
    allows one writing process, and runs of different pools finish at the same time."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@dataclass
class Storage:
    data_dir: Path
    remote_uri: str | None = None   # s3://bucket/prefix: finished run folders are published there
    # a boto3 S3 client to publish through (the composition's S3 resource); None: pyarrow's
    # S3 filesystem from the environment
    s3: Any = None

    def publish_folder(self, run_dir: Path, status: str = "accepted") -> str | None:
        """Publish a run folder to `<remote_uri>/runs/<run_id>`, marker last, saying whether
        the run was accepted, rejected by a gate or failed (resources/storage/runstore.py);
        None when there is no remote."""
        if not self.remote_uri:
            return None
        from servingbench.resources.storage import runstore

        uri = f"{self.remote_uri.rstrip('/')}/runs/{Path(run_dir).name}"
        runstore.publish(Path(run_dir), uri, status=status, client=self.s3)
        return uri

    @property
    def runs_dir(self) -> Path:
        return Path(self.data_dir) / "runs"

    @property
    def duckdb_path(self) -> Path:
        return Path(self.data_dir) / "servingbench.duckdb"

    def folder_of(self, dagster_run_id: str) -> Path | None:
        """The run folder a Dagster run made (benchmark_run stamps its id in partition.json)."""
        for part in sorted(self.runs_dir.glob("*/partition.json")):
            try:
                if json.loads(part.read_text()).get("dagster_run_id") == dagster_run_id:
                    return part.parent
            except (OSError, ValueError):
                continue
        return None

    def new_run(self, candidate: str, instance_type: str) -> tuple[str, Path]:
        """A fresh run id and its empty folder; an id is never reused."""
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        while True:
            stamp = format_ts(time.time_ns())[:19].replace("-", "").replace(":", "")
            run_id = f"{stamp}Z-{instance_type}-{candidate}-{secrets.token_hex(2)}"[:128]
            run_dir = self.runs_dir / run_id
            try:
                run_dir.mkdir()
                return run_id, run_dir
            except FileExistsError:
                continue

    def publish(self, run_id: str, partition: str, manifest: dict, tables: dict[str, pa.Table]) -> None:
        """Replace this run's rows in the DuckDB tables (one transaction)."""
        con = connect(self.duckdb_path)
        try:
            con.execute("CREATE TABLE IF NOT EXISTS runs (run_id VARCHAR PRIMARY KEY, partition VARCHAR,"
                        " candidate VARCHAR, instance_type VARCHAR, source VARCHAR,"
                        " created_at VARCHAR, manifest JSON)")
            con.execute("BEGIN")
            con.execute("DELETE FROM runs WHERE run_id = $run_id", {"run_id": run_id})
            con.execute("INSERT INTO runs VALUES ($run_id, $partition, $candidate, $instance_type,"
                        " $source, $created_at, $manifest)",
                        {"run_id": run_id, "partition": partition, "candidate": manifest["candidate"],
                         "instance_type": manifest["instance_type"], "source": manifest["source"],
                         "created_at": manifest["created_at"], "manifest": json.dumps(manifest)})
            for name, table in tables.items():
                if name not in TABLES:
                    raise ValueError(f"unknown table {name}")
                con.register("incoming", table)
                exists = con.execute("SELECT count(*) FROM information_schema.tables "
                                     "WHERE table_name = $name", {"name": name}).fetchall()[0][0]
                if not exists:
                    con.sql("SELECT * FROM incoming LIMIT 0").create(name)
                else:
                    _add_new_columns(con, name)
                con.execute(_DELETE[name], {"run_id": run_id})
                # by name: a table made by an older version may order or lack columns
                con.execute(f"INSERT INTO {name} BY NAME SELECT * FROM incoming")
                con.unregister("incoming")
            con.execute("COMMIT")
        finally:
            con.close()

    def replace_levels(self, table: pa.Table) -> None:
        """contract §3.6: `frontier_levels` is across runs, so it is replaced whole (one
        transaction) each time a run is added."""
        self._replace("frontier_levels", table)

    def replace_spot_pairs(self, table: pa.Table) -> None:
        """contract §3.8: `spot_pairs` is across runs, replaced whole as `frontier_levels`."""
        self._replace("spot_pairs", table)

    def _replace(self, name: str, table: pa.Table) -> None:
        assert name in ("frontier_levels", "spot_pairs")  # a fixed name, never from input
        con = connect(self.duckdb_path)
        try:
            con.register("incoming", table)
            con.execute("BEGIN")
            con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM incoming")
            con.execute("COMMIT")
        finally:
            con.close()

    def ranking(self, slo: tuple[float, float]) -> list[dict]:
        """The latest run of each candidate in the store, ranked on cost at `slo` (TTFT s,
        TPOT s) as the comparison report ranks them (resources/analysis/ranking.py): each its
        headline row with `rank` (None: not ranked) and `failed_parity`. A run's quality
        parity is read from its folder's quality_parity.json, which the store does not hold."""
        from servingbench.resources.analysis.ranking import Standing, rank

        if not self.duckdb_path.exists():
            return []
        con = connect(self.duckdb_path, read_only=True)
        try:
            have = {r[0] for r in con.execute(
                "SELECT table_name FROM information_schema.tables").fetchall()}
            if "headline" not in have:
                return []
            latest = con.execute(
                "SELECT candidate, run_id, source FROM runs QUALIFY row_number() OVER "
                "(PARTITION BY candidate ORDER BY created_at DESC, run_id DESC) = 1").fetchall()
            heads = con.execute(
                "SELECT * FROM headline WHERE slo_ttft_s = $ttft AND slo_tpot_s = $tpot",
                {"ttft": slo[0], "tpot": slo[1]}).to_arrow_table().to_pylist()
        finally:
            con.close()
        by_run = {h["run_id"]: h for h in heads}
        standings = [Standing(candidate, by_run.get(run_id), source == "emulated",
                              self._parity_failed(run_id), ref=(candidate, run_id))
                     for candidate, run_id, source in latest]
        return [{**(s.headline or {"candidate": s.ref[0], "run_id": s.ref[1]}),
                 "rank": place, "failed_parity": s.failed_parity}
                for s, place in rank(standings)]

    def _parity_failed(self, run_id: str) -> bool:
        from servingbench.resources.contract import parity

        return parity.run_failed(self.runs_dir / run_id)

    def query(self, sql_name: str, **params) -> pa.Table:
        from servingbench.resources.analysis import sqlfiles

        con = connect(self.duckdb_path, read_only=True)
        try:
            return sqlfiles.query(con, sql_name, **params)
        finally:
            con.close()


def _add_new_columns(con, name: str) -> None:
    """Columns a newer analyzer adds (optional ones, e.g. the headline's SLO-search cost)
    are added to a table an older version created; rows already there read them as null."""
    have = {r[0] for r in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = $name",
        {"name": name}).fetchall()}
    for row in con.sql("DESCRIBE incoming").fetchall():
        col, typ = row[0], row[1]
        if col not in have:
            quoted = '"' + col.replace('"', '""') + '"'
            con.execute(f"ALTER TABLE {name} ADD COLUMN {quoted} {typ}")


_DELETE = {  # table names are fixed identifiers; values go through bind parameters
    "derived_metrics": "DELETE FROM derived_metrics WHERE run_id = $run_id",
    "cost_per_1m": "DELETE FROM cost_per_1m WHERE run_id = $run_id",
    "headline": "DELETE FROM headline WHERE run_id = $run_id",
    "telemetry_metrics": "DELETE FROM telemetry_metrics WHERE run_id = $run_id",
    "frontier": "DELETE FROM frontier WHERE run_id = $run_id",
    "cost_what_if": "DELETE FROM cost_what_if WHERE run_id = $run_id",
}
