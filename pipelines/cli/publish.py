"""`servingbench publish RUN_DIR s3://bucket/prefix/runs/<run_id> [--status S]`

Copies a local run folder to its S3 run prefix, every object through a temporary key, and
writes the `_COMPLETE` marker last (the code the pipeline publishes with). Running it again
completes a publish that stopped halfway: the marker is taken away first, every file is
copied again, the marker comes back.

The status the marker records is the run's: `accepted` when gates.json says every gate
passed, `rejected` when one failed, `failed` when the folder was never analyzed; `--status`
says it explicitly.

Exit status: 0 published, 2 bad input (a message naming the folder, URI or key), 1 S3
failed (the folder stays without its marker until a rerun succeeds).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from servingbench.resources.contract import run_files
from servingbench.resources.storage import runstore

PROG = "servingbench publish"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path, help="the local run folder (manifest.json and the rest)")
    p.add_argument("uri", help="s3://bucket/prefix/runs/<run_id>: the folder's name last")
    p.add_argument("--status", choices=runstore.STATUSES, default=None,
                   help="the marker's status (default: from gates.json)")
    return p


def status_of(run_dir: Path) -> str:
    """accepted / rejected from the folder's gates.json; failed without one. ValueError for a
    gates.json that is not the analyzer's list of gates."""
    accepted = run_files.accepted(run_files.read_gates(run_dir))  # RunFileError: a ValueError
    if accepted is None:
        return "failed"
    return "accepted" if accepted else "rejected"


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    run_dir = args.run_dir
    if not (run_dir / "manifest.json").is_file():
        print(f"{PROG}: {run_dir}: not a run folder (no manifest.json)", file=sys.stderr)
        return 2
    if not runstore.is_remote(args.uri):
        print(f"{PROG}: {args.uri!r}: expected s3://bucket/prefix/runs/<run_id>", file=sys.stderr)
        return 2
    leaf = args.uri.rstrip("/").rsplit("/", 1)[-1]
    if leaf != run_dir.resolve().name:
        print(f"{PROG}: {args.uri}: must end in the run's folder name {run_dir.resolve().name!r}, "
              "so a run is never published under another run's id", file=sys.stderr)
        return 2
    try:
        status = args.status or status_of(run_dir)
        runstore.publish(run_dir, args.uri.rstrip("/"), status=status)
    except (runstore.RunStoreError, ValueError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{PROG}: {args.uri}: {exc} (run it again: the marker is written last)",
              file=sys.stderr)
        return 1
    print(f"published {run_dir} to {args.uri} ({status})")
    return 0
