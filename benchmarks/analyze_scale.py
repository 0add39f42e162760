"""How `analyze` scales: synthetic runs of 10k, 100k and 1M requests, analysed end to end
(gates included) in a fresh process each, beside a straightforward pandas implementation of
the same per-step metrics in the same run (the ratio is the figure; absolute seconds move
with the machine's load).

    .venv/bin/python benchmarks/analyze_scale.py [--sizes 10000:128,100000:128,1000000:16]

Writes benchmarks/out/analyze_scale.json and prints a markdown table for docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from tests.support.runbuilder import synthetic_run  # noqa: E402

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
mode, run_dir = sys.argv[1], sys.argv[2]
if mode == "duckdb":
    from resources.analysis import gx
    gx._context()                                  # GX's fixed import cost, reported apart
    t1 = time.perf_counter()
    from resources.analysis.analyze import analyze_run
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


def run_child(mode: str, run_dir: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(run_dir), str(HERE)],
                          capture_output=True, text=True, cwd=HERE.parent)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10000:128,100000:128,1000000:16",
                   help="requests:chunks pairs, comma separated")
    p.add_argument("--pandas-max", type=int, default=100_000,
                   help="largest request count also run through the pandas reference")
    args = p.parse_args(argv)
    results = []
    for item in args.sizes.split(","):
        n, chunks = (int(x) for x in item.split(":"))
        work = Path(tempfile.mkdtemp(prefix=f"sb-scale-{n}-"))
        try:
            t = time.perf_counter()
            synthetic_run(work / "run", n, chunks=chunks)
            build_s = time.perf_counter() - t
            row = {"requests": n, "chunks_per_request": chunks, "chunk_rows": n * chunks,
                   "build_s": build_s, "duckdb": run_child("duckdb", work / "run")}
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
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "analyze_scale.json").write_text(json.dumps(results, indent=2))
    print("| requests | chunk rows | analyze s (DuckDB + GX gates) | peak RSS MB | GX import s "
          "| pandas metrics s | pandas / DuckDB | same ITL p99 |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in results:
        d, pd_ = r["duckdb"], r.get("pandas", {})
        print(f"| {r['requests']:,} | {r['chunk_rows']:,} | {d.get('analyze_s', float('nan')):.1f} "
              f"| {d.get('peak_rss_mb', float('nan')):,.0f} | {d.get('import_s', float('nan')):.1f} "
              f"| {pd_.get('analyze_s', float('nan')):.1f} | {r.get('pandas_over_duckdb', float('nan')):.1f}x "
              f"| {r.get('same_itl_p99', '-')} |")
    return 0


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.exit(main())
