"""servingbench's load generator against the real local engine (llama.cpp's server, Gemma 3
270M Q4_K_M, `make engine`): closed-loop steps, TTFT / ITL / throughput per step, plus the
server reconciliation and the cold start.

    .venv/bin/python benchmarks/real_engine.py [--concurrency 1,2,4] [--requests 8]
        [--output-tokens 16] [--threads 1] [--out DIR]

llama-cpp-python's server serves one request at a time, so above c=1 the extra requests
queue: throughput stays flat and TTFT grows with the queue. That is the engine, measured.
(The AIPerf peer of benchmarks/loadgen_aiperf.py can be pointed at the same server with
`--keep-serving`; not run by default, it needs its own virtualenv.)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    from pipelines.config import REAL_FILE, load_candidates
    from resources.analysis.analyze import analyze_run
    from resources.analysis.reconcile import reconcile
    from resources.loadgen import LoadConfig, run_load
    from resources.model_server.llamacpp import LlamaCppModelServer, engine_available

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", default="1,2,4")
    p.add_argument("--requests", type=int, default=8, help="requests per step")
    p.add_argument("--input-tokens", type=int, default=64)
    p.add_argument("--output-tokens", type=int, default=16)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--candidate", default="local-gemma3-270m-q4")
    p.add_argument("--out", type=Path, default=None, help="run folder (default: a temp dir)")
    p.add_argument("--keep-serving", action="store_true",
                   help="print the endpoint and wait for Enter before stopping the server")
    args = p.parse_args(argv)
    why = engine_available()
    if why:
        print(f"real_engine: {why}", file=sys.stderr)
        return 2
    cand = {c.name: c for c in load_candidates(REAL_FILE)}[args.candidate]
    cand = replace(cand, llamacpp=replace(cand.llamacpp, threads=args.threads))
    run_dir = args.out or Path(tempfile.mkdtemp(prefix="sb-real-engine-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with LlamaCppModelServer().deploy(cand, None, run_dir) as dep:
        print(f"deployed in {time.monotonic() - t0:.2f} s: {dep.endpoint}  phases: "
              + ", ".join(f"{k}" for k in dep.phases))
        cfg = LoadConfig(endpoint=dep.endpoint, model=dep.served_model,
                         concurrency=[int(c) for c in args.concurrency.split(",")],
                         requests_per_step=args.requests, warmup_requests=2,
                         input_tokens=args.input_tokens, output_tokens=args.output_tokens,
                         run_id=f"real-engine-{int(time.time())}")
        run_load(cfg, run_dir, progress=False)
        if args.keep_serving:
            input(f"serving on {dep.endpoint}; Enter stops it ")
    res = analyze_run(run_dir)
    print(f"\nllama.cpp {cand.precision}, {args.threads} thread(s), {args.input_tokens} in / "
          f"{args.output_tokens} out tokens — MEASURED on this host ({run_dir})")
    print(f"{'step':>6} {'ok':>4} {'out tok/s':>10} {'TTFT p50':>9} {'TTFT p99':>9} "
          f"{'ITL p50':>8} {'ITL p99':>8} {'valid':>6}")
    for r in res.metrics.to_pylist():
        print(f"{r['step']:>6} {r['n_ok']:>4} {r['output_tok_s'] or 0:>10.1f} "
              f"{r['ttft_s_p50'] or 0:>9.3f} {r['ttft_s_p99'] or 0:>9.3f} "
              f"{r['itl_s_p50'] or 0:>8.3f} {r['itl_s_p99'] or 0:>8.3f} {str(r['valid']):>6}")
    rec = reconcile(run_dir)
    if rec:
        for s in rec["steps"]:
            print(f"reconciliation {s['step']}: client {s['client_tokens']} vs server "
                  f"{s['server_tokens']} tokens, {s['client_requests']} vs "
                  f"{s['server_requests']} requests{' FLAGGED' if s['flagged'] else ''}")
    print(json.dumps({"phases": json.loads((run_dir / "manifest.json").read_text())["phases"]},
                     indent=None)[:600])
    return 0


if __name__ == "__main__":
    sys.exit(main())
