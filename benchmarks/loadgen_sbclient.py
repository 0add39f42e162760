"""servingbench's load generator as a benchmark client: one step, records read back.

    [SB_CLIENT_ROOT=DIR] python benchmarks/loadgen_sbclient.py BASE_URL {c|rate} VALUE COUNT RUN_DIR OUT.jsonl
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

# SB_CLIENT_ROOT: another tree's `resources/` (e.g. an earlier commit's client, extracted by
# loadgen_accuracy.py --baseline) measured with this same driver
sys.path.insert(0, os.environ.get("SB_CLIENT_ROOT") or str(Path(__file__).resolve().parents[1]))

from resources.contract.schemas import read_records
from resources.contract.timestamps import parse_ts
from resources.loadgen import LoadConfig, run_load


def warm_up_imports() -> None:
    """Pay the one-off costs (imports, Arrow's time-zone data) before the clock starts."""
    import pyarrow as pa

    import resources.loadgen.runner  # noqa: F401

    pa.array([0], pa.timestamp("ns", tz="UTC"))


def main(base: str, mode: str, value: float, count: int, run_dir: Path, out: str) -> None:
    steps = {"concurrency": [int(value)], "rates": []} if mode == "c" else {"concurrency": [], "rates": [value]}
    cfg = LoadConfig(endpoint=base, model="fixed", requests_per_step=count, warmup_requests=0,
                     input_tokens=512, output_tokens=128, **steps)
    warm_up_imports()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = run_load(cfg, run_dir, progress=False)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    reqs = read_records(run_dir, "steady_state_request_log").to_pylist()
    chunks: dict[str, list] = {}
    for c in sorted(read_records(run_dir, "chunk_log").to_pylist(), key=lambda c: c["seq"]):
        chunks.setdefault(c["request_id"], []).append((c["at"].value, c["tokens"]))
    with open(out, "w") as f:
        for r in reqs:
            f.write(json.dumps({"request_id": r["request_id"], "scheduled": r["scheduled_at"].value,
                                "sent": r["sent_at"].value, "finished": r["finished_at"].value,
                                "chunks": chunks.get(r["request_id"], []), "ok": r["status"] == "ok"}) + "\n")
    m = json.loads((run_dir / "manifest.json").read_text())
    steady = m["phases"]["steady"]
    step_wall = (parse_ts(steady["ended_at"]) - parse_ts(steady["started_at"])) / 1e9
    step_cpu = result.steps[0]["client_cpu_share"] * step_wall  # the self-watch's own figure
    print(json.dumps({"cpu_s": cpu, "wall_s": wall, "step_cpu_s": step_cpu, "steps": result.steps}))


if __name__ == "__main__":
    b, m, v, n, d, o = sys.argv[1:7]
    main(b, m, float(v), int(n), Path(d), o)
