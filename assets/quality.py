"""quality: the evaluation set on the endpoint the run just measured (contract §3.3), after the
steady phase and before the engine is stopped; and `quality_matches_reference`, the blocking
check that keeps a candidate whose quality trails its group's reference out of the cost
ranking (its raw records, metrics and quality stay; only the cost table is withheld).

Emulated runs have no quality: no file is written, the accuracy is null, and the check
reports "not applicable" with WARN severity: never a pass, and not a reason to withhold an
emulated cost either (it is labelled EMULATED anyway).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from pathlib import Path

import dagster as dg
from servingbench.assets.partitions import run_value
from servingbench.resources.contract import deployment_record
from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.parity import PARITY_FILE
from servingbench.resources.quality import (
    QualityError,
    evaluate,
    find_reference,
    load_summary,
    parity,
)
from servingbench.resources.quality.evalset import EvalSetError, build

CHECK = "quality_matches_reference"
DESCRIPTION = ("Accuracy on a fixed evaluation set at temperature 0, on the run's own "
               "endpoint after the steady phase (contract §3.3); null for emulated runs.")


def run_quality(candidate: Candidate, endpoint: str, served_model: str, run_id: str, run_dir: Path,
                emulated: bool) -> tuple[dict, dict]:
    """(asset value, metadata). Raises dg.Failure when the evaluation cannot run."""
    plan = candidate.quality
    where = {"run_dir": dg.MetadataValue.path(str(run_dir))}
    if emulated:
        value = run_value(run_id, run_dir, status="not_applicable", accuracy=None)
        return value, where | {"status": dg.MetadataValue.text("not applicable: emulated run"),
                               "accuracy": dg.MetadataValue.null()}
    if plan is None:
        value = run_value(run_id, run_dir, status="not_evaluated", accuracy=None)
        return value, where | {"status": dg.MetadataValue.text(
            "not evaluated: the candidate names no quality plan"),
            "accuracy": dg.MetadataValue.null()}
    try:
        # already absolute: the candidates file resolves its relative paths from its folder
        dataset = None if plan.dataset is None else Path(plan.dataset)
        name, items = build(plan.items, plan.seed, dataset)
        s = evaluate(endpoint, served_model, run_id, run_dir, name, items, plan.max_tokens)
    except (QualityError, EvalSetError) as exc:
        raise dg.Failure(description=f"quality evaluation: {exc}",
                         metadata={"run_dir": dg.MetadataValue.path(str(run_dir))}) from None
    value = run_value(run_id, run_dir, status="evaluated", accuracy=s["accuracy"],
                      reference=plan.reference, margin=plan.margin,
                      eval_set_sha256=s["eval_set_sha256"])
    md = where | {"status": dg.MetadataValue.text("evaluated"),
          "accuracy": dg.MetadataValue.float(s["accuracy"]),
          "ci95": dg.MetadataValue.text(f"[{s['ci95_low']:.3f}, {s['ci95_high']:.3f}]"),
          "n": dg.MetadataValue.int(s["n"]), "correct": dg.MetadataValue.int(s["correct"]),
          "eval_set": dg.MetadataValue.text(s["eval_set"]),
          "eval_set_sha256": dg.MetadataValue.text(s["eval_set_sha256"]),
          "by_kind": dg.MetadataValue.json(s["by_kind"]),
          "parquet": dg.MetadataValue.path(str(Path(run_dir) / "quality.parquet")),
          "summary": dg.MetadataValue.path(str(Path(run_dir) / "quality_summary.json"))}
    return value, md


def decide_parity(value: dict, candidate: str, runs_dir: Path):
    """The parity verdict for one run's quality value (written to quality_parity.json)."""
    from servingbench.resources.quality import Parity

    run_dir = Path(value["run_dir"])
    if value["status"] == "not_applicable":
        return Parity("not_applicable", None, "not applicable: emulated run; accuracy is "
                      "null (never a pass)")
    if value["status"] != "evaluated" or value.get("reference") is None:
        return Parity("not_evaluated", None, "no quality evaluation or no reference named")
    summary = load_summary(run_dir)
    ref_run = find_reference(runs_dir, value["reference"], summary["eval_set_sha256"],
                             exclude=run_dir)
    verdict = parity(summary, candidate, value["reference"], value["margin"], ref_run)
    if (deployment_record.read(run_dir) or {}).get("load_format") == "dummy":
        # real vLLM on this host serves a tiny model with random weights: said, not hidden
        verdict = replace(verdict, weights="random", message=(
            f"{verdict.message.rstrip('.')}. The weights are random (vLLM's --load-format dummy): the run "
            "measures the engine, not a model, and fails parity by design."))
    (run_dir / PARITY_FILE).write_text(json.dumps(verdict.as_dict(), indent=1) + "\n")
    return verdict


def _spec(partitions_def) -> dg.AssetCheckSpec:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return dg.AssetCheckSpec(
            CHECK, asset="quality", blocking=True, partitions_def=partitions_def,
            description="Accuracy not below the group's reference candidate by more than the "
                        "margin with non-overlapping 95 % intervals; else no cost table.")


def build_checks(partitions_def) -> list:
    @dg.multi_asset_check(specs=[_spec(partitions_def)], name=CHECK,
                          ins={"quality": dg.AssetIn("quality")},
                          required_resource_keys={"storage"})
    def quality_matches_reference(context, quality: dict):
        from servingbench.assets.partitions import candidate_of

        verdict = decide_parity(quality, candidate_of(context), context.resources.storage.runs_dir)
        md = {k: dg.MetadataValue.null() if v is None else
              (dg.MetadataValue.json(v) if isinstance(v, list | dict) else v)
              for k, v in verdict.as_dict().items()}
        # Only a real failure blocks (ERROR); "not applicable" and "not evaluated" are shown
        # as unpassed warnings, never as a pass.
        severity = (dg.AssetCheckSeverity.ERROR if verdict.passed is False
                    else dg.AssetCheckSeverity.WARN)
        yield dg.AssetCheckResult(asset_key="quality", check_name=CHECK,
                                  passed=verdict.passed is True, severity=severity,
                                  description=verdict.message, metadata=md)

    return [quality_matches_reference]
