"""How `analyze` scales: synthetic runs of 10k, 100k and 1M requests, analysed end to end
(gates included) in a fresh process each, beside a straightforward pandas implementation of
the same per-step metrics in the same run (the ratio is the figure; absolute seconds move
with the machine's load).

    .venv/bin/python benchmarks/analyze_scale.py [--sizes 10000:128,100000:128,1000000:16]
        [--steps 1,8,32] [--baseline REF] [--baseline-max N] [--pandas-max N] [--tmp DIR]

`--baseline REF` runs the analyzer as it was at REF (its folders extracted with `git archive`
and imported before this checkout: benchmarks/trees.py) on the same run folder, one after the
other, up to `--baseline-max` requests.
Each child reports its peak RSS (getrusage, what `/usr/bin/time -v` calls "Maximum resident
set size", and the child runs under `/usr/bin/time -v` too when it is there); the DuckDB
scratch folder's largest size (database file and spill files) is sampled every 0.2 s.

Writes benchmarks/out/analyze_scale.json and prints a markdown table for docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from trees import THIS, Tree, extract  # noqa: E402

from tests.support.runbuilder import synthetic_run  # noqa: E402

CHILD = r"""
import importlib, json, os, resource, sys, time
t0 = time.perf_counter()
mode, run_dir = sys.argv[1], sys.argv[2]
prefix = os.environ.get("SB_PREFIX", "servingbench.")  # "" for a tree before the one name
if mode == "duckdb":
    gx = importlib.import_module(prefix + "resources.analysis.gx")
    gx._context()                                  # GX's fixed import cost, reported apart
    t1 = time.perf_counter()
    analyze_run = importlib.import_module(prefix + "resources.analysis.analyze").analyze_run
    result = analyze_run(run_dir)
    assert result.exit_code == 0, result.gates
    rows = result.metrics.to_pylist()
else:
    t1 = time.perf_counter()
    sys.path.insert(0, sys.argv[3])
    from pandas_reference import step_metrics
    rows = step_metrics(run_dir)
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "analyze_s": t2 - t1,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "itl_p99": {r["step"]: r["itl_s_p99"] for r in rows},
                  "ttft_p99": {r["step"]: r["ttft_s_p99"] for r in rows}}))
