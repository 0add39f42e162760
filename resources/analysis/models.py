"""Several models on one node (contract §3.9): `derived_metrics_by_model.parquet`, §3's
metrics per step × model (over the model's requests, rates over the step's window), TTFT p99
during and outside another model's swap, and the node's step cost attributed to each model
(labelled attributed: the bill covers the node, never one model); `swaps.parquet`, one row
per model_load, model_sleep or model_wake event.

The per-model metrics are sql/step_metrics.sql run once per model (`$model`), the swap
facts sql/model_swap_facts.sql, the swaps sql/swaps.sql."""

from __future__ import annotations

import pyarrow as pa
from servingbench.resources.analysis import metrics as metrics_mod
from servingbench.resources.analysis import sqlfiles
from servingbench.resources.analysis.rundir import RunFolder
from servingbench.resources.contract.outputs import DERIVED_METRICS_BY_MODEL, check_output

# what a model with no request in a step keeps of the step's row (the rest is null, counts 0)
_STEP_KEEPS = ("run_id", "step", "load_mode", "target", "source", "window_start", "window_end",
               "window_s", "valid", "invalid_reason", "replicas_mean")


def models_of(manifest: dict) -> list[dict]:
    return list(manifest.get("models") or [])


def swaps(run: RunFolder) -> pa.Table | None:
    if not models_of(run.manifest):
        return None
    return check_output(sqlfiles.query(run.con, "swaps", run_id=run.manifest["run_id"]), "swaps")


def by_model(run: RunFolder, metrics: pa.Table, cost: pa.Table | None,
             slo: tuple[float, float]) -> pa.Table | None:
    """One row per step × model of the manifest's `models`; None for a run without them.
    `cost`: §4's rows of an accepted bill (None: the attributed cost stays null)."""
    models = models_of(run.manifest)
    if not models:
        return None
    per = {}
    for model in models:
        table = metrics_mod.query(run, slo, model=model["name"])
        per[model["name"]] = {r["step"]: r for r in table.to_pylist()}
    run.con.register("metrics", metrics)
    run.con.register("models", pa.table({"name": pa.array([x["name"] for x in models],
                                                          pa.string())}))
    facts = {(r["step"], r["model"]): r
             for r in sqlfiles.query(run.con, "model_swap_facts").to_pylist()}
    costs = {r["step"]: r["window_cost_usd"] for r in (cost.to_pylist() if cost else [])}
    rows = []
    for step in metrics.to_pylist():
        for model in models:
            row = per[model["name"]].get(step["step"]) or _no_requests(step)
            # the step's verdict and replicas, whatever this model's share of its requests
            row.update({k: step[k] for k in ("valid", "invalid_reason", "replicas_mean")},
                       model=model["name"], spec_acceptance_rate=None)
            row["output_tok_s_per_replica"] = (
                row["output_tok_s"] / row["replicas_mean"]
                if row.get("output_tok_s") is not None and row["replicas_mean"] else None)
            fact = facts.get((step["step"], model["name"]), {})
            row["ttft_s_p99_during_swap"] = fact.get("ttft_s_p99_during_swap")
            row["ttft_s_p99_outside_swap"] = fact.get("ttft_s_p99_outside_swap")
            row["attributed_cost_per_1m_output_usd"] = _attributed(
                costs.get(step["step"]), model, fact.get("awake_s"), step["window_s"],
                row.get("output_tokens"))
            rows.append(row)
    table = pa.Table.from_pylist(rows, schema=DERIVED_METRICS_BY_MODEL)
    return check_output(table, "derived_metrics_by_model")


def _no_requests(step: dict) -> dict:
    row = {k: step[k] for k in _STEP_KEEPS}
    row.update({k: 0 for k in DERIVED_METRICS_BY_MODEL.names
                if k.endswith("_n") or k in ("n_requests", "n_ok")})
    return row


def _attributed(window_cost: float | None, model: dict, awake_s: float | None,
                window_s: float | None, tokens: int | None) -> float | None:
    """The step's window cost × the model's share ÷ its output tokens × 1e6: the share is its
    memory_share when resident, its awake time ÷ window_s when swapped."""
    if window_cost is None or not tokens:
        return None
    if model["placement"] == "resident":
        share = model.get("memory_share")
    else:
        share = awake_s / window_s if awake_s is not None and window_s else None
    return None if share is None else window_cost * share / tokens * 1e6
