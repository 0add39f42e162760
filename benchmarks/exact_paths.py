"""Exact-path reads, the two ways the analyzer does them, side by side in one process: the
chunk gaps and the §3 metric SQL over one synthetic run folder, named `run` (DuckDB's own
parquet scan, exact for a path without pattern characters) and renamed `run[1]` (an Arrow
dataset over the exact file list, since DuckDB would read that name as a pattern).
Alternating repetitions; the ratio is the figure.

    .venv/bin/python benchmarks/exact_paths.py [--requests 10000] [--chunks 128] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from servingbench.resources.analysis.metrics import step_metrics  # noqa: E402
from servingbench.resources.analysis.rundir import open_run  # noqa: E402

from tests.support.runbuilder import synthetic_run  # noqa: E402


def _timed(run_dir: Path) -> float:
    """Open (schema checks, the chunk gaps over the whole chunk log) and the §3 metrics."""
    t0 = time.perf_counter()
    with open_run(run_dir) as run:
        step_metrics(run)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=10_000)
    p.add_argument("--chunks", type=int, default=128)
    p.add_argument("--reps", type=int, default=3)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain, pattern = Path(tmp) / "run", Path(tmp) / "run[1]"
        synthetic_run(plain, a.requests, a.chunks)
        duck, arrow = [], []
        for _ in range(a.reps):
            duck.append(_timed(plain))
            os.rename(plain, pattern)
            arrow.append(_timed(pattern))
            os.rename(pattern, plain)
    d, r = statistics.median(duck), statistics.median(arrow)
    print(f"{a.requests} requests x {a.chunks} chunks, median of {a.reps}: DuckDB read_parquet "
          f"(plain path) {d:.2f} s, Arrow dataset (path with '[') {r:.2f} s; ratio {r / d:.2f}x")


if __name__ == "__main__":
    main()
