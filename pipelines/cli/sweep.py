"""`servingbench sweep list [NAME]`: a sweep's expansion, every combination named from its
settings, and the combinations the pre-flight fit check (or the engine) rules out, each with
its reason. Nothing is provisioned. Run one with `servingbench run --sweep NAME`.

    servingbench sweep list
    servingbench sweep list scout-p5 --candidates pipelines/candidates.yaml
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from servingbench.pipelines.catalog import load_sweeps
from servingbench.pipelines.config import DEFAULT_FILE, ConfigError
from servingbench.resources.contract import settings


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="servingbench sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="action", required=True)
    ls = sub.add_parser("list", help="print the expansion of the file's sweeps and their skips")
    ls.add_argument("name", nargs="?", default=None, help="one sweep (default: all)")
    ls.add_argument("--candidates", type=Path, default=None,
                    help="candidates YAML (default: SERVINGBENCH_CANDIDATES or "
                         "pipelines/candidates.yaml)")
    return p


def _value(v) -> str:
    if isinstance(v, dict) and "as" in v:  # a group of settings: its name says which
        return str(v["as"])
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True)


def describe(sweep) -> list[str]:
    settings = ", ".join(sweep.keys)
    lines = [f"sweep {sweep.name}: {len(sweep.members) + len(sweep.skipped)} combinations of "
             f"{settings}; {len(sweep.members)} to run, {len(sweep.skipped)} skipped"]
    width = max([len(m.name) for m in sweep.members] + [len(s.name) for s in sweep.skipped] + [4])
    for m in sweep.members:
        values = "  ".join(f"{k}={_value(v)}" for k, v in m.sweep["settings"].items())
        lines.append(f"  run   {m.name:<{width}}  {values}")
    for s in sweep.skipped:
        values = "  ".join(f"{k}={_value(v)}" for k, v in s.settings.items())
        lines.append(f"  SKIP  {s.name:<{width}}  {values}\n        why: {s.reason}")
    return lines


def select(sweeps: list, name: str | None, prog: str) -> list | None:
    """The named sweep (or all); None after printing why when there is no such sweep."""
    if name is None:
        return sweeps
    found = [s for s in sweeps if s.name == name]
    if not found:
        known = ", ".join(s.name for s in sweeps) or "none in this file"
        print(f"{prog}: unknown sweep {name!r}; known: {known}", file=sys.stderr)
        return None
    return found


def members(path, name: str, prog: str) -> list[str] | None:
    """The names of a sweep's combinations that fit, after printing its skips (never a silent
    drop); None, after saying why, when the file has no such sweep or no member fits."""
    found = select(load_sweeps(path), name, prog)
    if found is None:
        return None
    sweep = found[0]
    for s in sweep.skipped:
        print(f"  skipped {s.name}: {s.reason}", flush=True)
    if not sweep.members:
        print(f"{prog}: sweep {name!r}: every combination is skipped", file=sys.stderr)
        return None
    return [m.name for m in sweep.members]


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    path = args.candidates or Path(settings.get("SERVINGBENCH_CANDIDATES") or DEFAULT_FILE)
    try:
        sweeps = load_sweeps(path)
    except ConfigError as exc:
        print(f"servingbench sweep: {exc}", file=sys.stderr)
        return 2
    chosen = select(sweeps, args.name, "servingbench sweep")
    if chosen is None:
        return 2
    if not chosen:
        print(f"{path}: no sweeps")
    for sweep in chosen:
        print("\n".join(describe(sweep)))
    return 0
