"""Nightly regression check: a run's headline figures against the trailing median of the
same candidate's last N runs (non-blocking; the Dagster check reports it as WARN).

A run regresses when, against that median, its output tokens/s fell by more than
`throughput_drop`, its p99 TTFT rose by more than `ttft_p99_rise`, its cost per 1M output
tokens rose by more than `cost_rise`, or it meets the SLO at no step while most of its
history did. Only runs of the same candidate, source (measured / emulated) and SLO are
compared, and only runs created before the current one.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
from servingbench.resources.contract.timestamps import parse_ts
from servingbench.resources.report.rundata import RunData, headline_row, load_run


@dataclass(frozen=True)
class Thresholds:
    throughput_drop: float = 0.10   # output_tok_s below (1 - x) x median
    ttft_p99_rise: float = 0.20     # ttft_s_p99 above (1 + x) x median
    cost_rise: float = 0.10         # cost_per_1m_output_usd above (1 + x) x median


# metric column, threshold field, direction of a regression (+1 rise, -1 fall)
_CHECKS = (
    ("output_tok_s", "throughput_drop", -1),
    ("ttft_s_p99", "ttft_p99_rise", +1),
    ("cost_per_1m_output_usd", "cost_rise", +1),
)


@dataclass
class RegressionResult:
    regressed: bool
    findings: list[dict] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.regressed

    def summary(self) -> str:
        meta = self.metadata
        if meta.get("n_history", 0) < meta.get("min_history", 1):
            return (f"{meta.get('candidate')}: not enough history "
                    f"({meta.get('n_history', 0)} earlier runs, need {meta.get('min_history')})")
        bad = [f for f in self.findings if f["regressed"]]
        if not bad:
            return f"{meta['candidate']}: no regression against the median of {meta['n_history']} runs"
        parts = [f"{f['metric']} {f['change']:+.1%} (limit {f['limit']:+.0%})"
                 if f["change"] is not None else f"{f['metric']}: {f['reason']}" for f in bad]
        return f"{meta['candidate']}: REGRESSION vs median of {meta['n_history']} runs: " + ", ".join(parts)


def _num(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def _created(row: dict) -> int | None:
    value = row.get("created_at")
    if value is None:
        return None
    return parse_ts(value) if isinstance(value, str) else int(value)


def _comparable(current: dict, row: dict) -> bool:
    if row.get("run_id") == current.get("run_id") or row.get("candidate") != current.get("candidate"):
        return False
    for key in ("source", "slo_ttft_s", "slo_tpot_s"):
        if key in current and key in row and current[key] != row[key]:
            return False
    now, then = _created(current), _created(row)
    return now is None or then is None or then < now


def compare_to_history(current: dict, history: list[dict], n: int = 5,
                       thresholds: Thresholds = Thresholds(), min_history: int = 1
                       ) -> RegressionResult:
    """Compare one headline row (contract §4 headline columns, plus `created_at`, an RFC 3339
    string or ns) with the trailing median of the last `n` comparable rows of `history`
    (ordered by created_at when present, else as given, oldest first)."""
    pool = [row for row in history if _comparable(current, row)]
    if all(_created(row) is not None for row in pool):
        pool.sort(key=_created)
    window = pool[-n:] if n > 0 else []
    meta: dict = {
        "candidate": current.get("candidate"), "run_id": current.get("run_id"),
        "window": n, "min_history": min_history, "n_history": len(window),
        "history_run_ids": [row.get("run_id") for row in window],
        "thresholds": asdict(thresholds), "regressed_metrics": [],
    }
    result = RegressionResult(regressed=False, metadata=meta)
    if len(window) < min_history or not window:
        return result
    for column, limit_name, direction in _CHECKS:
        now = _num(current.get(column))
        past = [v for v in (_num(row.get(column)) for row in window) if v is not None]
        base = statistics.median(past) if past else None
        limit = direction * getattr(thresholds, limit_name)
        change = (now - base) / base if now is not None and base not in (None, 0.0) else None
        bad = change is not None and (change > limit if direction > 0 else change < limit)
        reason = None if change is not None else ("no current value" if now is None
                                                  else "no baseline value")
        result.findings.append(dict(metric=column, current=now, baseline_median=base,
                                    change=change, limit=limit, regressed=bad, reason=reason))
        meta[f"{column}_current"] = now
        meta[f"{column}_baseline_median"] = base
        meta[f"{column}_change"] = change
    met = [bool(row.get("meets_slo")) for row in window if row.get("meets_slo") is not None]
    lost = current.get("meets_slo") is False and sum(met) * 2 > len(met)
    result.findings.append(dict(metric="meets_slo", current=current.get("meets_slo"),
                                baseline_median=None, change=None, limit=None, regressed=lost,
                                reason="meets the SLO at no step; most earlier runs did"
                                if lost else None))
    meta["regressed_metrics"] = [f["metric"] for f in result.findings if f["regressed"]]
    result.regressed = bool(meta["regressed_metrics"])
    return result


def record_of(run: RunData, slo: tuple[float, float] | None = None) -> dict | None:
    """A run's headline row (rundata.headline_row) with `created_at` from its manifest."""
    row = headline_row(run, slo)
    if row is not None:
        row["created_at"] = run.manifest["created_at"]
    return row


def headline_record(run_dir: Path | str, slo_ttft_s: float | None = None,
                    slo_tpot_s: float | None = None) -> dict | None:
    """`record_of` a run folder: the input `compare_to_history` takes."""
    slo = None if slo_ttft_s is None or slo_tpot_s is None else (slo_ttft_s, slo_tpot_s)
    return record_of(load_run(run_dir, raw=False), slo)
