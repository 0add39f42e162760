"""`servingbench predict --in ROWS.csv --out PRED.csv`: what the emulator predicts for each
row of a published-measurements table, from its own performance model and scheduler run in
virtual time (emulator/virtual.py; no server, no sleeping).

Output columns: row_id, status ("ok" or "unsupported: <reason>"), pred_output_tok_s_total,
pred_ttft_ms_median, pred_tpot_ms_median, pred_req_per_s (and the means, which several
sources publish instead of medians). A row the emulator cannot express (an unknown model,
accelerator or engine, a configuration that does not fit) is a row `unsupported`, never a
crash; a file that cannot be read exits 2 naming the row and column.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from servingbench.emulator.fit import fit_of
from servingbench.emulator.perf import PerfModel
from servingbench.emulator.rows import REQUIRED, Plan, Row, RowError, plan, read_row
from servingbench.emulator.scheduler import Scheduler
from servingbench.emulator.specdata import SpecError
from servingbench.emulator.speculative import Speculative
from servingbench.emulator.virtual import Load, Result, Trace, run, weighted_median

OUT_COLUMNS = ("row_id", "status", "pred_output_tok_s_total", "pred_ttft_ms_median",
               "pred_tpot_ms_median", "pred_req_per_s", "pred_ttft_ms_mean", "pred_tpot_ms_mean",
               "pred_itl_ms_median")
DEFAULT_REQUESTS = {"request_rate": 500, "offline": 1000}
MAX_SIMULATED = 20_000


@dataclass
class Prediction:
    row_id: str
    status: str
    output_tok_s: float | None = None
    ttft_ms_median: float | None = None
    tpot_ms_median: float | None = None
    req_s: float | None = None
    ttft_ms_mean: float | None = None
    tpot_ms_mean: float | None = None
    itl_ms_median: float | None = None

    def as_row(self) -> dict[str, str]:
        def f(v):
            return "" if v is None else f"{v:.6g}"
        return {"row_id": self.row_id, "status": self.status,
                "pred_output_tok_s_total": f(self.output_tok_s),
                "pred_ttft_ms_median": f(self.ttft_ms_median),
                "pred_tpot_ms_median": f(self.tpot_ms_median), "pred_req_per_s": f(self.req_s),
                "pred_ttft_ms_mean": f(self.ttft_ms_mean), "pred_tpot_ms_mean": f(self.tpot_ms_mean),
                "pred_itl_ms_median": f(self.itl_ms_median)}


def scheduler_for(p: Plan, cal: dict | None = None) -> Scheduler:
    """A fresh scheduler for one replica of the plan (its KV cache what memory leaves);
    `cal`: calibration figures to use instead of engines.yaml's."""
    cfg = p.config
    model = PerfModel(cfg, p.kv_bytes_per_value)
    if cal is not None:
        model.set_efficiency(cfg.profile().figures(cfg.instance.accelerator, cal))
    fit = fit_of(cfg, kv_bytes_per_value=p.kv_bytes_per_value)
    if not fit.fits:
        raise SpecError("does not fit: " + fit.message.split(": ", 1)[1])
    prof = cfg.profile()
    spec = Speculative(*p.speculative) if p.speculative else None
    return Scheduler(model, p.max_num_seqs, prof.max_num_batched_tokens,
                     model.kv_capacity_tokens(fit.kv_capacity_gb), spec, prof.scheduler,
                     prof.kv_reserve_output, prof.buckets)


