"""`servingbench analyze <run_dir>`: gates, metrics and cost for a run folder (contract §6).

Exit status: 0 accepted, 3 rejected by a gate, 2 unreadable or malformed input, 74 the
outputs did not fit on the disk (nothing earlier overwritten; make room and run it again),
75 the analysis needed more memory than SERVINGBENCH_ANALYZE_MEMORY allows (nothing written;
raise it and run it again).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from servingbench.pipelines.cli.argtypes import positive, positive_floats
from servingbench.resources.analysis import gx
from servingbench.resources.analysis.analyze import MALFORMED, NO_MEMORY, NO_ROOM, analyze_run
from servingbench.resources.analysis.metrics import DEFAULT_SLO
from servingbench.resources.analysis.summary import render
from servingbench.resources.storage.runstore import RunStoreError, fetch, is_remote, publish

PUBLISH_STATUS = {0: "accepted", 3: "rejected"}  # exit status → the marker's status


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="servingbench analyze", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="a run folder (manifest.json, request/chunk logs, bill)")
    p.add_argument("--slo-ttft-s", type=positive_floats, default=[DEFAULT_SLO[0]],
                   help="p99 TTFT SLO in seconds; a comma list asks several SLOs (default 2)")
    p.add_argument("--slo-tpot-s", type=positive_floats, default=[DEFAULT_SLO[1]],
                   help="p99 TPOT SLO in seconds, paired with --slo-ttft-s (default 0.1)")
    p.add_argument("--bucket-s", type=positive, default=None,
                   help="an episode's bucket length in seconds (contract 3.7; default the "
                        "scenario's bucket_s, else 10)")
    p.add_argument("--json", action="store_true", help="print gates and tables as JSON")
    p.add_argument("--complete", action="store_true",
                   help="s3://…/runs/<id> only: analyze and publish a folder left without its "
                        "_COMPLETE marker (an analyze or publish that died halfway); every "
                        "file goes back, marker last")
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
    slos = list(zip(ttft, tpot, strict=True))
    gx.preload()  # Great Expectations imports (seconds) while DuckDB opens and scans the run
    if args.complete and not is_remote(args.run_dir):
        print("servingbench analyze: --complete: expected s3://…/runs/<run_id> (a local "
              "folder has no marker to complete)", file=sys.stderr)
        return MALFORMED
    if is_remote(args.run_dir):
        result = _analyze_remote(args.run_dir, slos, args.complete, args.bucket_s)
        if result is None:
            return MALFORMED
    else:
        result = analyze_run(args.run_dir, slos=slos, bucket_s=args.bucket_s)
    if args.json:
        doc = {"exit_code": result.exit_code, "message": result.message, "gates": result.gates}
        for name in ("metrics", "cost", "headline", "frontier", "what_if"):
            table = getattr(result, name)
            doc[name] = None if table is None else table.to_pylist()
        print(json.dumps(doc, indent=2, default=str))
    else:
        print(render(result), file=sys.stderr if result.exit_code in (MALFORMED, NO_ROOM, NO_MEMORY) else sys.stdout)
    return result.exit_code


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


def _analyze_remote(uri: str, slos, complete: bool = False, bucket_s: float | None = None):
    """Analyze a published run folder in place: fetch it, analyze the copy, send back what
    the analyzer wrote or changed (and delete what it withheld), marker last. `complete`:
    the folder may lack its marker (the temporary copy of an analyze that died while
    publishing died with it; the folder on S3 is all there is), and every file goes back."""
    uri = uri.rstrip("/")
    with tempfile.TemporaryDirectory(prefix="servingbench-analyze-") as tmp:
        local = Path(tmp) / "run"
        try:
            fetch(uri, local, unmarked=complete)
            before = _snapshot(local)
            result = analyze_run(local, slos=slos, bucket_s=bucket_s)
            after = _snapshot(local)
            # marker away, withheld files deleted, new ones copied, marker back, in that order
            publish(local, uri, [n for n in after if complete or before.get(n) != after[n]],
                    status=PUBLISH_STATUS.get(result.exit_code, "failed"),
                    drop=[n for n in before if n not in after])
        except (RunStoreError, OSError) as exc:
            print(f"servingbench analyze: {exc}", file=sys.stderr)
            return None
    result.run_dir = uri
    return result
