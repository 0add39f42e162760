"""contract §3.2: telemetry per step (sql/telemetry_metrics.sql), and the report's flags.

The flags are facts worth a look, not gates: they never reject a run.
  kv_cache_full      the engine's KV cache usage reached `KV_FULL` inside the step
  memory_headroom    a device's peak memory used left less than `HEADROOM_MIN` of its total
  low_utilization    every device's mean utilization stayed under `LOW_UTIL`
                     (the load, not the accelerator, was the limit: client or config)
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from servingbench.resources.analysis import sqlfiles
from servingbench.resources.analysis.rundir import RunFolder
from servingbench.resources.contract.schemas import read_records

KV_FULL = 0.99
HEADROOM_MIN = 0.05
LOW_UTIL = 0.20
ENERGY = "energy_j_per_1m_output_tokens"

TELEMETRY_METRICS = pa.schema([
    ("run_id", pa.string()), ("step", pa.string()), ("source", pa.string()),
    ("device", pa.string()), ("metric", pa.string()), ("mean", pa.float64()),
    ("max", pa.float64()), ("n", pa.int64()),
])


def read_telemetry(run_dir: Path) -> pa.Table | None:
    """telemetry.parquet checked against contract §2.5; None when the run has none.
    Raises SchemaError (→ exit 2) when it is malformed."""
    return read_records(Path(run_dir), "telemetry")


def telemetry_metrics(run: RunFolder, metrics: pa.Table, telemetry: pa.Table) -> pa.Table:
    run.con.register("telemetry", telemetry)
    run.con.register("metrics", metrics)
    out = sqlfiles.query(run.con, "telemetry_metrics", run_id=run.manifest["run_id"])
    return out.cast(TELEMETRY_METRICS)


def step_summary(tm: pa.Table) -> list[dict]:
    """Per step: peak memory used and its headroom, mean and peak utilization, mean power,
    peak KV usage, energy per 1M output tokens, sample errors, and the flags."""
    steps: dict[str, dict] = {}
    rows = tm.to_pylist()
    for r in rows:
        steps.setdefault(r["step"], {"step": r["step"], "mem_used_max_bytes": None,
                                     "mem_headroom_min": None, "util_mean": None,
                                     "util_max": None, "power_w_mean": None,
                                     "kv_cache_usage_max": None, "energy_j_per_1m": None,
                                     "sample_errors": 0, "flags": []})
    used = {(r["step"], r["device"]): r["max"] for r in rows if r["metric"] == "accel_mem_used_bytes"}
    total = {(r["step"], r["device"]): r["max"] for r in rows if r["metric"] == "accel_mem_total_bytes"}
    for step, s in steps.items():
        mine = [r for r in rows if r["step"] == step]
        utils = [r for r in mine if r["metric"] == "accel_util" and r["mean"] is not None]
        if utils:
            s["util_mean"] = sum(r["mean"] for r in utils) / len(utils)
            s["util_max"] = max(r["max"] for r in utils)
        power = [r["mean"] for r in mine if r["metric"] == "power_w" and r["mean"] is not None]
        if power:
            s["power_w_mean"] = sum(power)  # all devices together
        kv = [r["max"] for r in mine if r["metric"] == "kv_cache_usage" and r["max"] is not None]
        s["kv_cache_usage_max"] = max(kv) if kv else None
        peaks = [used[k] for k in used if k[0] == step and used[k] is not None]
        s["mem_used_max_bytes"] = max(peaks) if peaks else None
        rooms = [1.0 - used[k] / total[k] for k in used
                 if k[0] == step and k in total and used[k] is not None and total[k]]
        s["mem_headroom_min"] = min(rooms) if rooms else None
        s["energy_j_per_1m"] = next((r["mean"] for r in mine if r["metric"] == ENERGY), None)
        s["sample_errors"] = sum(r["n"] for r in mine if r["metric"] == "sample_error")
        s["flags"] = flags_of(s, utils)
    return [steps[k] for k in sorted(steps)]


def flags_of(s: dict, utils: list[dict]) -> list[str]:
    out = []
    if s["kv_cache_usage_max"] is not None and s["kv_cache_usage_max"] >= KV_FULL:
        out.append(f"KV cache full (peak {s['kv_cache_usage_max']:.0%})")
    if s["mem_headroom_min"] is not None and s["mem_headroom_min"] < HEADROOM_MIN:
        out.append(f"memory headroom {s['mem_headroom_min']:.1%} < {HEADROOM_MIN:.0%}")
    if utils and max(r["mean"] for r in utils) < LOW_UTIL:
        out.append(f"utilization under {LOW_UTIL:.0%} (client- or config-limited)")
    return out


def for_run_dir(run_dir: Path) -> pa.Table | None:
    """telemetry_metrics of a run folder without running the gates (the steady-state asset's
    metadata); None when the run has no telemetry."""
    from servingbench.resources.analysis.metrics import step_metrics
    from servingbench.resources.analysis.rundir import open_run

    telemetry = read_telemetry(run_dir)
    if telemetry is None:
        return None
    with open_run(Path(run_dir)) as run:
        return telemetry_metrics(run, step_metrics(run, telemetry=telemetry), telemetry)
