"""Telemetry beside the load (contract §2.5): the sampler runs in a background thread for
warm-up and steady together, reading what the deployment says it can be read from; and the
steady-state asset's metadata gets the per-step figures (contract §3.2).

Sampling never stops a run: a source that cannot even be set up is logged and skipped, a
source that fails mid-run leaves `sample_error` rows.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import dagster as dg
from servingbench.resources.analysis.summary import table
from servingbench.resources.analysis.telemetry import for_run_dir, step_summary
from servingbench.resources.telemetry import Sampler, sources_from
from servingbench.resources.telemetry.sampler import DEFAULT_INTERVAL_S

COLUMNS = [("step", "step", ""), ("util_mean", "util mean", ".0%"), ("util_max", "util max", ".0%"),
           ("mem_used_max_bytes", "peak mem B", ".3g"), ("mem_headroom_min", "headroom", ".1%"),
           ("power_w_mean", "power W (all)", ",.0f"), ("kv_cache_usage_max", "KV peak", ".0%"),
           ("energy_j_per_1m", "J / 1M out tok", ",.0f"), ("sample_errors", "gaps", ""),
           ("flags", "flags", "")]


@contextlib.contextmanager
def sampling(deployment, run_dir: Path, run_id: str, log,
             interval_s: float = DEFAULT_INTERVAL_S):
    specs = getattr(deployment, "telemetry", None) or []
    sampler = None
    if specs:
        try:
            sampler = Sampler(run_dir, run_id, sources_from(specs), interval_s).start()
        except Exception as exc:  # telemetry is never a reason to lose the measurement
            log.warning(f"telemetry not sampled: {type(exc).__name__}: {exc}")
    try:
        yield sampler
    finally:
        if sampler is not None:
            try:
                sampler.stop()
            except Exception as exc:  # the samples stay in telemetry.partial.arrows
                log.warning(f"telemetry not finalized: {type(exc).__name__}: {exc}")
            s = sampler.summary()
            log.info(f"telemetry: {s['ticks']} samples of {', '.join(s['sources'])} every "
                     f"{s['interval_s']:g} s, {s['sample_errors']} failed"
                     + (f" (last: {s['last_error']})" if s["last_error"] else ""))


def metadata(run_dir: Path) -> dict:
    """Per-step peak memory and headroom, utilization, power, KV peak, energy per 1M output
    tokens and the flags, for the steady-state asset."""
    try:
        tm = for_run_dir(Path(run_dir))
    except Exception as exc:  # metadata about telemetry never fails the measured asset
        return {"telemetry": dg.MetadataValue.text(f"not summarized: {type(exc).__name__}: {exc}")}
    if tm is None:
        return {"telemetry": dg.MetadataValue.text("none sampled")}
    steps = step_summary(tm)
    return {
        "telemetry": dg.MetadataValue.path(str(Path(run_dir) / "telemetry.parquet")),
        "telemetry_steps": dg.MetadataValue.md(table(steps, COLUMNS, markdown=True)),
        "telemetry_flags": dg.MetadataValue.json({s["step"]: s["flags"] for s in steps if s["flags"]}),
    }
