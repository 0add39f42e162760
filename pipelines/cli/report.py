"""`servingbench report <run_dir>... [--out PATH]`

One run folder: writes `<run_dir>/report.html` (or PATH). Several: writes each run's
report into its folder and the comparison of the latest run of each candidate to PATH
(default `comparison.html` beside the first run folder). A folder holding run folders
(and no manifest.json of its own) stands for all of them, so `servingbench report runs/`
reports every run under runs/ and writes runs/comparison.html. Prints the written paths.
Exit status: 0 written, 2 bad input (a one-line message naming the file).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from servingbench.pipelines.cli.argtypes import positive_floats
from servingbench.resources.analysis.frontier import DEFAULT_LEVELS


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="servingbench report",
        description="Write the HTML report of run folders (contract §6); with several folders, "
                    "also the comparison across the latest run of each candidate.")
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="run_dir")
    p.add_argument("--out", type=Path, default=None,
                   help="HTML to write: the run report for one folder, the comparison for several")
    p.add_argument("--compare", action="store_true",
                   help="write a comparison report even for a single folder")
    p.add_argument("--slo-ttft-s", type=float, default=None,
                   help="SLO lines and headline row to show (default: the runs' headline SLO)")
    p.add_argument("--slo-tpot-s", type=float, default=None)
    p.add_argument("--levels", type=positive_floats, default=list(DEFAULT_LEVELS),
                   help="interactivity levels (tok/s one user sees) of the comparison's "
                        "frontier_levels.parquet and table (default 5,10,20,50,100,200)")
    return p


def expand(paths: list[Path]) -> list[Path]:
    """A folder without a manifest.json but with run folders in it stands for those."""
    out: list[Path] = []
    for path in paths:
        if path.is_dir() and not (path / "manifest.json").exists():
            children = sorted(c for c in path.iterdir()
                              if c.is_dir() and (c / "manifest.json").exists())
            if children:
                out += children
                continue
        out.append(path)
    return out


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if (args.slo_ttft_s is None) != (args.slo_tpot_s is None):
        print("servingbench report: give both --slo-ttft-s and --slo-tpot-s, or neither",
              file=sys.stderr)
        return 2
    slo = None if args.slo_ttft_s is None else (args.slo_ttft_s, args.slo_tpot_s)
    from servingbench.resources.analysis.reconcile import ReconcileError, load_server_metrics
    from servingbench.resources.report.comparison import unique_runs, write_comparison_report
    from servingbench.resources.report.run_report import write_run_report
    from servingbench.resources.report.rundata import ReportError, load_run

    run_dirs = expand(args.run_dirs)
    try:
        compare = args.compare or len(run_dirs) > 1
        # check every folder before writing anything: bad input leaves no half-done output
        unique_runs([load_run(d) for d in run_dirs])
        for run_dir in run_dirs:
            load_server_metrics(run_dir)
        for run_dir in run_dirs:
            out = args.out if not compare else None
            print(f"run report: {write_run_report(run_dir, out, slo)}")
        if compare:
            out = args.out or run_dirs[0].resolve().parent / "comparison.html"
            path = write_comparison_report(run_dirs, out, slo, args.levels)
            print(f"comparison report: {path}")
            print(f"frontier levels: {path.parent / 'frontier_levels.parquet'}")
    except (ReportError, ReconcileError) as exc:
        print(f"servingbench report: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"servingbench report: cannot write the report ({exc})", file=sys.stderr)
        return 2
    return 0
