"""What a small `servingbench analyze` costs in a fresh process, and where its imports go.

One synthetic run folder (`tests/support/runbuilder.py` `synthetic_run`, default 10,000
requests × 128 one-token chunks in one closed-loop step c=64) is analysed by
`python -m servingbench.pipelines.cli analyze RUN`, each time in a new process: `--repeat` times plainly
(wall time, peak RSS) and once under `python -X importtime` (the import breakdown, grouped
by top-level package; self times, so the groups add up). With `--baseline REF`, the tree at
REF (its folders extracted with `git archive`, imported before this checkout:
benchmarks/trees.py) is run the same way,
alternating with this one, so the ratio comes from one run on one machine.

    .venv/bin/python benchmarks/analyze_startup.py [--requests 10000] [--repeat 3] [--baseline main]

Writes benchmarks/out/analyze_startup.json and prints markdown tables for docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(ROOT)]

from trees import THIS, Tree, extract  # noqa: E402

from tests.support.runbuilder import synthetic_run  # noqa: E402

_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)")
# the packages worth a row of their own; everything else is summed as "other"
NAMED = ("great_expectations", "pandas", "numpy", "pyarrow", "duckdb", "dagster", "matplotlib",
         "scipy", "pydantic", "sqlalchemy", "jsonschema", "marshmallow", "ruamel", "requests",
         "urllib3", "boto3", "botocore", "yaml", "jinja2", "tzdata", "dateutil", "pytz",
         "resources", "pipelines", "altair", "IPython", "tqdm", "packaging", "typing_extensions")


def run_once(tree: Tree, run_dir: Path, importtime: bool) -> dict:
    cmd = [sys.executable, *(["-X", "importtime"] if importtime else []),
           "-m", tree.module("pipelines.cli"), "analyze", str(run_dir)]
    env = {**os.environ, "PYTHONPATH": tree.pythonpath}
    t0 = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "%M %U %S", *cmd], cwd=tree.path, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"analyze exited {proc.returncode}: {proc.stderr[-2000:]}")
    lines = proc.stderr.strip().splitlines()
    rss_kb, user, system = lines[-1].split()
    # CPU seconds (all threads): on a shared machine the wall time says how busy it was
    out = {"wall_s": wall, "cpu_s": float(user) + float(system), "peak_rss_mb": int(rss_kb) / 1024}
    if importtime:
        groups: dict[str, float] = {}
        total = 0.0
        for line in lines:
            m = _LINE.match(line)
            if not m:
                continue
            top = m.group(4).split(".")[0]
            key = top if top in NAMED else "other"
            groups[key] = groups.get(key, 0.0) + int(m.group(1)) / 1e6
            total += int(m.group(1)) / 1e6
        out["imports_s"] = total
        out["by_package"] = dict(sorted(groups.items(), key=lambda kv: -kv[1]))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=10_000)
    p.add_argument("--chunks", type=int, default=128)
    p.add_argument("--repeat", type=int, default=3, help="plain runs per tree (medians)")
    p.add_argument("--baseline", help="a git ref to run beside this tree, alternating")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sb-startup-"))
    try:
        run_dir = synthetic_run(work / "run", args.requests, chunks=args.chunks, steps=(64,))
        trees = {"this tree": THIS}
        if args.baseline:
            trees[f"at {args.baseline}"] = extract(args.baseline, work / "baseline")
        # one warm-up each: the first process after a build reads the files from disk
        for tree in trees.values():
            run_once(tree, run_dir, importtime=False)
        plain: dict[str, list[dict]] = {name: [] for name in trees}
        for i in range(args.repeat):
            order = list(trees.items()) if i % 2 == 0 else list(reversed(trees.items()))
            for name, tree in order:
                plain[name].append(run_once(tree, run_dir, importtime=False))
        timed = {name: run_once(tree, run_dir, importtime=True) for name, tree in trees.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()
    result = {"requests": args.requests, "chunks": args.chunks, "loadavg_after": load,
              "plain": plain, "importtime": timed}
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "analyze_startup.json").write_text(json.dumps(result, indent=2))
    print(f"{args.requests:,} requests x {args.chunks} chunks; load average after: "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n")
    print(f"| tree | wall s (median of {args.repeat}; runs) | CPU s (median) | peak RSS MB "
          "| imports s (-X importtime) |")
    print("|---|---:|---:|---:|---:|")
    for name in trees:
        walls = [r["wall_s"] for r in plain[name]]
        cpu = statistics.median(r["cpu_s"] for r in plain[name])
        rss = statistics.median(r["peak_rss_mb"] for r in plain[name])
        print(f"| {name} | {statistics.median(walls):.2f} ({', '.join(f'{w:.2f}' for w in walls)}) "
              f"| {cpu:.2f} | {rss:,.0f} | {timed[name]['imports_s']:.2f} |")
    print("\n| package | " + " | ".join(f"{n} import s" for n in trees) + " |")
    print("|---|" + "---:|" * len(trees))
    keys = list(dict.fromkeys(k for n in trees for k in timed[n]["by_package"]))
    for k in keys:
        cells = [timed[n]["by_package"].get(k) for n in trees]
        print(f"| {k} | " + " | ".join("-" if c is None else f"{c:.2f}" for c in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
