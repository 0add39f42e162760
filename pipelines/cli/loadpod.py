"""`servingbench loadpod --upload s3://…/runs/<run_id> --scratch DIR [--config NAME] -- <load
flags>`: one pod of the load Job (resources/loadjob/). Fetches the run's load config (`NAME`
under `--upload`, written by the pipeline) into the scratch folder, runs `servingbench load
--config` with it into that folder as worker `pod-<JOB_COMPLETION_INDEX>`, then uploads that worker's shards and its manifest to
the run's S3 prefix — also when the load failed, so whatever it recorded is kept. The exit
status is the load's (or 1 when the upload failed): a failed pod is a failed Job index,
which the pipeline names in the run's manifest.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from servingbench.resources.contract.digits import is_digits
from servingbench.resources.contract.schemas import PARTIAL_SUFFIX, SHARDED
from servingbench.resources.storage import runstore

INDEX_ENV = "JOB_COMPLETION_INDEX"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="servingbench loadpod", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--upload", required=True, help="the run's prefix, s3://bucket/prefix/runs/<id>")
    p.add_argument("--scratch", required=True, type=Path, help="local run folder to create")
    p.add_argument("--config", default=None, metavar="NAME",
                   help="the run's load config, an object under --upload (load_config.json)")
    p.add_argument("load", nargs=argparse.REMAINDER, help="-- then `servingbench load` flags")
    return p


def uploads(scratch: Path, worker: str) -> dict[str, str]:
    """{local name: remote name}: the worker's shards (or, from a load that wrote plain
    files, those files under the worker's shard names) and its account of its part,
    `worker.<name>.json` (steps with the self-watch, phases; a plain load's manifest.json
    carries the same keys and stands in for it). A load stopped by a full disk has only its
    streams: they go up as the worker's stream shards, whose complete batches are records."""
    out = {}
    for name in SHARDED:
        for suffix in (".parquet", PARTIAL_SUFFIX):
            shard = f"{name}.{worker}{suffix}"
            found = [f for f in (shard, f"{name}{suffix}") if (scratch / f).is_file()]
            if found:
                out[found[0]] = shard
                break
    summary = f"worker.{worker}.json"
    if (scratch / summary).is_file():
        out[summary] = summary
    elif (scratch / "manifest.json").is_file():
        out["manifest.json"] = summary
    return out


def raise_fd_limit() -> tuple[int, int]:
    """Soft descriptor limit up to the hard one: every stream is a socket, and a runtime
    that leaves the soft limit at 1,024 would cap a pod near 1,000 streams (docs/scale.md)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft, hard


def main(argv: list[str]) -> int:
    from servingbench.pipelines.cli import load

    args = parser().parse_args(argv)
    if not runstore.is_remote(args.upload):
        print(f"servingbench loadpod: --upload {args.upload!r}: expected s3://bucket/prefix/runs/<id>",
              file=sys.stderr)
        return 2
    index = os.environ.get(INDEX_ENV, "")
    if not is_digits(index):
        print(f"servingbench loadpod: {INDEX_ENV}={index!r}: expected the pod's index (an "
              "Indexed Job sets it)", file=sys.stderr)
        return 2
    worker = f"pod-{int(index)}"
    soft, _ = raise_fd_limit()
    print(f"loadpod {worker}: up to {soft} open files", file=sys.stderr)
    flags = args.load[1:] if args.load[:1] == ["--"] else args.load
    if args.config is not None:
        try:
            got = runstore.get(args.upload, [args.config], args.scratch)
        except (OSError, runstore.RunStoreError) as exc:
            got, why = [], str(exc)
        else:
            why = "no such object"
        if not got:
            print(f"servingbench loadpod: --config {args.config}: cannot read it under "
                  f"{args.upload}/ ({why})", file=sys.stderr)
            return 2
        flags = ["--config", str(args.scratch / args.config), *flags]
    rc = 1
    try:
        if "--worker-index" in flags:  # the pods meet before every step (podsync.py)
            flags = [*flags, "--barrier-uri", f"{args.upload.rstrip('/')}/barrier"]
        rc = load.main([*flags, "--out", str(args.scratch)])
    finally:
        # what the worker recorded goes up whatever happened to it
        names = uploads(args.scratch, worker)
        try:
            runstore.put(args.scratch, args.upload, names)
            print(f"loadpod {worker}: uploaded {', '.join(sorted(names.values())) or 'nothing'} "
                  f"to {args.upload}/", file=sys.stderr)
        except (OSError, runstore.RunStoreError) as exc:
            print(f"servingbench loadpod: upload to {args.upload} failed: {exc}", file=sys.stderr)
            rc = rc or 1
    return rc
