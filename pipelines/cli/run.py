"""`servingbench run --candidate NAME`: one benchmark_job partition with the profile chosen
by SERVINGBENCH_PROFILE (`eks` for real hardware; `local` for the embedded default) and the
candidate's full load plan from the candidates file. Prints the candidate's headline.

`servingbench run --sweep NAME [--parallel N]`: every combination of a sweep that passes the
pre-flight fit check (the skipped ones are listed first, with their reasons), the same way.

`servingbench run --all [--parallel N]`: every candidate of the date, up to N runs at once,
each through the run queue of the same Dagster instance (DAGSTER_HOME). Candidates sharing a
concurrency pool (pipelines/candidates.yaml `pools`) wait in the queue for their turn, so N
never asks for more nodes than the pools allow.

    SERVINGBENCH_PROFILE=eks SERVINGBENCH_EKS_CLUSTER=... servingbench run --candidate p5-scout-bf16-tp8
    servingbench run --all --parallel 4
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from servingbench.pipelines.cli.demo import (
    BANNER,
    dagster_home,
    failure,
    print_headline,
    run_dir_of,
)
from servingbench.pipelines.config import ConfigError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="servingbench run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--candidate", help="a name from the candidates file")
    which.add_argument("--all", action="store_true",
                       help="every candidate of the file (not the sweeps' combinations)")
    which.add_argument("--sweep", metavar="NAME", help="every combination of a sweep that fits")
    p.add_argument("--parallel", type=int, default=1,
                   help="with --all or --sweep: runs at once (default 1); pools still bound "
                        "each type")
    p.add_argument("--date", default=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"),
                   help="the date partition (default: today, UTC)")
    return p


def main(argv: list[str]) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.parallel < 1:
        p.error(f"--parallel: expected a positive integer, got {args.parallel}")
    if args.parallel != 1 and not (args.all or args.sweep):
        p.error("--parallel goes with --all or --sweep")
    try:
        dt.date.fromisoformat(args.date)
    except ValueError:
        p.error(f"--date: expected YYYY-MM-DD, got {args.date!r}")
    try:  # the file is checked before Dagster is imported (seconds): a bad one is exit 2 at once
        from pathlib import Path

        from servingbench.pipelines import refusals
        from servingbench.pipelines.catalog import load_candidates
        from servingbench.pipelines.config import DEFAULT_FILE
        from servingbench.resources.contract import settings as envvars

        path = Path(envvars.get("SERVINGBENCH_CANDIDATES") or DEFAULT_FILE)
        # the profile's model server is asked about each candidate's plan (the eks one
        # builds its AWS session, reaching nothing): nothing is made for a refused one
        refusals.check(envvars.get("SERVINGBENCH_PROFILE"), path, load_candidates(path))
    except ConfigError as exc:
        print(f"servingbench run: {exc}", file=sys.stderr)
        return 2
    home = dagster_home()
    import dagster as dg
    from servingbench.pipelines.definitions import build_definitions
    from servingbench.pipelines.profiles import Settings

    try:
        settings = Settings.from_env()
        defs = build_definitions(settings)
    except ConfigError as exc:
        print(f"servingbench run: {exc}", file=sys.stderr)
        return 2
    candidates = defs.resources["candidates"]
    if args.all or args.sweep:
        from servingbench.pipelines.cli.run_all import run_all

        chosen = {n: c for n, c in candidates.items() if c.sweep is None}
        if args.sweep:
            from servingbench.pipelines.cli.sweep import members

            chosen = members(settings.candidates_file, args.sweep, "servingbench run")
            if chosen is None:
                return 2
            chosen = {n: candidates[n] for n in chosen}
        return run_all(chosen, args.date, args.parallel, home)
    if args.candidate not in candidates:
        print(f"servingbench run: unknown candidate {args.candidate!r}; known: "
              f"{', '.join(candidates)}", file=sys.stderr)
        return 2
    if settings.profile == "local":
        print(BANNER, flush=True)
    print(f"profile {settings.profile}: benchmark_job for {args.date}|{args.candidate}", flush=True)
    result = defs.resolve_job_def("benchmark_job").execute_in_process(
        partition_key=dg.MultiPartitionKey({"date": args.date, "candidate": args.candidate}),
        instance=dg.DagsterInstance.get(), raise_on_error=False,
        run_config={"loggers": {"console": {"config": {"log_level": "INFO"}}}})
    run_dir = run_dir_of(result, "cost_per_1m_output_tokens")
    if not (result.success and run_dir):
        print(f"FAILED: {failure(result)}", file=sys.stderr)
        return 1
    print_headline([run_dir])
    print(f"run folder: {run_dir}")
    return 0

