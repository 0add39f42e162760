"""servingbench's load generator as a benchmark client: one step, records read back.

    [SB_CLIENT_ROOT=DIR] python benchmarks/loadgen_sbclient.py BASE_URL {c|rate} VALUE COUNT RUN_DIR OUT.jsonl

`--workers` mode: one worker's output-token/s ceiling against two workers', side by side in
one run, against the emulator (fixed timing, short ITL, so the client is the limit if
the emulator keeps up):

    python benchmarks/loadgen_sbclient.py --workers [--c 128] [--count 512] [--rounds 2]

It prints, per round and client, the steady step's output tokens/s (the records' own window,
contract §3 `output_tok_s`), the client-limited verdict and the worker CPU shares, and the
machine's cores: with no spare core the ratio says what this machine allows, not the ceiling.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

# SB_CLIENT_ROOT: another tree's `servingbench` package (an earlier commit's client, extracted
# by loadgen_accuracy.py --baseline through benchmarks/trees.py) measured with this same driver
sys.path.insert(0, os.environ.get("SB_CLIENT_ROOT") or str(Path(__file__).resolve().parents[1]))

from servingbench.resources.contract.schemas import read_records
from servingbench.resources.contract.timestamps import parse_ts
from servingbench.resources.loadgen import LoadConfig, run_load


def warm_up_imports() -> None:
    """Pay the one-off costs (imports, Arrow's time-zone data) before the clock starts."""
    import pyarrow as pa
    import servingbench.resources.loadgen.execute  # noqa: F401

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


def workers_ceiling(argv: list[str]) -> None:
    import argparse
    import os
    import tempfile

    import httpx
    from servingbench.emulator import process
    from servingbench.resources.analysis.analyze import analyze_run

    ap = argparse.ArgumentParser(prog="loadgen_sbclient.py --workers")
    ap.add_argument("--c", type=int, default=128, help="closed-loop concurrency")
    ap.add_argument("--count", type=int, default=512, help="requests per run")
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--timing", default="5:1", help="emulator --fixed-timing TTFT_MS:ITL_MS")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    print(json.dumps({"cores": cores, "load_1m": os.getloadavg()[0], **vars(a)}))
    warm_up_imports()
    with process.EmulatorProcess(["--fixed-timing", a.timing, "--cold-start-s", "0"]) as emu, \
            tempfile.TemporaryDirectory(prefix="sb-workers-") as tmp:
        model = httpx.get(f"{emu.base_url}/v1/models").json()["data"][0]["id"]
        results: dict[int, list[float]] = {1: [], 2: []}
        for rnd in range(a.rounds):
            for workers in (1, 2) if rnd % 2 == 0 else (2, 1):  # alternate: drift hits both
                cfg = LoadConfig(endpoint=emu.base_url, model=model, concurrency=[a.c],
                                 requests_per_step=a.count, warmup_requests=min(a.c, 32),
                                 warmup_concurrency=min(a.c, 32), input_tokens=64,
                                 output_tokens=a.output_tokens, workers=workers)
                run_dir = Path(tmp) / f"r{rnd}-w{workers}"
                wall0 = time.perf_counter()
                result = run_load(cfg, run_dir, progress=False)
                wall = time.perf_counter() - wall0
                metrics = analyze_run(run_dir, write=False).metrics.to_pylist()[0]
                results[workers].append(metrics["output_tok_s"])
                print(json.dumps({"round": rnd, "workers": workers, "wall_s": round(wall, 2),
                                  "output_tok_s": round(metrics["output_tok_s"]),
                                  "ttft_s_p50": metrics["ttft_s_p50"], "n_ok": metrics["n_ok"],
                                  "achieved_concurrency": metrics["achieved_concurrency"],
                                  "steps": result.steps}))
        best = {w: max(v) for w, v in results.items()}
        print(json.dumps({"one_worker_tok_s": round(best[1]), "two_workers_tok_s": round(best[2]),
                          "ratio": round(best[2] / best[1], 3), "cores": cores}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--workers"]:
        workers_ceiling(sys.argv[2:])
        sys.exit(0)
    b, m, v, n, d, o = sys.argv[1:7]
    main(b, m, float(v), int(n), Path(d), o)
