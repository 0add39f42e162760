"""The calibrated emulator against published measurements the fit never saw.

`docs/calibration/holdout_trtllm_v017.csv` holds the cells of TensorRT-LLM's v0.17
throughput table (perf-overview.md @258c754: trtllm-bench, every request queued at once) that
`published_serving.csv` does not: other shapes, TP degrees and GPUs of the models it samples,
and three models it has no row of (Llama 3.1 405B, Mistral 7B, Mixtral 8x22B). GH200 cells
are left out (no such accelerator here). Nothing in this file reaches `servingbench
calibrate`; this script predicts every row with the shipped figures (emulator/calibration.yaml)
and prints the mean absolute percentage error of output tokens/s, overall and by model,
accelerator, TP degree and shape, and the rows the emulator cannot express.

    .venv/bin/python benchmarks/emulator_holdout.py [--table docs/calibration/holdout_trtllm_v017.csv]

Results in docs/emulator.md (Fidelity).
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections import defaultdict
from pathlib import Path

from servingbench.emulator import predict as pr

TABLE = Path(__file__).parents[1] / "docs" / "calibration" / "holdout_trtllm_v017.csv"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", type=Path, default=TABLE)
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    rows = pr.read_rows(args.table)
    with args.table.open(newline="") as fh:
        published = {d["row_id"]: float(d["output_tok_s_total"]) for d in csv.DictReader(fh)}
    groups: dict[str, list[float]] = defaultdict(list)
    unsupported: dict[str, int] = defaultdict(int)
    for r in rows:
        p = pr.simulate(r)
        if p.status != "ok":
            unsupported[f"{r.model} {r.accelerator} TP{r.tp}: {p.status}"] += 1
            continue
        err = p.output_tok_s / published[r.row_id] - 1
        for key in ("all", f"model {r.model}", f"accelerator {r.accelerator}", f"TP {r.tp}",
                    f"shape {r.input_tokens}/{r.output_tokens}"):
            groups[key].append(err)
    print(f"EMULATED against {len(rows)} held-out published rows ({args.table.name}), "
          f"{time.monotonic() - t0:.1f} s")
    print(f"{'group':34s} {'rows':>5s} {'tok/s MAPE':>11s} {'mean error':>11s}")
    for key in sorted(groups, key=lambda k: (k != "all", k.split()[0], k)):
        v = groups[key]
        print(f"{key:34s} {len(v):5d} {100 * sum(abs(e) for e in v) / len(v):10.1f}% "
              f"{100 * sum(v) / len(v):+10.1f}%")
    for what, n in sorted(unsupported.items()):
        print(f"unsupported ({n} rows): {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
