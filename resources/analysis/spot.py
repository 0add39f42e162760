"""Spot against on-demand (contract §3.8), across runs: `spot_pairs.parquet` beside the
comparison (and the DuckDB table `spot_pairs`), one row per candidate with both an accepted
on-demand and an accepted spot run (the latest of each; measured and emulated never paired):
each one's billed cost per 1M output tokens (over its whole steady phase from episode.json,
else its headline step), the effective discount `1 − spot / on-demand` beside the what-if spot
discount of §4.1 (the on-demand run's spot basis ÷ its on-demand basis), and the spot run's
interruptions and requests lost."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract import run_files
from servingbench.resources.contract.outputs import SPOT_PAIRS

FILE = "spot_pairs.parquet"


@dataclass(frozen=True)
class CostedRun:
    run_dir: Path
    manifest: dict
    capacity: str
    accepted: bool
    cost_per_1m: float | None

    @property
    def key(self) -> tuple:
        return (mf.parse_ts(self.manifest["created_at"]), self.manifest["run_id"])

    @property
    def candidate(self) -> str:
        return pair_name(self.manifest)


def pair_name(manifest: dict) -> str:
    """The candidate a run is paired by. A sweep over `capacity` gives the on-demand and the
    spot run two candidate names (`...-on-demand`, `...-spot`) for one configuration: they
    pair under the sweep's name and its other settings."""
    sweep = manifest.get("sweep") or {}
    settings = sweep.get("settings") or {}
    if "capacity" in settings and sweep.get("name"):
        rest = "-".join(f"{k}={settings[k]}" for k in sorted(settings) if k != "capacity")
        return f"{sweep['name']}-{rest}" if rest else sweep["name"]
    return manifest.get("candidate") or manifest["run_id"]


def _cost_per_1m(run_dir: Path) -> float | None:
    """The run's billed cost per 1M output tokens: its episode's (the whole steady phase),
    else its headline step's at the first SLO asked."""
    try:
        episode = run_files.read_episode(run_dir)
    except run_files.RunFileError:
        episode = None  # unreadable: the headline step's, as for a run without one
    if episode is not None:
        return episode["cost_per_1m_output_usd"]
    path = run_dir / "headline.parquet"
    if not path.exists():
        return None
    rows = pq.read_table(path, columns=["cost_per_1m_output_usd"]).to_pylist()
    return rows[0]["cost_per_1m_output_usd"] if rows else None


def read_run(run_dir: Path) -> CostedRun:
    run_dir = Path(run_dir)
    m = mf.load(run_dir / "manifest.json")
    try:
        accepted = bool(run_files.accepted(run_files.read_gates(run_dir)))
    except run_files.RunFileError:
        accepted = False  # gates that cannot be read accept nothing
    return CostedRun(run_dir, m, m.get("capacity") or "on_demand", accepted,
                     _cost_per_1m(run_dir) if accepted else None)


def _hourly(manifest: dict, basis: str) -> float | None:
    for entry in manifest.get("price_bases") or []:
        if entry.get("basis") == basis:
            return entry.get("hourly_usd_per_node")
    if basis == "on_demand":
        return (manifest.get("price_basis") or {}).get("hourly_usd_per_node")
    return None


def _interruptions(run_dir: Path) -> tuple[int | None, int | None]:
    path = run_dir / "interruptions.parquet"
    if not path.exists():
        return None, None
    lost = pq.read_table(path, columns=["lost"]).column("lost").to_pylist()
    return len(lost), sum(x or 0 for x in lost)


def pairs(runs: Sequence[CostedRun]) -> pa.Table:
    """contract §3.8's spot_pairs from runs already read (`read_run`)."""
    latest = run_files.latest([r for r in runs if r.accepted],
                              lambda r: (r.candidate, r.manifest["source"], r.capacity),
                              lambda r: r.key)
    rows = []
    for (candidate, source, capacity), od in sorted(latest.items()):
        spot = latest.get((candidate, source, "spot"))
        if capacity != "on_demand" or spot is None:
            continue
        a, b = od.cost_per_1m, spot.cost_per_1m
        spot_basis, od_basis = _hourly(od.manifest, "spot"), _hourly(od.manifest, "on_demand")
        n, lost = _interruptions(spot.run_dir)
        rows.append({
            "candidate": candidate, "on_demand_run_id": od.manifest["run_id"],
            "spot_run_id": spot.manifest["run_id"],
            "on_demand_cost_per_1m_output_usd": a, "spot_cost_per_1m_output_usd": b,
            "effective_discount": 1 - b / a if a and b is not None else None,
            "what_if_spot_discount": (1 - spot_basis / od_basis
                                      if spot_basis is not None and od_basis else None),
            "interruptions": n, "lost": lost, "source": source})
    return pa.Table.from_pylist(rows, schema=SPOT_PAIRS)


def pairs_of_folders(run_dirs: Sequence[Path], skip_broken: bool = False) -> pa.Table:
    """spot_pairs over run folders; `skip_broken`: a folder whose manifest or outputs cannot
    be read is left out instead of raising."""
    runs = []
    for d in run_dirs:
        try:
            runs.append(read_run(Path(d)))
        except (mf.ManifestError, pa.ArrowException, OSError, ValueError):
            if not skip_broken:
                raise
    return pairs(runs)
