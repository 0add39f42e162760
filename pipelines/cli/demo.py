"""`servingbench demo`: the README's first command. Runs `benchmark_job` on the embedded
default (this host as the cluster, the engine emulator as the model server, the price sheet
as the bill) for every default candidate, then prints the SLO headline table.

Every number it prints is EMULATED. Small steps keep it to a few minutes; runs are recorded
in the Dagster instance under DAGSTER_HOME (default: ./.dagster_home), so `make ui` shows them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from pathlib import Path

from pipelines.config import DEFAULT_FILE, REPO, ConfigError, load_candidates

BANNER = ("=" * 78 + "\nEMULATED — modelled by the local engine emulator on this machine and priced "
          "from an\nunverified price sheet. These are not measurements of real hardware.\n" + "=" * 78)


def dagster_home() -> Path:
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(REPO / ".dagster_home")))
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").exists() or (home / "dagster.yaml").write_text(
        "telemetry:\n  enabled: false\n")
    return home


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="servingbench demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--candidates", type=Path, default=DEFAULT_FILE, help="candidates YAML")
    p.add_argument("--only", default=None, help="comma list of candidate names (default: all)")
    p.add_argument("--data-dir", type=Path, default=REPO / "data", help="outputs (default ./data)")
    p.add_argument("--concurrency", default="1,4,8", help="closed-loop steps (default 1,4,8)")
    p.add_argument("--duration-s", type=float, default=3.0,
                   help="seconds per step, in-flight requests then drain (default 3)")
    p.add_argument("--requests", type=int, default=400, help="at most this many per step")
    p.add_argument("--output-tokens", type=int, default=64, help="output tokens (default 64)")
    p.add_argument("--cold-start-s", type=float, default=1.0,
                   help="emulated cold start, shortened for the demo (default 1 s)")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        candidates = load_candidates(args.candidates)
        steps = tuple(int(x) for x in args.concurrency.split(","))
    except (ConfigError, ValueError) as exc:
        print(f"servingbench demo: {exc}", file=sys.stderr)
        return 2
    names = [c.name for c in candidates]
    if args.only:
        wanted = args.only.split(",")
        unknown = [n for n in wanted if n not in names]
        if unknown:
            print(f"servingbench demo: unknown candidate {unknown[0]!r}; known: {', '.join(names)}",
                  file=sys.stderr)
            return 2
        names = wanted
    dagster_home()
    print(BANNER, flush=True)
    print("setting up Dagster (first import takes a few seconds)...", flush=True)
    import dagster as dg

    from pipelines.definitions import build_definitions
    from pipelines.profiles import Settings
    from resources.loadgen.generator import LoadGenerator

    settings = Settings(data_dir=args.data_dir, candidates_file=args.candidates,
                        cold_start_s=args.cold_start_s,
                        load=LoadGenerator(concurrency=steps, requests_per_step=args.requests,
                                          duration_s=args.duration_s,
                                          warmup_requests=4, output_tokens=args.output_tokens,
                                          progress="terminal"))
    job = build_definitions(settings).resolve_job_def("benchmark_job")
    instance = dg.DagsterInstance.get()
    date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    run_dirs, failures, t0 = [], [], time.monotonic()
    for i, name in enumerate(names, 1):
        print(f"\n[{i}/{len(names)}] {name}  (partition {date}|{name})", flush=True)
        result = job.execute_in_process(
            partition_key=dg.MultiPartitionKey({"date": date, "candidate": name}),
            instance=instance, raise_on_error=False, run_config=quiet)
        run_dir = run_dir_of(result, "cost_per_1m_output_tokens")
        if result.success and run_dir:
            run_dirs.append(run_dir)
            print(f"    done: {run_dir}", flush=True)
        else:
            why = failure(result)
            failures.append((name, why))
            print(f"    FAILED: {why}", flush=True)
    print(f"\n{BANNER}\n", flush=True)
    print_headline(run_dirs)
    for name, why in failures:
        print(f"  {name}: not measured — {why}")
    print(f"\n{len(run_dirs)} of {len(names)} candidates in {time.monotonic() - t0:.0f} s. "
          f"Run folders: {Path(args.data_dir) / 'runs'}\nSee them in the Dagster UI: make ui "
          "→ http://127.0.0.1:3000")
    if run_dirs:
        _print_comparison(run_dirs, Path(args.data_dir) / "comparison.html")
    return 0 if run_dirs else 1


def _print_comparison(run_dirs: list[str], out: Path) -> None:
    """The comparison report across the run folders this demo just produced."""
    from resources.report import ReportError, write_comparison_report

    try:
        path = write_comparison_report([Path(d) for d in run_dirs], out)
    except (ReportError, OSError) as exc:
        print(f"comparison report not written: {exc}")
        return
    print(f"Comparison report (EMULATED): {path}")


def run_dir_of(result, asset: str) -> str | None:
    for event in result.all_events:
        if event.is_step_materialization and event.asset_key.to_user_string() == asset:
            md = event.event_specific_data.materialization.metadata
            return md["run_dir"].value if "run_dir" in md else None
    return None


def failure(result) -> str:
    for event in result.all_events:
        if event.is_step_failure:
            err = event.event_specific_data.error
            text = (err.cause.message if err.cause else err.message).strip()
            return text.splitlines()[-1] if text else "step failed"
        if event.event_type_value == "ASSET_CHECK_EVALUATION":
            ev = event.event_specific_data
            if not ev.passed:
                return f"rejected by gate {ev.check_name}: {ev.metadata['message'].value}"
    return "did not finish"


def print_headline(run_dirs: list[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from resources.analysis.summary import HEADLINE_COLUMNS, table

    if not run_dirs:
        print("no candidate produced a cost table")
        return
    rows = pa.concat_tables([pq.read_table(Path(d) / "headline.parquet") for d in run_dirs]).to_pylist()
    rows.sort(key=lambda r: (not r["meets_slo"], r["cost_per_1m_output_usd"] or float("inf")))
    print("SLO headline — EMULATED (cheapest per 1M output tokens first, among steps meeting the SLO)")
    print(table(rows, HEADLINE_COLUMNS))
