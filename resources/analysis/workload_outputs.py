"""Outputs of the workloads beyond fixed steps (contract §3.1, §3.4, §3.5).

* derived_metrics_by_cache.parquet: TTFT/E2E per step × cache class, never pooled.
* ttft_by_context.parquet: TTFT per step × context-length bucket × cache class (agentic
  sessions; written for every run, as the cache split is).
* job.json: a batch job's makespan, throughput and cost over the job window.
* slo_capacity.json: an SLO search's probes, capacity and final bracket.
`probe_verdict` is the one rule for "this step met the SLO" that both the running search
(through `live_probe_verdict`, the load generator's `judge`) and slo_capacity.json use.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
from servingbench.resources.analysis import sqlfiles
from servingbench.resources.analysis.rundir import RunFolder, open_run


def by_cache(run: RunFolder) -> pa.Table:
    return sqlfiles.query(run.con, "metrics_by_cache", run_id=run.manifest["run_id"])


# the kinds whose context grows turn by turn: there TTFT by context length says where the KV
# cache and the prefix cache stop holding the sessions; a run of fixed-length requests has
# one context bucket and gets no file (its folder reads as contract §6 lists it)
SESSION_KINDS = ("multi_turn", "agentic")


def by_context(run: RunFolder) -> pa.Table | None:
    if scenario_kind(run.manifest) not in SESSION_KINDS:
        return None
    return sqlfiles.query(run.con, "ttft_by_context", run_id=run.manifest["run_id"])


def scenario_kind(manifest: dict) -> str:
    return (manifest.get("scenario") or {}).get("kind") or "fixed"


def job(manifest: dict, metrics: pa.Table, cost: pa.Table | None) -> dict | None:
    """contract §3.4 for a batch run: the job is its one steady step."""
    if scenario_kind(manifest) != "batch" or metrics.num_rows != 1:
        return None
    m = metrics.to_pylist()[0]
    window_cost = None
    if cost is not None and cost.num_rows == 1:
        window_cost = cost.column("window_cost_usd")[0].as_py()
    makespan = m["window_s"]
    out = m["output_tokens"]
    return {
        "requests": m["n_requests"], "ok": m["n_ok"], "makespan_s": makespan,
        "output_tokens": out,
        "output_tok_s": out / makespan if out is not None and makespan else None,
        "window_cost_usd": window_cost,
        "cost_per_job_usd": window_cost,  # the job window is the whole job
    }


def probe_verdict(row: dict, slo: dict) -> tuple[bool, bool]:
    """(valid, met): met when every SLO percentile is known and within its limit."""
    limits = {"ttft_p99_s": row.get("ttft_s_p99"), "tpot_p99_s": row.get("tpot_s_p99")}
    met = True
    for key, limit in slo.items():
        got = limits[key]
        if got is None or (isinstance(got, float) and math.isnan(got)) or got > limit:
            met = False
    return bool(row.get("valid")), met


def search_mode(scenario: dict) -> str:
    """The load mode an SLO search probes: open-loop `rate` (the default) or closed-loop
    `concurrency` (the scenario's `over`)."""
    return "concurrency" if scenario.get("over") == "concurrency" else "rate"


def slo_capacity(manifest: dict, metrics: pa.Table) -> dict | None:
    """contract §3.5 for an SLO-search run; probes in the order they ran."""
    scenario = manifest.get("scenario") or {}
    if scenario_kind(manifest) != "slo_search":
        return None
    slo = {k: float(v) for k, v in (scenario.get("slo") or {}).items()}
    rows = {r["step"]: r for r in metrics.to_pylist()}
    probes = []
    for s in manifest["steps"]:
        row = rows.get(s["step"])
        valid, met = probe_verdict(row, slo) if row is not None else (False, False)
        probes.append({"step": s["step"], "target": s["target"], "valid": valid, "met": met})
    good = [p["target"] for p in probes if p["valid"] and p["met"]]
    capacity = max(good) if good else None
    above = [p["target"] for p in probes if not (p["valid"] and p["met"])
             and (capacity is None or p["target"] > capacity)]
    return {"slo": slo, "load_mode": search_mode(scenario), "probes": probes,
            "capacity": capacity, "interval": [capacity, min(above) if above else None]}


# Optional headline columns (contract §4): the candidate's SLO cost from its search.
SEARCH_COLUMNS = (("slo_search_capacity", pa.float64()), ("slo_search_step", pa.string()),
                  ("slo_search_cost_per_1m_output_usd", pa.float64()))


def slo_cost(capacity: dict | None, cost: pa.Table | None) -> dict:
    """The SLO cost of a search: the capacity probe's step and its §4 cost per 1M output
    tokens (null without a capacity, or without a cost row for that step)."""
    out = {name: None for name, _ in SEARCH_COLUMNS}
    if capacity is None or capacity["capacity"] is None:
        return out
    step = next(p["step"] for p in capacity["probes"]
                if p["valid"] and p["met"] and p["target"] == capacity["capacity"])
    out.update(slo_search_capacity=float(capacity["capacity"]), slo_search_step=step)
    if cost is not None:
        rows = [r for r in cost.to_pylist() if r["step"] == step]
        if rows:
            out["slo_search_cost_per_1m_output_usd"] = rows[0]["cost_per_1m_output_usd"]
    return out


def with_slo_cost(headline: pa.Table, capacity: dict | None, cost: pa.Table | None) -> pa.Table:
    """The headline with the search columns on every row (null for a run without a search),
    so every run's headline.parquet has one shape."""
    found = slo_cost(capacity, cost)
    for name, typ in SEARCH_COLUMNS:
        headline = headline.append_column(
            pa.field(name, typ), pa.array([found[name]] * headline.num_rows, typ))
    return headline


def live_probe_verdict(run_dir: Path, step: str, slo: dict) -> tuple[bool, bool]:
    """The verdict on one probe of a search still running (its records flushed so far)."""
    from servingbench.resources.analysis.metrics import step_metrics

    with open_run(Path(run_dir)) as run:
        rows = [r for r in step_metrics(run).to_pylist() if r["step"] == step]
    return probe_verdict(rows[0], slo) if rows else (False, False)


def step_reader(run_dir: Path, kind: str | None, slo: Mapping | None, ladder: bool):
    """What the load generator asks the analysis about a step it has just run (its `judge`
    callback), or None when the run asks nothing: a ladder, each step's validity and output
    tokens/s (`throughput_reading`); an SLO search, whether each probe met the SLO
    (`live_probe_verdict`). The chain and `servingbench load` both take it from here."""
    if ladder:
        return lambda step: throughput_reading(run_dir, step)
    if kind != "slo_search":
        return None
    limits = {k: float(v) for k, v in (slo or {}).items()}
    return lambda step: live_probe_verdict(run_dir, step, limits)


def throughput_reading(run_dir: Path, step: str) -> tuple[bool, float | None]:
    """A ladder's question about the step it just ran (records flushed so far): whether it
    is valid (§3) and its output tokens/s; (False, None) when it has no row."""
    from servingbench.resources.analysis.metrics import step_metrics

    with open_run(Path(run_dir)) as run:
        rows = [r for r in step_metrics(run).to_pylist() if r["step"] == step]
    if not rows:
        return False, None
    tok_s = rows[0]["output_tok_s"]
    return bool(rows[0]["valid"]), None if tok_s is None or math.isnan(tok_s) else float(tok_s)
