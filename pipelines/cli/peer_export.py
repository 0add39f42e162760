"""`servingbench export RUN_DIR --format aiperf|csv --out PATH`: a run folder's records in a
form another tool's viewer reads (docs/import.md).

aiperf: one AIPerf artifact folder per step under PATH (`aiperf plot PATH/c=4` draws it;
`servingbench import aiperf PATH/c=4` reads it back). csv: one row per request.
Exit status: 0 written, 2 an unreadable run folder or an existing --out, 74 a full disk.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from servingbench.resources.contract import durable
from servingbench.resources.contract.exits import DISK_FULL
from servingbench.resources.contract.manifest import ManifestError
from servingbench.resources.contract.schemas import SchemaError
from servingbench.resources.peers.export import FORMATS, ExportError, export_aiperf, export_csv


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="servingbench export", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path)
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument("--out", required=True, type=Path,
                   help="aiperf: a folder to create; csv: a file to create")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        if args.format == "aiperf":
            written = export_aiperf(args.run_dir, args.out)
        else:
            written = [export_csv(args.run_dir, args.out)]
    except (ExportError, ManifestError, SchemaError) as exc:
        print(f"servingbench export: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"servingbench export: {exc}", file=sys.stderr)
        return DISK_FULL if durable.is_disk_full(exc) else 2
    for path in written:
        print(f"wrote {path}")
    return 0
