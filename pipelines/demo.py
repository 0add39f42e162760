"""`servingbench demo`: the README's first command.

Until the Dagster chain runs on the embedded default, the demo analyses the bundled
synthetic run folder (`examples/synthetic-run`, labelled emulated) in a scratch copy under
the data folder and prints its tables.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from resources.analysis.analyze import analyze_run
from resources.analysis.summary import render

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "synthetic-run"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="servingbench demo", description=__doc__)
    p.add_argument("--data-dir", type=Path, default=REPO / "data",
                   help="where outputs go (default: ./data)")
    args = p.parse_args(argv)
    work = args.data_dir / "demo" / EXAMPLE.name
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(EXAMPLE, work, ignore=shutil.ignore_patterns("gates.json", "derived_*",
                                                                 "cost_*", "headline*"))
    result = analyze_run(work)
    print(render(result))
    return result.exit_code
