"""`servingbench demo`: the README's first command. Runs `benchmark_job` on the embedded
default (this host as the cluster, the engine emulator as the model server, the price sheet
as the bill) for every default candidate, then prints the SLO headline table.

Every number it prints is EMULATED. Small steps keep it to a few minutes; runs are recorded
in the Dagster instance under DAGSTER_HOME (default: ./.dagster_home), so `make ui` shows them.

`servingbench demo --real` (`make demo-real`) runs the candidates of
pipelines/candidates_real.yaml instead: llama.cpp's server on this host with a real model
(`make engine`), so every figure is MEASURED on this host, quality included, and priced from
this host's entry in pipelines/price_sheet_local.yaml.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

from servingbench.pipelines.catalog import load_candidates
from servingbench.pipelines.cli.argtypes import (
    non_negative,
    positive,
    positive_floats,
    positive_int,
)
from servingbench.pipelines.config import DEFAULT_FILE, REAL_FILE, REPO, ConfigError

REAL_BANNER = ("=" * 78 + "\nMEASURED ON THIS HOST — real engines on this machine's CPU "
               "(llama.cpp's server and a\nreal model; vLLM's CPU build and a tiny model of "
               "random weights);\npriced from this host's hourly price in "
               "pipelines/price_sheet_local.yaml (a price\nsheet you set, never a cloud bill).\n"
               + "=" * 78)
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
    p.add_argument("--real", action="store_true",
                   help="the real engines on this host (llama.cpp, vLLM's CPU build), "
                        "candidates_real.yaml")
    p.add_argument("--candidates", type=Path, default=None,
                   help="candidates YAML (default: candidates.yaml, or candidates_real.yaml "
                        "with --real)")
    p.add_argument("--only", default=None,
                   help="comma list of candidate names (default: all); with --sweep, run "
                        "after the sweep's combinations")
    p.add_argument("--sweep", default=None, metavar="NAME",
                   help="the combinations of this sweep of the file (its skips are listed)")
    p.add_argument("--data-dir", type=Path, default=REPO / "data", help="outputs (default ./data)")
    p.add_argument("--concurrency", default=None,
                   help="closed-loop steps (default 1,4,8; with --real the candidates' plan)")
    p.add_argument("--duration-s", type=positive, default=None,
                   help="seconds per step, in-flight requests then drain (default 3; with "
                        "--real none: the candidates' request counts)")
    p.add_argument("--requests", type=positive_int, default=None,
                   help="at most this many per step (default 400; with --real the plan's)")
    p.add_argument("--output-tokens", type=positive_int, default=None,
                   help="output tokens (default 64; with --real the scenario's)")
    p.add_argument("--cold-start-s", type=non_negative, default=1.0,
                   help="emulated cold start, shortened for the demo (default 1 s)")
    p.add_argument("--levels", type=positive_floats, default=[5, 10, 20, 50, 100, 200],
                   help="interactivity levels (tok/s one user sees) of the frontier table "
                        "(default 5,10,20,50,100,200)")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.candidates is None:
        args.candidates = REAL_FILE if args.real else DEFAULT_FILE
    if not args.real:
        args.concurrency = args.concurrency or "1,4,8"
        args.duration_s = 3.0 if args.duration_s is None else args.duration_s
        args.requests = args.requests or 400
        args.output_tokens = args.output_tokens or 64
    banner = REAL_BANNER if args.real else BANNER
    try:
        steps = (tuple(positive_int(x) for x in args.concurrency.split(","))
                 if args.concurrency else None)   # --real: the candidates' own plan
    except argparse.ArgumentTypeError as exc:
        print(f"servingbench demo: argument --concurrency: {exc}", file=sys.stderr)
        return 2
    try:
        from servingbench.pipelines import refusals

        candidates = load_candidates(args.candidates)
        refusals.check("local", args.candidates, candidates)
    except ConfigError as exc:
        print(f"servingbench demo: {exc}", file=sys.stderr)
        return 2
    # the file's own candidates; a sweep's combinations only when asked for (--sweep, --only)
    names = [c.name for c in candidates if c.sweep is None]
    if args.only:
        wanted = args.only.split(",")
        unknown = [n for n in wanted if n not in {c.name for c in candidates}]
        if unknown:
            print(f"servingbench demo: unknown candidate {unknown[0]!r}; known: {', '.join(names)}",
                  file=sys.stderr)
            return 2
        names = wanted
    if args.sweep:
        from servingbench.pipelines.cli.sweep import members

        swept = members(args.candidates, args.sweep, "servingbench demo")
        if swept is None:
            return 2
        # the sweep's combinations, then any --only candidate beside them
        names = swept + ([n for n in names if n not in swept] if args.only else [])
    if args.real:
        why = _real_engine_missing([c for c in candidates if c.name in names])
        if why is not None:
            print(f"servingbench demo --real: {why}", file=sys.stderr)
            return 2
    dagster_home()
    print(banner, flush=True)
    print("setting up Dagster (first import takes a few seconds)...", flush=True)
    import dagster as dg
    from servingbench.pipelines.definitions import build_definitions
    from servingbench.pipelines.profiles import Settings
    from servingbench.resources.loadgen.generator import LoadGenerator

    settings = Settings(data_dir=args.data_dir, candidates_file=args.candidates,
                        cold_start_s=args.cold_start_s,
                        load=LoadGenerator(concurrency=steps, requests_per_step=args.requests,
                                          duration_s=args.duration_s,
                                          warmup_requests=None if args.real else 4,
                                          output_tokens=args.output_tokens,
                                          progress="terminal"))
    job = build_definitions(settings).resolve_job_def("benchmark_job")
    instance = dg.DagsterInstance.get()
    date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    run_dirs, failures, quality_dirs, t0 = [], [], [], time.monotonic()
    for i, name in enumerate(names, 1):
        print(f"\n[{i}/{len(names)}] {name}  (partition {date}|{name})", flush=True)
        result = job.execute_in_process(
            partition_key=dg.MultiPartitionKey({"date": date, "candidate": name}),
            instance=instance, raise_on_error=False, run_config=quiet)
        run_dir = run_dir_of(result, "cost_per_1m_output_tokens")
        q_dir = run_dir_of(result, "quality")
        if q_dir:
            quality_dirs.append((name, q_dir))
        if result.success and run_dir:
            run_dirs.append(run_dir)
            print(f"    done: {run_dir}", flush=True)
        else:
            why = failure(result)
            failures.append((name, why))
            print(f"    FAILED: {why}", flush=True)
    print(f"\n{banner}\n", flush=True)
    label = "MEASURED on this host" if args.real else "EMULATED"
    print_headline(run_dirs, label)
    print_levels(run_dirs + [d for _, d in quality_dirs if d not in run_dirs], label, args.levels)
    if args.sweep:
        from servingbench.pipelines.cli import sweep_frontier

        print("\n" + sweep_frontier.text(run_dirs + [d for _, d in quality_dirs
                                                    if d not in run_dirs], label))
    if args.real:
        print_quality(quality_dirs)
    from servingbench.pipelines.cli import episode_summary

    if lines := episode_summary.text(run_dirs):
        print(f"\nEpisodes, spot runs and several models \u2014 {label} (whole steady phase)\n"
              + lines)
    for name, why in failures:
        if "quality_matches_reference" in why:
            # measured and kept (run folder, metrics, quality), only never ranked on cost
            print(f"  {name}: measured, excluded from the cost ranking — {why}")
        else:
            print(f"  {name}: not measured — {why}")
    print(f"\n{len(run_dirs)} of {len(names)} candidates in {time.monotonic() - t0:.0f} s. "
          f"Run folders: {Path(args.data_dir) / 'runs'}\nSee them in the Dagster UI: make ui "
          "→ http://127.0.0.1:3000")
    # runs kept out of the cost ranking by quality parity are still shown in the comparison
    shown = run_dirs + [d for _, d in quality_dirs if d not in run_dirs
                        and (Path(d) / "headline.parquet").exists()]
    if shown:
        _print_comparison(shown, Path(args.data_dir) / "comparison.html", label, args.levels)
    return 0 if run_dirs else 1


def print_levels(run_dirs: list[str], label: str, levels) -> None:
    """contract §3.6 in the terminal: at each interactivity level, the cheapest candidate and
    its runner-up (the comparison writes the same rows to frontier_levels.parquet)."""
    from servingbench.resources.analysis.frontier import levels_of_folders
    from servingbench.resources.analysis.metrics import DEFAULT_SLO
    from servingbench.resources.analysis.summary import band_fraction, levels_text
    from servingbench.resources.contract import deployment_record
    from servingbench.resources.contract import manifest as mf

    if not run_dirs:
        return
    table = levels_of_folders([Path(d) for d in run_dirs], DEFAULT_SLO[0], levels,
                              skip_broken=True)
    print(f"\nInteractivity levels — {label} (at each level of tok/s one user sees, the "
          f"cheapest candidate per 1M output tokens\namong its valid steps that reach it with "
          f"p99 TTFT <= {DEFAULT_SLO[0]:g} s; the runner-up and how much dearer it is)")
    bands = {}
    for d in run_dirs:
        band = deployment_record.fidelity(Path(d))
        bands[mf.load(Path(d) / "manifest.json")["candidate"]] = band_fraction(band)
    print(levels_text(table.to_pylist(), bands=bands))
    print("What-if prices at other bases (spot, reserved, savings plans, Capacity Blocks; "
          "never billed):\ncost_what_if.parquet in each run folder, and the comparison's "
          "cost plot.")


def _print_comparison(run_dirs: list[str], out: Path, label: str, levels) -> None:
    """The comparison report across the run folders this demo just produced."""
    from servingbench.resources.report import ReportError, write_comparison_report

    try:
        path = write_comparison_report([Path(d) for d in run_dirs], out, levels=levels)
    except (ReportError, OSError) as exc:
        print(f"comparison report not written: {exc}")
        return
    print(f"Comparison report ({label}): {path}")


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


def _real_engine_missing(candidates) -> str | None:
    """Why a real engine the candidates run on this host is not installed (llama.cpp: `make
    engine`; vLLM's CPU build: `make engine-vllm`), or None."""
    from servingbench.resources.model_server import engines

    if any(engines.local(c.engine) for c in candidates):
        from servingbench.resources.model_server.local.llamacpp import engine_available

        if (why := engine_available()) is not None:
            return why
    if any(engines.runs_here(c.engine, c.instance_type) and not engines.local(c.engine)
           for c in candidates):
        from servingbench.resources.model_server.local.vllm_cpu import engine_available

        return engine_available()
    return None


def print_quality(quality_dirs: list[tuple[str, str]]) -> None:
    """Accuracy and the parity verdict of every real candidate, ranked or not."""
    from servingbench.resources.contract import parity

    print("\nQuality parity — MEASURED on this host (same evaluation set, temperature 0)")
    print(f"  {'candidate':<28} {'accuracy':>9}  {'95 % CI':<15} {'n':>4}  verdict")
    for name, d in quality_dirs:
        s_file = Path(d) / "quality_summary.json"
        s = json.loads(s_file.read_text()) if s_file.exists() else None
        p = parity.read(Path(d))
        if s is None:
            print(f"  {name:<28} {'-':>9}  {'-':<15} {'-':>4}  no quality recorded")
            continue
        ci = f"[{s['ci95_low']:.3f}, {s['ci95_high']:.3f}]"
        verdict = ("not judged" if p is None else
                   "matches reference" if p["passed"] else
                   f"FAILED ({p['status']}): excluded from the cost ranking")
        if p is not None and p.get("weights") == "random":
            verdict += " (random weights: vLLM's --load-format dummy, by design)"
        print(f"  {name:<28} {s['accuracy']:>9.3f}  {ci:<15} {s['n']:>4}  {verdict}")


def print_headline(run_dirs: list[str], label: str = "EMULATED") -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from servingbench.resources.analysis.ranking import Standing, rank, within_bands
    from servingbench.resources.analysis.summary import (
        advice,
        band_fraction,
        headline_columns,
        headline_rows,
        not_measured,
        table,
        within_bands_lines,
    )
    from servingbench.resources.contract import deployment_record, parity
    from servingbench.resources.contract import manifest as mf

    if not run_dirs:
        print("no candidate produced a cost table")
        return
    # promoted: a headline written before the optional search columns existed lacks them
    rows = pa.concat_tables([pq.read_table(Path(d) / "headline.parquet") for d in run_dirs],
                            promote_options="default").to_pylist()
    failed_parity = {mf.load(Path(d) / "manifest.json")["run_id"] for d in run_dirs
                     if parity.run_failed(Path(d))}
    # the comparison report's order (resources/analysis/ranking.py): met first, cheapest
    # first, then "meets no step" or failed quality parity, then not measured (a run with
    # no valid step is not a verdict on its hardware, so it never sorts as a failure)
    bands = {mf.load(Path(d) / "manifest.json")["run_id"]: deployment_record.fidelity(Path(d))
             for d in run_dirs}
    ranked = rank(Standing(r["candidate"], r, r["source"] == "emulated", r["run_id"] in failed_parity,
                           ref=r, band=band_fraction(bands.get(r["run_id"]))) for r in rows)
    rows = [s.ref for s, _ in ranked]
    print(f"SLO headline — {label} (cheapest per 1M output tokens first, among steps meeting "
          "the SLO)")
    print(table(headline_rows(rows, bands), headline_columns(rows)))
    ties = within_bands_lines(within_bands(ranked))
    if any(r["source"] == "emulated" for r in rows):
        print("\nerror band: the emulator's cross-validated error of output tokens/s against "
              "published measurements of its accelerator and engine (docs/emulator.md, Fidelity)")
    for line in ties:
        print(f"  no winner: {line}")
    unmeasured = [d for d in run_dirs if any(
        r["meets_slo"] is None for r in pq.read_table(Path(d) / "headline.parquet").to_pylist())]
    invalid = []
    for d in unmeasured:
        manifest = mf.load(Path(d) / "manifest.json")
        print(f"\n{manifest['candidate']}: not measured (no valid step)")
        metrics = pq.read_table(Path(d) / "derived_metrics.parquet").to_pylist()
        invalid += metrics
        for line in not_measured(metrics, manifest):
            print(f"  {line}")
    if unmeasured:
        print(f"\n{advice(invalid)}")
    print_workloads(run_dirs)


def print_workloads(run_dirs: list[str]) -> None:
    """job.json (contract §3.4) and slo_capacity.json (§3.5) of the runs that have them."""

    import pyarrow.parquet as pq
    from servingbench.resources.analysis.summary import job_text, slo_search_text

    for d in run_dirs:
        d = Path(d)
        name = json.loads((d / "manifest.json").read_text()).get("candidate")
        if (d / "job.json").exists():
            print(f"\n{name}: batch job (job.json)")
            print(job_text(json.loads((d / "job.json").read_text())))
        if (d / "slo_capacity.json").exists():
            cost = None
            if (d / "headline.parquet").exists():
                rows = pq.read_table(d / "headline.parquet").to_pylist()
                cost = rows[0].get("slo_search_cost_per_1m_output_usd") if rows else None
            print(f"\n{name}: SLO capacity search (slo_capacity.json)")
            print(slo_search_text(json.loads((d / "slo_capacity.json").read_text()), cost))
