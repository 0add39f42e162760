"""Telemetry in the reports (contract §3.2): per step in a run's report, and the peak memory,
utilization and energy of each candidate in the comparison. The flags are facts to look
at (KV cache full, memory headroom under 5 %, utilization under 20 %), never gates."""

from __future__ import annotations

import pyarrow as pa
from servingbench.resources.analysis.telemetry import step_summary
from servingbench.resources.report.html import Cell, cell, num, para, pct, table
from servingbench.resources.report.registry import Section
from servingbench.resources.report.rundata import RunData

GIB = 1 << 30


def summary(run: RunData) -> list[dict]:
    tm = run.telemetry_metrics
    if tm is None or tm.empty:
        return []
    return step_summary(pa.Table.from_pandas(tm, preserve_index=False))


def _gib(v) -> str:
    return num(None if v is None else v / GIB, 3)


def _row(s: dict) -> list[Cell]:
    return [pct(s["util_mean"]), pct(s["util_max"]), _gib(s["mem_used_max_bytes"]),
            pct(s["mem_headroom_min"]), num(s["power_w_mean"]), pct(s["kv_cache_usage_max"]),
            num(s["energy_j_per_1m"]), cell(s["sample_errors"]),
            cell("; ".join(s["flags"]) or None)]


HEAD = ("util mean", "util max", "peak memory GiB (a device)", "min headroom",
        "power W (all devices)", "KV cache peak", "J per 1M output tok", "gaps", "flags")


def run_section(run: RunData) -> str:
    steps = summary(run)
    if not steps:
        return para("No telemetry in this run (telemetry.parquet absent or no sample inside a "
                    "step's window).")
    rows = [[cell(s["step"])] + _row(s) for s in steps]
    return table(("step", *HEAD), rows, ["bad" if s["flags"] else "" for s in steps]) + para(
        "Per step over its steady window (contract §3.2). Flags, not gates: KV cache full, "
        "memory headroom under 5 %, or every device under 20 % utilization "
        "(the client or the configuration, not the accelerator, was the limit). "
        "Gaps are failed samples, recorded and never filled in.")


def _headline_step(run: RunData) -> str | None:
    h = run.headline
    if h is None or h.empty or not bool(h.iloc[0]["meets_slo"]):
        return None
    return h.iloc[0]["step"]


def comparison_section(latest: list[RunData]) -> str:
    rows, classes = [], []
    for run in latest:
        steps = summary(run)
        if not steps:
            continue
        at = _headline_step(run)
        pick = next((s for s in steps if s["step"] == at), None)
        peak = max((s["mem_used_max_bytes"] for s in steps if s["mem_used_max_bytes"] is not None),
                   default=None)
        room = min((s["mem_headroom_min"] for s in steps if s["mem_headroom_min"] is not None),
                   default=None)
        util = max((s["util_max"] for s in steps if s["util_max"] is not None), default=None)
        flags = sorted({f"{s['step']}: {f}" for s in steps for f in s["flags"]})
        rows.append([cell(run.candidate), cell(run.run_id), _gib(peak), pct(room), pct(util),
                     cell(at), pct(pick and pick["util_mean"]),
                     num(pick and pick["energy_j_per_1m"]), cell("; ".join(flags) or None)])
        classes.append("bad" if flags else "")
    if not rows:
        return para("No run carries telemetry.")
    return table(("candidate", "run", "peak memory GiB (a device)", "min headroom",
                  "peak utilization", "SLO step", "util mean there", "J / 1M out tok there",
                  "flags"), rows, classes)


SECTIONS = (
    Section("run", 100, "Accelerator telemetry per step", "telemetry",
            lambda p: run_section(p.run)),
    Section("comparison", 80, "Accelerator telemetry (peak memory, utilization, energy)",
            "telemetry", lambda p: comparison_section(p.latest)),
)


PLUGIN = SECTIONS  # what this file adds to the report package
