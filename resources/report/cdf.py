"""Empirical CDFs behind the plots, computed with DuckDB from a run's raw records.

TTFT: one sample per ok steady request. Per-token ITL: token-weighted (contract §3), from the
chunk log. Each CDF is thinned to at most MAX_POINTS points for plotting; the thinning
keeps the first and last sample, so the tails stay visible.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow.compute as pc
from servingbench.resources.analysis import chunks, sqlfiles
from servingbench.resources.report.rundata import RunData

MAX_POINTS = 2000
Cdf = dict[str, tuple[np.ndarray, np.ndarray]]


def _query(name: str, chunk_tables: bool = False, **relations) -> dict[str, np.ndarray]:
    """Run one named query of sql/ over Arrow tables, after building the chunk-level
    relations it reads when asked (chunk_gaps, built as the analyzer builds it); columns as
    numpy arrays."""
    con = duckdb.connect(":memory:")
    try:
        for rel_name, table in relations.items():
            con.register(rel_name, table)
        if chunk_tables:
            chunks.build(con)
        table = sqlfiles.query(con, name)
        return {k: table.column(k).to_numpy(zero_copy_only=False) for k in table.column_names}
    finally:
        con.close()


def _by_step(cols: dict[str, np.ndarray], x: str, y: str | None) -> Cdf:
    """Split the (step-sorted) query result by step; y = i/n when no y column."""
    steps = np.asarray(cols["step"], dtype=object)
    out: Cdf = {}
    for step in dict.fromkeys(steps.tolist()):
        mask = steps == step
        xs = np.asarray(cols[x], dtype=float)[mask]
        ys = (np.asarray(cols[y], dtype=float)[mask] if y
              else np.arange(1, len(xs) + 1, dtype=float) / len(xs))
        out[step] = _thin(xs, ys)
    return out


def _thin(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(x) <= MAX_POINTS:
        return x, y
    idx = np.unique(np.linspace(0, len(x) - 1, MAX_POINTS).round().astype(int))
    return x[idx], y[idx]


def ttft_cdf(run: RunData) -> Cdf:
    """step -> (sorted TTFT seconds, cumulative share i/n)."""
    if run.requests is None or run.requests.num_rows == 0:
        return {}
    return _by_step(_query("ttft_samples", requests=run.requests), "ttft_s", None)


def itl_cdf(run: RunData) -> Cdf:
    """step -> (sorted per-token ITL seconds, token-weighted cumulative share)."""
    if run.requests is None or run.chunks is None or run.chunks.num_rows == 0:
        return {}
    steady = run.requests.filter(pc.field("phase") == "steady")
    cols = _query("itl_cdf", True, steady=steady, chunks=run.chunks)
    return _by_step(cols, "itl_s", "cum_share")
