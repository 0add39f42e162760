"""`servingbench run --candidate NAME`: one benchmark_job partition with the profile chosen
by SERVINGBENCH_PROFILE (`eks` for real hardware; `local` for the embedded default) and the
candidate's full load plan from the candidates file. Prints the candidate's headline.

    SERVINGBENCH_PROFILE=eks SERVINGBENCH_EKS_CLUSTER=... servingbench run --candidate p5-scout-bf16-tp8
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from pipelines.cli.demo import BANNER, dagster_home, failure, print_headline, run_dir_of
from pipelines.config import ConfigError


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="servingbench run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--candidate", required=True, help="a name from the candidates file")
    p.add_argument("--date", default=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"),
                   help="the date partition (default: today, UTC)")
    args = p.parse_args(argv)
    dagster_home()
    import dagster as dg

    from pipelines.definitions import build_definitions
    from pipelines.profiles import Settings

    try:
        settings = Settings.from_env()
        defs = build_definitions(settings)
    except ConfigError as exc:
        print(f"servingbench run: {exc}", file=sys.stderr)
        return 2
    if args.candidate not in defs.resources["candidates"]:
        print(f"servingbench run: unknown candidate {args.candidate!r}; known: "
              f"{', '.join(defs.resources['candidates'])}", file=sys.stderr)
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
