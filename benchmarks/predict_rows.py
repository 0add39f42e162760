"""How fast `servingbench predict` answers a table: N rows (the shipped published table,
cycled and varied so no two rows are alike) predicted in-process, the emulator's scheduler in
virtual time. The target: 400 rows in under 30 s on a 2-core machine.

    .venv/bin/python benchmarks/predict_rows.py [--rows 400] [--table docs/calibration/published_serving.csv]

Prints wall and CPU seconds, rows/s and the slowest rows; results in docs/performance.md.
"""

from __future__ import annotations

import argparse
import csv
import resource
import sys
import tempfile
import time
from pathlib import Path

from servingbench.emulator import predict as pr

TABLE = Path(__file__).parents[1] / "docs" / "calibration" / "published_serving.csv"


def varied_rows(table: Path, n: int) -> Path:
    """`n` rows: the table's, then its rows again with twice the prompt (new row ids)."""
    with table.open(newline="") as fh:
        reader = csv.DictReader(fh)
        rows, fields = list(reader), reader.fieldnames
    out, k = [], 0
    while len(out) < n:
        for r in rows:
            if len(out) == n:
                break
            v = dict(r)
            if k:
                v["row_id"] = f"{r['row_id']}-v{k}"
                v["input_tokens"] = str(int(float(r["input_tokens"])) * (1 + k))
            out.append(v)
        k += 1
    path = Path(tempfile.mkdtemp(prefix="sb-predict-bench-")) / "rows.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(out)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=400)
    ap.add_argument("--table", type=Path, default=TABLE)
    a = ap.parse_args(argv)
    src = varied_rows(a.table, a.rows)
    rows = pr.read_rows(src)
    t0, c0 = time.perf_counter(), time.process_time()
    timed = []
    for r in rows:
        t = time.perf_counter()
        p = pr.simulate(r)
        timed.append((time.perf_counter() - t, r.row_id, p.status))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    ok = sum(s == "ok" for _, _, s in timed)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{len(rows)} rows ({ok} ok) in {wall:.2f} s wall, {cpu:.2f} s CPU: "
          f"{len(rows) / wall:.1f} rows/s; peak RSS {peak:.0f} MiB")
    print("slowest:", ", ".join(f"{rid} {dt * 1e3:.0f} ms" for dt, rid, _ in sorted(timed)[-5:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
