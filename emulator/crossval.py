"""How wrong the fitted performance model stays on measurements it did not see.

Cross-validation holds out whole curves (rows of one source, model, configuration and shape
that differ only in their load) in k folds, fits on the rest (calibrate.fit), and predicts the
held-out rows with a full virtual-time run: a curve split across the folds would let the fit
interpolate between its own points. The error table (mean absolute percentage error per
accelerator and per engine) becomes the error bands every emulated figure carries.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from servingbench.emulator.calibrate import METRICS, Sample, fit, predict_samples

# rows of our own (benchmarks/emulator_calibrate_serve.py): fitted like any row, reported apart
MEASURED_HERE = "measured_here"


# --- cross-validation and the error table --------------------------------------------------------
def folds(samples: list[Sample], k: int, seed: int = 0) -> list[list[int]]:
    """k folds of sample indices, whole curves together, balanced by row count."""
    by_curve: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(samples):
        by_curve[s.curve].append(i)
    curves = sorted(by_curve.values(), key=lambda c: (-len(c), c[0]))
    rng = np.random.default_rng(seed)
    rng.shuffle(curves)
    out: list[list[int]] = [[] for _ in range(k)]
    for c in sorted(curves, key=len, reverse=True):
        min(out, key=len).extend(c)
    return out


def _fold(args):
    samples, test, rounds, nfev = args
    held = set(test)
    cal, _ = fit([s for j, s in enumerate(samples) if j not in held], rounds=rounds, max_nfev=nfev)
    return test, predict_samples([samples[j] for j in test], cal)


def cross_validate(samples: list[Sample], k: int = 5, rounds: int = 2, max_nfev: int = 40,
                   jobs: int = 1, log=None) -> list[dict[str, float] | None]:
    """Each sample's prediction by the fit on the folds that do not hold it, `jobs` folds
    fitted at once (each fit is single-threaded numpy; the folds are independent)."""
    parts = folds(samples, k)
    preds: list = [None] * len(samples)
    work = [(samples, test, rounds, max_nfev) for test in parts]
    if jobs <= 1:
        results = map(_fold, work)
    else:
        pool = ProcessPoolExecutor(max_workers=jobs)
        results = pool.map(_fold, work)
    try:
        for i, (test, got) in enumerate(results, start=1):
            for j, p in zip(test, got, strict=True):
                preds[j] = p
            if log:
                log(f"fold {i}/{k}: {len(test)} rows held out")
    finally:
        if jobs > 1:
            pool.shutdown(cancel_futures=True)
    return preds


def errors(samples, preds) -> dict[tuple[str, str], list[float]]:
    """Absolute percentage errors by (metric, group) for groups all, accelerator, engine.

    Rows measured here (`claim_kind: measured_here`) are their own group and their engine's:
    the targets and each accelerator's band are held against published measurements."""
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    for s, p in zip(samples, preds, strict=True):
        if p is None:
            continue
        groups = ((MEASURED_HERE, f"engine:{s.engine}") if s.claim_kind == MEASURED_HERE
                  else ("all", f"accelerator:{s.accelerator}", f"engine:{s.engine}"))
        for m in METRICS:
            if m in s.published:
                e = abs(p[m] / s.published[m] - 1)
                for g in groups:
                    out[(m, g)].append(e)
    return out


def _inputs(s: Sample):
    """Everything a row states that a prediction reads: the row without its id."""
    return dataclasses.replace(s.row, row_id="")


def ordering(samples, preds) -> dict[str, tuple[int, int]]:
    """Pairs ordered as the table orders them, by tok/s per chip: (agree, pairs) for pairs of
    rows differing only in the accelerator, and for neighbours along a curve (rows of one
    curve at different loads)."""
    per_chip = {}
    for i, (s, p) in enumerate(zip(samples, preds, strict=True)):
        if p is not None and "tok_s" in s.published and s.claim_kind != MEASURED_HERE:
            per_chip[i] = (s.published["tok_s"] / s.row.n_accel, p["tok_s"] / s.row.n_accel)
    acc_groups: dict[tuple, list[int]] = defaultdict(list)
    curve_groups: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(samples):
        if i not in per_chip:
            continue
        r = s.row
        acc_groups[(r.model, r.precision, r.kv_precision, r.engine, r.input_tokens,
                    r.output_tokens, r.load_kind, r.load_value, r.speculative)].append(i)
        curve_groups[s.curve].append(i)
    out = {}
    for name, groups, neighbours in (("accelerator", acc_groups, False), ("curve", curve_groups, True)):
        agree = total = 0
        for idx in groups.values():
            if name == "accelerator":
                pairs = [(a, b) for ai, a in enumerate(idx) for b in idx[ai + 1:]
                         if samples[a].accelerator != samples[b].accelerator]
            else:
                # neighbours along the load; two rows that state the same inputs are repeats of
                # one configuration (a flag no column carries, or run-to-run noise): they give
                # a predictor nothing to order them by, so they are no pair
                idx = sorted(idx, key=lambda i: (samples[i].row.load_kind, samples[i].row.load_value or 0))
                pairs = [(a, b) for a, b in zip(idx, idx[1:], strict=False)
                         if _inputs(samples[a]) != _inputs(samples[b])] if neighbours else []
            for a, b in pairs:
                pa, pb = per_chip[a], per_chip[b]
                if pa[0] == pb[0]:
                    continue
                total += 1
                agree += (pa[0] > pb[0]) == (pa[1] > pb[1])
        out[name] = (agree, total)
    return out


def band_table(errs: dict[tuple[str, str], list[float]]) -> dict:
    """The error bands the reports print: per accelerator and per engine, each metric's mean
    absolute percentage error and how many rows it is over."""
    out: dict = {"accelerators": {}, "engines": {}}
    for (metric, group), v in sorted(errs.items()):
        if group in ("all", MEASURED_HERE):
            section, key = "overall", group
        else:
            kind, key = group.split(":", 1)
            section = "accelerators" if kind == "accelerator" else "engines"
        out.setdefault(section, {}).setdefault(key, {})[metric] = {
            "mape": round(float(np.mean(v)), 4), "rows": len(v)}
    return out
