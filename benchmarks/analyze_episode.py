"""How `analyze` copes with an episode (contract §3.7): a day's load curve compressed into an
hour, 1M requests against autoscaled replicas (events.parquet, the log's `replica`, a bill of
the node timeline), analysed end to end (gates, metrics, cost, episode.parquet,
scale_events.parquet, episode.json) in a fresh process, with its peak RSS. The goal: under
60 s and 8 GB on the 2-core machine.

    .venv/bin/python benchmarks/analyze_episode.py [--requests 1000000] [--chunks 16]
        [--length-s 3600] [--bucket-s 10] [--tmp DIR]

Writes benchmarks/out/analyze_episode.json and prints a markdown row for docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from analyze_scale import _du, run_child  # noqa: E402
from servingbench.resources.contract import manifest as mf  # noqa: E402

from tests.support.runbuilder import synthetic_episode  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=1_000_000)
    p.add_argument("--chunks", type=int, default=16, help="chunks (tokens) per request")
    p.add_argument("--length-s", type=float, default=3600.0,
                   help="the compressed day's length (3600: 24 h at 24x)")
    p.add_argument("--bucket-s", type=float, default=10.0)
    p.add_argument("--tmp", default=None, help="folder for the run folder (default TMPDIR)")
    p.add_argument("--no-side-by-side", dest="side_by_side", action="store_false",
                   help="skip the same folder analysed as a plain run after the episode")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sb-episode-", dir=args.tmp))
    try:
        t = time.perf_counter()
        run_dir = synthetic_episode(work / "run", args.requests, chunks=args.chunks,
                                    length_s=args.length_s, bucket_s=args.bucket_s)
        row = {"requests": args.requests, "chunks_per_request": args.chunks,
               "chunk_rows": args.requests * args.chunks, "length_s": args.length_s,
               "bucket_s": args.bucket_s, "build_s": time.perf_counter() - t,
               "run_mb": _du(run_dir) / 2**20, "loadavg_before": os.getloadavg(),
               "analyze": run_child("duckdb", run_dir)}
        row["loadavg_after"] = os.getloadavg()
        episode = json.loads((run_dir / "episode.json").read_text())
        row["episode"] = episode
        row["outputs"] = sorted(f.name for f in run_dir.iterdir()
                                if f.name in ("episode.parquet", "scale_events.parquet",
                                              "episode.json", "cost_per_1m.parquet"))
        if args.side_by_side:
            # the same records as a plain run (no episode keys, no events, one node): what
            # the episode outputs and the timeline add, measured right after on the same folder
            m = mf.load(run_dir / "manifest.json")
            for key in ("replicas", "autoscaling"):
                m.pop(key)
            m["scenario"] = {"input_tokens": 512, "output_tokens": args.chunks, "dataset": None}
            mf.dump(m, run_dir / "manifest.json")
            (run_dir / "events.parquet").unlink()
            bill = pq.read_table(run_dir / "bill.parquet")   # one node in scope throughout
            n = bill.num_rows
            bill = bill.set_column(bill.schema.get_field_index("usage_quantity"), "usage_quantity",
                                   pa.array([1.0] * n)).set_column(
                bill.schema.get_field_index("amount"), "amount", pa.array([55.04] * n))
            pq.write_table(bill, run_dir / "bill.parquet")
            (run_dir / "episode.json").unlink()
            row["plain"] = run_child("duckdb", run_dir)
            row["plain_has_episode"] = (run_dir / "episode.json").exists()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "analyze_episode.json").write_text(json.dumps(row, indent=2, default=str))
    a = row["analyze"]
    if "error" in a:
        print(f"analysis failed: {a['error']}")
        return 1
    print("| requests | chunk rows | buckets | scale events | analysed as | analyze s | wall s "
          "| CPU s | peak RSS MB | DuckDB scratch peak MB | load avg before → after |")
    print("|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|")
    for label, d in (("episode", a), ("plain run", row.get("plain"))):
        if d is None or "error" in d:
            continue
        rss = max(d["peak_rss_mb"], d.get("time_v_max_rss_mb", 0))
        print(f"| {row['requests']:,} | {row['chunk_rows']:,} "
              f"| {int(-(-args.length_s // args.bucket_s)):,} "
              f"| {episode['scale_ups']} up, {episode['scale_downs']} down | {label} "
              f"| {d['analyze_s']:.1f} | {d['wall_s']:.1f} | {d.get('cpu_s', float('nan')):.1f} "
              f"| {rss:,.0f} | {d['spill_peak_mb']:,.0f} "
              f"| {row['loadavg_before'][0]:.1f} → {row['loadavg_after'][0]:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
