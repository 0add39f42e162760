"""Benchmark of the report: how long the run report and the comparison take on
synthetic run folders of a given size. Prints one line per measurement.

    .venv/bin/python benchmarks/report.py [--requests-per-slot N] [--repeat R]

Each run has steps c=1,2,4,8 (15 x N requests, 24 output tokens each, ~21 chunks per
request). Figures are medians over R repeats; compare ratios within one run, the machine
is shared and noisy.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from servingbench.resources.report import write_comparison_report, write_run_report
from servingbench.resources.report.cdf import itl_cdf, ttft_cdf
from servingbench.resources.report.rundata import load_run

from tests.support.runbuilder import EMULATED, FAST, SLOW, simulated_run


def _time(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests-per-slot", type=int, default=200)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        dirs = [simulated_run(root, dataclasses.replace(c, requests_per_slot=args.requests_per_slot),
                          f"bench-{i}", seed=i) for i, c in enumerate((FAST, EMULATED, SLOW))]
        run = load_run(dirs[0])
        n_req, n_chunks = run.requests.num_rows, run.chunks.num_rows
        print(f"run size: {n_req} requests, {n_chunks} chunks per run, 3 runs")
        print(f"load_run (manifest, outputs, raw logs): {_time(lambda: load_run(dirs[0]), args.repeat):.3f} s")
        print(f"TTFT CDF (DuckDB): {_time(lambda: ttft_cdf(run), args.repeat):.3f} s")
        print(f"per-token ITL CDF (DuckDB): {_time(lambda: itl_cdf(run), args.repeat):.3f} s")
        print(f"write_run_report (3 plots + HTML): "
              f"{_time(lambda: write_run_report(dirs[0]), args.repeat):.3f} s")
        out = root / "comparison.html"
        print(f"write_comparison_report (3 candidates): "
              f"{_time(lambda: write_comparison_report(dirs, out), args.repeat):.3f} s")
        print(f"report sizes: run {dirs[0].joinpath('report.html').stat().st_size / 1e3:.0f} kB, "
              f"comparison {out.stat().st_size / 1e3:.0f} kB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
