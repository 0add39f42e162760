"""`servingbench import PEER RESULT --out RUN_DIR`: another benchmark tool's result as a run
folder (contract §6) that `servingbench analyze` reads unchanged (docs/import.md).

PEER is aiperf (its artifact folder), guidellm (benchmarks.json), inference-perf (its
report folder) or vllm (`vllm bench serve --save-result --save-detailed` JSON). The run's
candidate and scope come from a servingbench manifest (--manifest-from, e.g. the same
endpoint's own run) or from --candidate NAME (looked up in the candidates file) and the
flags; whatever nobody says stays null. `source` is `emulated` unless --source measured
(or the manifest) says the peer ran against a real engine.

Exit status: 0 written (and, with --analyze, accepted), 2 a malformed, truncated or
mixed-version peer file or a bad flag (the message names the file and the field), 3 written
but rejected by a gate (--analyze), 74 the disk filled up.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from servingbench.pipelines.cli.argtypes import positive_int
from servingbench.resources import peers
from servingbench.resources.contract import durable
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.exits import DISK_FULL
from servingbench.resources.peers.records import PeerFileError, read_result
from servingbench.resources.peers.run_writer import write_run

DEFAULT_CANDIDATES = Path(__file__).resolve().parents[1] / "candidates.yaml"


def _instant(text: str) -> int:
    try:
        return mf.parse_ts(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an RFC 3339 instant such as 2026-11-30T18:00:00Z, got {text!r}") from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="servingbench import", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("peer", choices=peers.names())
    p.add_argument("result", type=Path, help="the peer's result file or folder")
    p.add_argument("--out", required=True, type=Path, help="run folder to create (never overwritten)")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--manifest-from", type=Path, default=None, metavar="FILE",
                     help="take candidate, scope and price basis from this servingbench manifest")
    who.add_argument("--candidate", default=None, metavar="NAME",
                     help="the candidate (filled from --candidates when it is listed there)")
    p.add_argument("--candidates", type=Path, default=DEFAULT_CANDIDATES, metavar="FILE")
    p.add_argument("--source", choices=mf.SOURCES, default=None,
                   help="measured: the peer ran against a real engine (default: the "
                        "manifest's, else emulated)")
    for flag in ("instance-type", "region", "account-id", "cluster-name", "engine",
                 "engine-version"):
        p.add_argument(f"--{flag}", default=None)
    p.add_argument("--node-count", type=positive_int, default=None)
    p.add_argument("--run-id", default=None)
    p.add_argument("--anchor", type=_instant, default=None, metavar="ISO",
                   help="vllm, inference-perf: the UTC instant the first request was sent "
                        "(their files keep only a monotonic clock)")
    p.add_argument("--analyze", action="store_true",
                   help="then run `servingbench analyze` on the folder")
    return p


def base_manifest(args: argparse.Namespace) -> dict:
    """Candidate and scope of the imported run; ManifestError/ValueError name the flag."""
    base: dict = {}
    if args.manifest_from is not None:
        base = mf.load(args.manifest_from)
    elif args.candidate is not None:
        base = _candidate(args.candidate, args.candidates)
    for key in ("instance_type", "region", "account_id", "cluster_name", "engine",
                "engine_version", "node_count"):
        if getattr(args, key) is not None:
            base[key] = getattr(args, key)
    return base


def _candidate(name: str, path: Path) -> dict:
    from servingbench.pipelines.catalog import load_candidates
    from servingbench.pipelines.config import ConfigError

    try:
        found = {c.name: c for c in load_candidates(path)}
    except ConfigError as exc:
        raise ValueError(f"--candidates: {exc}") from None
    if name not in found:
        print(f"note: candidate {name!r} is not in {path}: only the flags describe it",
              file=sys.stderr)
        return {"candidate": name}
    from servingbench.assets.benchmark import initial_manifest

    m = initial_manifest(found[name], "x", "emulated")
    return {k: v for k, v in m.items() if k not in ("run_id", "source", "created_at")}


def read_peer(args: argparse.Namespace):
    reader = peers.get(args.peer)
    if reader.relative_clock:
        return read_result(reader, args.result, anchor_ns=args.anchor)
    if args.anchor is not None:
        relative = [n for n in peers.names() if peers.get(n).relative_clock]
        raise ValueError(f"--anchor: only for {' and '.join(relative)} ({args.peer} "
                         "keeps wall-clock times)")
    return read_result(reader, args.result)


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.run_id is not None and not mf.RUN_ID.fullmatch(args.run_id):
        print(f"servingbench import: --run-id: {args.run_id!r} does not match "
              "[A-Za-z0-9._-]{1,128}", file=sys.stderr)
        return 2
    try:
        base = base_manifest(args)
        source = args.source or base.get("source") or "emulated"
        run = read_peer(args)
        m = write_run(run, args.out, base, run_id=args.run_id, source=source)
    except (PeerFileError, mf.ManifestError, ValueError, FileExistsError) as exc:
        print(f"servingbench import: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if durable.is_disk_full(exc):
            print(f"servingbench import: the disk filled up writing {args.out} ({exc})",
                  file=sys.stderr)
            return DISK_FULL
        print(f"servingbench import: {exc}", file=sys.stderr)
        return 2
    imp = m["import"]
    n = sum(1 for r in run.requests if r.phase == "steady")
    print(f"imported {args.peer} {imp['peer_version'] or '(version not recorded)'}: {n} steady "
          f"requests in {len(m['steps'])} step(s) -> {args.out} (run {m['run_id']}, "
          f"{m['source'].upper()}; chunk times {imp['chunk_times'].replace('_', ' ')})")
    for note in imp["notes"]:
        print(f"  note: {note}")
    if not args.analyze:
        return 0
    from servingbench.pipelines.cli import analyze

    return analyze.main([str(args.out)])
