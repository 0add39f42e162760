"""Empirical CDFs behind the plots, computed with DuckDB from a run's raw records.

TTFT: one sample per ok steady request. Per-token ITL: token-weighted (SPEC §3), from the
chunk log. Each CDF is thinned to at most MAX_POINTS points for plotting; the thinning
keeps the first and last sample, so the tails stay visible.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np

from resources.report.rundata import RunData

MAX_POINTS = 2000
_SQL = Path(__file__).parent


def _query(name: str, **relations) -> list[tuple]:
    sql = (_SQL / f"{name}.sql").read_text()
    con = duckdb.connect(":memory:")
    try:
        for rel_name, table in relations.items():
            con.register(rel_name, table)
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _thin(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(x) <= MAX_POINTS:
        return x, y
    idx = np.unique(np.linspace(0, len(x) - 1, MAX_POINTS).round().astype(int))
    return x[idx], y[idx]


Cdf = dict[str, tuple[np.ndarray, np.ndarray]]


def ttft_cdf(run: RunData) -> Cdf:
    """step -> (sorted TTFT seconds, cumulative share i/n)."""
    if run.requests is None or run.requests.num_rows == 0:
        return {}
    per_step: dict[str, list[float]] = {}
    for step, ttft in _query("ttft_samples", requests=run.requests):
        per_step.setdefault(step, []).append(ttft)
    out: Cdf = {}
    for step, values in per_step.items():
        x = np.asarray(values, dtype=float)
        y = np.arange(1, len(x) + 1, dtype=float) / len(x)
        out[step] = _thin(x, y)
    return out


def itl_cdf(run: RunData) -> Cdf:
    """step -> (sorted per-token ITL seconds, token-weighted cumulative share)."""
    if run.requests is None or run.chunks is None or run.chunks.num_rows == 0:
        return {}
    per_step: dict[str, tuple[list[float], list[float]]] = {}
    for step, itl, share in _query("itl_cdf", requests=run.requests, chunks=run.chunks):
        xs, ys = per_step.setdefault(step, ([], []))
        xs.append(itl)
        ys.append(share)
    return {s: _thin(np.asarray(x), np.asarray(y)) for s, (x, y) in per_step.items()}