"""


def _du(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def run_child(mode: str, run_dir: Path, tree: Tree = THIS) -> dict:
    """One analysis in a fresh process (from `tree`), its spill folder watched meanwhile."""
    scratch = Path(tempfile.mkdtemp(prefix="sb-scale-tmp-"))
    env = {**os.environ, "PYTHONPATH": tree.pythonpath, "TMPDIR": str(scratch),
           "SB_PREFIX": tree.prefix}
    t0 = time.perf_counter()
    timev = ["/usr/bin/time", "-v"] if Path("/usr/bin/time").exists() else []
    proc = subprocess.Popen([*timev, sys.executable, "-c", CHILD, mode, str(run_dir), str(HERE)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tree.path, env=env)
    spill = 0
    while proc.poll() is None:
        spill = max(spill, _du(scratch))
        time.sleep(0.2)
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    shutil.rmtree(scratch, ignore_errors=True)
    if proc.returncode != 0:
        # the child's own stderr ends where /usr/bin/time's report begins (whose "Command
        # being timed" line spans the child's whole multi-line program); keep a signal line
        own, _, timed = err.partition("\tCommand being timed:")
        mine = [ln for ln in own.splitlines() if ln.strip() and not ln.startswith("Command ")]
        killed = [ln for ln in own.splitlines() if ln.startswith("Command terminated by signal")]
        rss = [ln for ln in timed.splitlines() if "Maximum resident set size" in ln]
        return {"error": "; ".join([*(mine[-1:] or [f"exit {proc.returncode}"]), *killed,
                                    *(r.strip() for r in rss)])}
    row = json.loads(out.strip().splitlines()[-1])
    row.update(wall_s=wall, spill_peak_mb=spill / 2**20)
    cpu = 0.0
    for line in err.splitlines():
        if "Maximum resident set size" in line:  # /usr/bin/time -v, in kB
            row["time_v_max_rss_mb"] = int(line.rsplit(":", 1)[1]) / 1024
        elif "User time (seconds)" in line or "System time (seconds)" in line:
            cpu += float(line.rsplit(":", 1)[1])
    if cpu:
        # CPU seconds (all threads, imports included): on a shared machine the wall time
        # says how busy it was; this says what the analysis costs
        row["cpu_s"] = cpu
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10000:128,100000:128,1000000:16",
                   help="requests:chunks pairs, comma separated")
    p.add_argument("--pandas-max", type=int, default=100_000,
                   help="largest request count also run through the pandas reference")
    p.add_argument("--steps", default="1,8,32",
                   help="closed-loop concurrency of each step, comma separated")
    p.add_argument("--baseline", help="a git ref whose analyzer runs beside this one")
    p.add_argument("--baseline-max", type=int, default=100_000,
                   help="largest request count also run through the baseline")
    p.add_argument("--tmp", default=None, help="folder for the run folders (default TMPDIR)")
    args = p.parse_args(argv)
    steps = tuple(int(s) for s in args.steps.split(","))
    results = []
    base_root = Path(tempfile.mkdtemp(prefix="sb-scale-base-", dir=args.tmp))
    base = extract(args.baseline, base_root) if args.baseline else None
    for item in args.sizes.split(","):
        n, chunks = (int(x) for x in item.split(":"))
        work = Path(tempfile.mkdtemp(prefix=f"sb-scale-{n}-", dir=args.tmp))
        try:
            t = time.perf_counter()
            synthetic_run(work / "run", n, chunks=chunks, steps=steps)
            build_s = time.perf_counter() - t
            row = {"requests": n, "chunks_per_request": chunks, "chunk_rows": n * chunks,
                   "steps": list(steps), "build_s": build_s,
                   "run_mb": _du(work / "run") / 2**20, "loadavg_before": os.getloadavg(),
                   "duckdb": run_child("duckdb", work / "run")}
            if base is not None and n <= args.baseline_max:
                row["baseline"] = run_child("duckdb", work / "run", base)
            row["loadavg_after"] = os.getloadavg()
            if n <= args.pandas_max:
                row["pandas"] = run_child("pandas", work / "run")
                d, pd_ = row["duckdb"], row["pandas"]
                if "error" not in d and "error" not in pd_:
                    row["pandas_over_duckdb"] = pd_["analyze_s"] / d["analyze_s"]
                    row["same_itl_p99"] = all(abs(d["itl_p99"][k] - pd_["itl_p99"][k]) < 1e-9
                                              for k in d["itl_p99"])
            results.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(base_root, ignore_errors=True)
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "analyze_scale.json").write_text(json.dumps(results, indent=2))
    print("| requests | chunk rows | analyzer | analyze s (DuckDB + GX gates) | wall s | CPU s | peak RSS MB "
          "| spill peak MB | GX import s | pandas metrics s | pandas / DuckDB | same ITL p99 "
          "| load avg before → after |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    nan = float("nan")
    for r in results:
        pd_ = r.get("pandas", {})
        for label, d in (("this tree", r["duckdb"]), (f"at {args.baseline}", r.get("baseline"))):
            if d is None:
                continue
            if "error" in d:
                print(f"| {r['requests']:,} | {r['chunk_rows']:,} | {label} | {d['error'][:200]} |")
                continue
            mine = label == "this tree"
            print(f"| {r['requests']:,} | {r['chunk_rows']:,} | {label} | {d['analyze_s']:.1f} "
                  f"| {d['wall_s']:.1f} | {d.get('cpu_s', nan):.1f} | {d['peak_rss_mb']:,.0f} "
                  f"| {d['spill_peak_mb']:,.0f} "
                  f"| {d['import_s']:.1f} "
                  f"| {pd_.get('analyze_s', nan) if mine else nan:.1f} "
                  f"| {r.get('pandas_over_duckdb', nan) if mine else nan:.1f}x "
                  f"| {r.get('same_itl_p99', '-') if mine else '-'} "
                  f"| {r['loadavg_before'][0]:.1f} → {r['loadavg_after'][0]:.1f} |")
    return 0


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.exit(main())
