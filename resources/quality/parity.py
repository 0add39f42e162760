"""The parity rule: a candidate's accuracy against its group's reference candidate.

A candidate fails when its accuracy is below the reference's by more than the margin AND
the two Wilson 95 % intervals do not overlap: a gap inside the margin, or one the sample
cannot tell from chance, is not a failure. The reference is the newest other measured run
of the named reference candidate whose summary used the same evaluation set (equal
`eval_set_sha256`); without one there is nothing to match and the candidate does not pass,
unless it is the reference itself, whose first run sets the bar.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servingbench.resources.contract import manifest as mf
from servingbench.resources.quality.evaluate import load_summary


@dataclass(frozen=True)
class Parity:
    status: str            # pass | fail | no_reference | not_applicable | not_evaluated
    passed: bool | None    # None: not applicable (emulated) or not evaluated; never a pass
    message: str
    accuracy: float | None = None
    ci95: tuple[float | None, float | None] = (None, None)
    reference_candidate: str | None = None
    reference_run_id: str | None = None
    reference_accuracy: float | None = None
    reference_ci95: tuple[float | None, float | None] = (None, None)
    margin: float | None = None
    # "random": the run served random weights (vLLM's `--load-format dummy` on this host):
    # it measures the engine, not a model, and fails parity by design
    weights: str | None = None

    def as_dict(self) -> dict:
        return {"status": self.status, "passed": self.passed, "message": self.message,
                "accuracy": self.accuracy, "ci95": list(self.ci95),
                "reference_candidate": self.reference_candidate,
                "reference_run_id": self.reference_run_id,
                "reference_accuracy": self.reference_accuracy,
                "reference_ci95": list(self.reference_ci95), "margin": self.margin,
                "weights": self.weights}


def find_reference(runs_dir: Path, reference: str, eval_set_sha256: str,
                   exclude: Path | None = None) -> tuple[str, dict] | None:
    """(run_id, summary) of the newest measured run of `reference` on the same set."""
    found = []
    for manifest in Path(runs_dir).glob("*/manifest.json"):
        run_dir = manifest.parent
        if exclude is not None and run_dir.resolve() == Path(exclude).resolve():
            continue
        try:
            m = mf.load(manifest)
        except mf.ManifestError:
            continue
        if m.get("candidate") != reference or m["source"] != "measured":
            continue
        summary = load_summary(run_dir)
        if summary and summary.get("eval_set_sha256") == eval_set_sha256 \
                and summary.get("accuracy") is not None:
            found.append((mf.parse_ts(m["created_at"]), m["run_id"], summary))
    if not found:
        return None
    _, run_id, summary = max(found, key=lambda t: (t[0], t[1]))
    return run_id, summary


def parity(summary: dict, candidate: str, reference: str, margin: float,
           reference_run: tuple[str, dict] | None) -> Parity:
    acc = summary["accuracy"]
    ci = (summary["ci95_low"], summary["ci95_high"])
    base = {"accuracy": acc, "ci95": ci, "reference_candidate": reference, "margin": margin}
    if reference_run is None:
        if candidate == reference:
            return Parity("pass", True, f"{candidate} is its group's reference; this first "
                          f"measured run sets the bar (accuracy {acc:.3f})", **base)
        return Parity("no_reference", False, f"no measured run of the reference {reference!r} "
                      "on the same evaluation set: run it first", **base)
    ref_id, ref = reference_run
    ref_acc, ref_ci = ref["accuracy"], (ref["ci95_low"], ref["ci95_high"])
    base |= {"reference_run_id": ref_id, "reference_accuracy": ref_acc, "reference_ci95": ref_ci}
    gap = ref_acc - acc
    disjoint = ci[1] < ref_ci[0]
    text = (f"accuracy {acc:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] vs reference {reference} "
            f"{ref_acc:.3f} [{ref_ci[0]:.3f}, {ref_ci[1]:.3f}] (run {ref_id}); gap "
            f"{gap:+.3f}, margin {margin:.3f}")
    if gap > margin and disjoint:
        return Parity("fail", False, f"quality below the reference: {text}; intervals do "
                      "not overlap", **base)
    return Parity("pass", True, f"matches the reference: {text}", **base)
