"""`servingbench analyze <run_dir>`: gates, metrics and cost for a run folder (contract §6).

Exit status: 0 accepted, 3 rejected by a gate, 2 unreadable or malformed input.
"""

from __future__ import annotations

import argparse
import json
import sys

from pipelines.cli.argtypes import positive_floats
from resources.analysis.analyze import DEFAULT_SLO, MALFORMED, analyze_run
from resources.analysis.summary import render


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="servingbench analyze", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="a run folder (manifest.json, request/chunk logs, bill)")
    p.add_argument("--slo-ttft-s", type=positive_floats, default=[DEFAULT_SLO[0]],
                   help="p99 TTFT SLO in seconds; a comma list asks several SLOs (default 2)")
    p.add_argument("--slo-tpot-s", type=positive_floats, default=[DEFAULT_SLO[1]],
                   help="p99 TPOT SLO in seconds, paired with --slo-ttft-s (default 0.1)")
    p.add_argument("--json", action="store_true", help="print gates and tables as JSON")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    ttft, tpot = args.slo_ttft_s, args.slo_tpot_s
    if len(ttft) != len(tpot):
        if len(ttft) == 1:
            ttft = ttft * len(tpot)
        elif len(tpot) == 1:
            tpot = tpot * len(ttft)
        else:
            print("servingbench analyze: --slo-ttft-s and --slo-tpot-s list different numbers "
                  "of SLOs", file=sys.stderr)
            return MALFORMED
    result = analyze_run(args.run_dir, slos=list(zip(ttft, tpot, strict=True)))
    if args.json:
        doc = {"exit_code": result.exit_code, "message": result.message, "gates": result.gates}
        for name in ("metrics", "cost", "headline"):
            table = getattr(result, name)
            doc[name] = None if table is None else table.to_pylist()
        print(json.dumps(doc, indent=2, default=str))
    else:
        print(render(result), file=sys.stderr if result.exit_code == MALFORMED else sys.stdout)
    return result.exit_code
