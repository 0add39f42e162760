"""Where one `analyze` spends its time: each stage of `analyze_run` and each named query of
sql/ it runs, wall and CPU seconds (CPU of the whole process: DuckDB's threads included),
in call order, with each one's share of the analysis. One fresh process per run folder; GX
is imported first and reported apart (the CLI overlaps it with the DuckDB work).

    .venv/bin/python benchmarks/analyze_profile.py --requests 1000000 --chunks 128 --steps 64
        [--run-dir DIR (reuse a folder; default: build a synthetic run in --tmp)] [--keep]
        [--explain NAME (DuckDB's EXPLAIN ANALYZE of one named query, after the run)]
        [--baseline REF (the analyzer at REF on the same folder, after: benchmarks/trees.py)]

Prints a markdown table for docs/performance.md; writes benchmarks/out/analyze_profile.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from trees import THIS, Tree, extract  # noqa: E402

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
from servingbench.resources.analysis import gx
gx._context()
import_s = time.perf_counter() - t0
from servingbench.resources.analysis import analyze, deployment_outputs, frontier, gates, rundir
from servingbench.resources.analysis import sqlfiles, workload_outputs

rows, stack = [], []

def timed(label, fn):
    def wrapper(*a, **k):
        name = label(a, k) if callable(label) else label
        w0, c0 = time.perf_counter(), time.process_time()
        stack.append(name)
        try:
            return fn(*a, **k)
        finally:
            stack.pop()
            rows.append({"depth": len(stack), "name": name,
                         "wall_s": time.perf_counter() - w0, "cpu_s": time.process_time() - c0,
                         "order": w0})
    return wrapper

sqlfiles.query = timed(lambda a, k: "sql/" + a[1] + ".sql", sqlfiles.query)
if hasattr(sqlfiles, "create"):  # a tree before it created its tables inline (open_run's rest)
    sqlfiles.create = timed(lambda a, k: "sql/" + a[1] + ".sql (" + (
        "view" if k.get("view") else "table") + (" " + k["table"] if k.get("table") else "")
        + ")", sqlfiles.create)
rundir._register = timed(lambda a, k: "register " + a[3], rundir._register)
rundir._register_events = timed("read events", rundir._register_events)
gx.validate = timed(lambda a, k: "GX validate " + a[2], gx.validate)
for mod, names in ((analyze, ["open_run", "read_telemetry", "step_metrics", "run_gates",
                              "cost_tables", "_write_outputs"]),
                   (gates, ["request_gates", "bill_gates"]),
                   (workload_outputs, ["by_context", "job", "slo_capacity"]),
                   (frontier, ["frontier", "what_if"]),
                   (deployment_outputs, ["derive"])):
    for n in names:
        setattr(mod, n, timed(n, getattr(mod, n)))
w0, c0 = time.perf_counter(), time.process_time()
result = analyze.analyze_run(Path(sys.argv[1]))
assert result.exit_code == 0, result.message
total = {"wall_s": time.perf_counter() - w0, "cpu_s": time.process_time() - c0}
explain = None
if len(sys.argv) > 2:
    run = rundir.open_run(Path(sys.argv[1]))
    from servingbench.resources.analysis import metrics
    run.con.register("manifest_steps", metrics._manifest_steps(run.manifest))
    run.con.execute("PRAGMA enable_profiling='query_tree_optimizer'")
    name = sys.argv[2]
    params = {"run_id": run.manifest["run_id"], "source": run.manifest["source"],
              "slo_ttft_s": 2.0, "slo_tpot_s": 0.1, "fixed_replicas": run.fixed_replicas,
              "model": None, "max_examples": 5}
    wanted = sqlfiles.params_of(name)
    explain = "\n".join(r[1] for r in run.con.execute(
        "EXPLAIN ANALYZE " + sqlfiles.load(name).split(";")[0],
        {k: v for k, v in params.items() if k in wanted} or None).fetchall())
    run.close()
print(json.dumps({"import_s": import_s, "total": total, "rows": rows, "explain": explain,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def profile(run_dir: Path, explain: str | None = None, tree: Tree = THIS) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="sb-profile-tmp-"))
    env = {**os.environ, "PYTHONPATH": tree.pythonpath, "TMPDIR": str(scratch)}
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, str(run_dir), *([explain] if explain else [])],
                             capture_output=True, text=True, env=env, cwd=tree.path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(result: dict) -> str:
    total = result["total"]
    lines = [f"analysis {total['wall_s']:.2f} s wall, {total['cpu_s']:.2f} CPU-s "
             f"(GX import before it: {result['import_s']:.2f} s; peak RSS "
             f"{result['peak_rss_mb']:,.0f} MB)", "",
             "| stage / query | wall s | share of wall | CPU s |", "|---|---:|---:|---:|"]
    for r in sorted(result["rows"], key=lambda r: r["order"]):
        if r["wall_s"] < 0.005 and r["depth"] > 0:
            continue
        indent = "&nbsp;&nbsp;" * r["depth"]
        lines.append(f"| {indent}{r['name']} | {r['wall_s']:.2f} | "
                     f"{r['wall_s'] / total['wall_s']:.1%} | {r['cpu_s']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=10_000)
    p.add_argument("--chunks", type=int, default=128)
    p.add_argument("--steps", default="64")
    p.add_argument("--run-dir", type=Path, default=None, help="analyse this folder instead")
    p.add_argument("--tmp", default=None)
    p.add_argument("--keep", action="store_true", help="keep the built run folder (printed)")
    p.add_argument("--explain", default=None, help="EXPLAIN ANALYZE this named query after")
    p.add_argument("--baseline", default=None,
                   help="also profile the analyzer at this git ref, on the same folder, after")
    args = p.parse_args(argv)
    work = None
    run_dir = args.run_dir
    if run_dir is None:
        from tests.support.runbuilder import synthetic_run
        work = Path(tempfile.mkdtemp(prefix=f"sb-profile-{args.requests}-", dir=args.tmp))
        run_dir = synthetic_run(work / "run", args.requests, chunks=args.chunks,
                                steps=tuple(int(s) for s in args.steps.split(",")))
    try:
        trees = {"this tree": THIS}
        if args.baseline:
            base = Path(tempfile.mkdtemp(prefix="sb-profile-base-", dir=args.tmp))
            trees[f"at {args.baseline}"] = extract(args.baseline, base)
        results = {}
        for name, tree in trees.items():
            load = os.getloadavg()
            result = profile(run_dir, args.explain, tree)
            result["loadavg"] = [load, os.getloadavg()]
            results[name] = result
            print(f"\n{name}: {run_dir} (load average {load[0]:.1f} → {os.getloadavg()[0]:.1f})")
            print(table(result))
            if result["explain"]:
                print(result["explain"])
        out = HERE / "out"
        out.mkdir(exist_ok=True)
        (out / "analyze_profile.json").write_text(json.dumps(results, indent=2))
    finally:
        if work is not None and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        elif work is not None:
            print(f"kept {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