def loads(row: Row, p: Plan) -> list[tuple[int, Load]]:
    """The load of each kind of replica: (how many replicas, their load). A closed loop of c
    requests over R replicas gives c mod R of them one request more."""
    r, kind = p.replicas, row.load_kind
    shape = (row.input_tokens, row.output_tokens)
    lengths = "sharegpt" if row.dataset == "sharegpt" else "spread"
    if kind in ("concurrency", "sweep_max"):
        c = int(row.load_value) if row.load_value else p.max_num_seqs * r
        if kind == "sweep_max":
            # guidellm's throughput mode keeps what the server admits in flight, up to its cap
            c = min(c, p.max_num_seqs * r)
        out = []
        for conc, count in ((c // r + 1, c % r), (c // r, r - c % r)):
            if count and conc:
                n = p.requests // r if p.requests else max(10 * conc, 16)
                out.append((count, Load("concurrency", conc, *shape, min(max(n, conc), MAX_SIMULATED),
                                        lengths=lengths)))
        return out
    if kind == "request_rate":
        n = (p.requests or DEFAULT_REQUESTS[kind]) / r
        return [(r, Load(kind, row.load_value / r, *shape, min(max(1, round(n)), MAX_SIMULATED),
                         lengths=lengths))]
    if kind == "offline":
        n = (p.requests or DEFAULT_REQUESTS[kind]) / r
        return [(r, Load(kind, 0.0, *shape, min(max(1, round(n)), MAX_SIMULATED), lengths=lengths))]
    return [(r, Load("fixed_batch", p.max_num_seqs, *shape, p.max_num_seqs))]


def simulate(row: Row, cal: dict | None = None, traces: list | None = None) -> Prediction:
    try:
        p = plan(row)
        parts = []
        for count, load in loads(row, p):
            trace = Trace() if traces is not None else None
            sched = scheduler_for(p, cal)
            res = run(sched, load, trace, p.frontend_s(sched.model))
            parts.append((count, res))
            if traces is not None:
                traces.append((count, load, trace, p))
    except SpecError as exc:
        return Prediction(row.row_id, f"unsupported: {exc}")
    except ValueError as exc:  # a request that can never fit the KV cache, say
        return Prediction(row.row_id, f"unsupported: {exc}")
    return combine(row.row_id, parts)


def combine(row_id: str, parts: list[tuple[int, Result]]) -> Prediction:
    import numpy as np
    duration = max(res.duration_s for _, res in parts)
    tokens = sum(c * res.output_tok_s * res.duration_s for c, res in parts)
    reqs = sum(c * res.requests for c, res in parts)
    w = np.array([c * res.requests for c, res in parts], dtype=float)
    med = np.array([res.ttft_median_s for _, res in parts])
    tmed = np.array([res.tpot_median_s for _, res in parts])
    return Prediction(
        row_id, "ok", tokens / duration, 1e3 * weighted_median(med, w),
        1e3 * weighted_median(tmed, w), reqs / duration,
        1e3 * float((w * [r.ttft_mean_s for _, r in parts]).sum() / w.sum()),
        1e3 * float((w * [r.tpot_mean_s for _, r in parts]).sum() / w.sum()),
        1e3 * weighted_median(np.array([r.itl_median_s for _, r in parts]), w))


def read_rows(path: Path) -> list[Row]:
    """Every row of a CSV table, checked; RowError names the file, row and column."""
    try:
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
            if missing:
                raise RowError(f"{path}: missing column {missing[0]}"
                               + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
            rows, sources, seen = [], [], set()
            for i, d in enumerate(reader, start=1):
                try:
                    row = read_row(d, i)
                except RowError as exc:
                    raise RowError(f"{path}: {exc}") from None
                if row.row_id in seen:
                    raise RowError(f"{path}: row {row.row_id}: column row_id: given twice")
                seen.add(row.row_id)
                rows.append(row)
                sources.append((d.get("source") or "").strip())
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise RowError(f"{path}: cannot read: {exc}") from None
    return sibling_batches(rows, sources)


def sibling_batches(rows: list[Row], sources: list[str]) -> list[Row]:
    """A row that states no compiled batch takes the one its siblings state: rows of the
    same source and configuration (model, precision, engine and version, accelerator, chips,
    tp, lengths) that differ only in load or speculation are one set-up run several ways (a
    tutorial's baseline and its EAGLE run, a report's single stream and its sweep). Siblings
    that disagree, or a row with no source, leave the engine profile's default."""
    def key(r: Row, src: str) -> tuple:
        return (src, r.model, r.precision, r.engine, r.engine_version, r.accelerator, r.instance,
                r.n_accel, r.tp, r.input_tokens, r.output_tokens)
    stated: dict[tuple, set[int]] = {}
    for r, src in zip(rows, sources, strict=True):
        if src and r.max_num_seqs:
            stated.setdefault(key(r, src), set()).add(r.max_num_seqs)
    out = []
    for r, src in zip(rows, sources, strict=True):
        got = stated.get(key(r, src), set()) if src and not r.max_num_seqs else set()
        out.append(replace(r, max_num_seqs=got.pop()) if len(got) == 1 else r)
    return out


def write(path: Path, preds: list[Prediction]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=OUT_COLUMNS)
        w.writeheader()
        for p in preds:
            w.writerow(p.as_row())
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="servingbench predict", description=(
        "EMULATED: predict each row of a published-measurements table (its configuration "
        "and load) with the emulator's performance model and scheduler in virtual time."))
    ap.add_argument("--in", dest="src", type=Path, required=True, help="rows CSV (the table's columns)")
    ap.add_argument("--out", type=Path, required=True, help="predictions CSV, written whole or not at all")
    a = ap.parse_args(argv)
    try:
        rows = read_rows(a.src)
    except RowError as exc:
        print(f"servingbench predict: {exc}", file=sys.stderr)
        return 2
    preds = [simulate(r) for r in rows]
    try:
        write(a.out, preds)
    except OSError as exc:
        print(f"servingbench predict: --out {a.out}: {exc}", file=sys.stderr)
        return 2
    ok = sum(p.status == "ok" for p in preds)
    print(f"servingbench predict (EMULATED): {ok} of {len(preds)} rows predicted, "
          f"{len(preds) - ok} unsupported -> {a.out}")
    return 0


def finite(v: float | None) -> bool:
    return v is not None and math.isfinite(v)
