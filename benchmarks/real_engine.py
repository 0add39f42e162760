"""servingbench's load generator against the real local engine (llama.cpp's server, Gemma 3
270M Q4_K_M, `make engine`): closed-loop steps, TTFT / ITL / throughput per step, plus the
server reconciliation and the cold start.

    .venv/bin/python benchmarks/real_engine.py [--concurrency 1,2,4] [--requests 8]
        [--output-tokens 16] [--threads 1] [--out DIR]

llama-cpp-python's server serves one request at a time, so above c=1 the extra requests
queue: throughput stays flat and TTFT grows with the queue. That is the engine, measured.
With `--aiperf PYTHON` (AIPerf 0.13.0's interpreter in its own virtualenv, plus the `gguf`
package there; see benchmarks/loadgen_aiperf.py) each concurrency runs twice on the same
server, once with servingbench's load generator and once with AIPerf, same prompt and output
lengths and request count, the order alternating from step to step, and the two are printed
side by side (docs/performance.md). AIPerf is given the model's own tokenizer, rebuilt
offline from the GGUF file, so both ask for the same prompt lengths in the model's tokens.
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
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv: list[str] | None = None) -> int:
    from servingbench.pipelines.catalog import load_candidates
    from servingbench.pipelines.config import REAL_FILE
    from servingbench.resources.analysis.analyze import analyze_run
    from servingbench.resources.analysis.reconcile import reconcile
    from servingbench.resources.loadgen import LoadConfig, run_load
    from servingbench.resources.model_server.local.llamacpp import (
        LlamaCppModelServer,
        engine_available,
    )

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", default="1,2,4")
    p.add_argument("--requests", type=int, default=8, help="requests per step")
    p.add_argument("--input-tokens", type=int, default=64)
    p.add_argument("--output-tokens", type=int, default=16)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--candidate", default="local-gemma3-270m-q4")
    p.add_argument("--out", type=Path, default=None, help="run folder (default: a temp dir)")
    p.add_argument("--aiperf", default=None, metavar="PYTHON",
                   help="AIPerf's interpreter (its own virtualenv): run it beside servingbench")
    p.add_argument("--keep-serving", action="store_true",
                   help="print the endpoint and wait for Enter before stopping the server")
    args = p.parse_args(argv)
    why = engine_available()
    if why:
        print(f"real_engine: {why}", file=sys.stderr)
        return 2
    cand = {c.name: c for c in load_candidates(REAL_FILE)}[args.candidate]
    cand = replace(cand, llamacpp=replace(cand.llamacpp, threads=args.threads))
    if args.aiperf and not Path(args.aiperf).is_file():
        print(f"real_engine: --aiperf {args.aiperf}: no such interpreter", file=sys.stderr)
        return 2
    run_dir = args.out or Path(tempfile.mkdtemp(prefix="sb-real-engine-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    if args.aiperf:
        return side_by_side(args, cand, run_dir)
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


def side_by_side(args, cand, root: Path) -> int:
    import os

    from loadgen_aiperf import make_gguf_tokenizer, run_aiperf_closed
    from servingbench.resources.analysis.analyze import analyze_run
    from servingbench.resources.loadgen import LoadConfig, run_load
    from servingbench.resources.model_server.local.llamacpp import (
        LlamaCppModelServer,
        model_file_for,
    )

    tokenizer = make_gguf_tokenizer(args.aiperf, model_file_for(cand), root / "aiperf-tokenizer")
    (root / "deploy").mkdir(exist_ok=True)
    rows = []
    with LlamaCppModelServer().deploy(cand, None, root / "deploy") as dep:
        for k, c in enumerate(int(x) for x in args.concurrency.split(",")):
            def sb(c=c):
                run_dir = root / f"servingbench-c{c}"
                cfg = LoadConfig(endpoint=dep.endpoint, model=dep.served_model, concurrency=[c],
                                 requests_per_step=args.requests, warmup_requests=1,
                                 warmup_concurrency=1, input_tokens=args.input_tokens,
                                 output_tokens=args.output_tokens, drain_timeout_s=180,
                                 run_id=f"real-sb-c{c}-{int(time.time())}")
                run_load(cfg, run_dir, progress=False)
                return analyze_run(run_dir).metrics.to_pylist()[0]

            def ai(c=c):
                return run_aiperf_closed(args.aiperf, dep.endpoint.removesuffix("/v1"),
                                         dep.served_model, tokenizer, c, args.requests,
                                         args.input_tokens, args.output_tokens, root / f"aiperf-c{c}")
            order = [("servingbench", sb), ("AIPerf 0.13.0", ai)]
            for tool, fn in (order if k % 2 == 0 else order[::-1]):
                before = os.getloadavg()[0]
                row = fn()
                rows.append({"tool": tool, "c": c, "load": (before, os.getloadavg()[0]), **row})
                print(f"{tool} c={c} done (load {before:.1f} → {os.getloadavg()[0]:.1f})", flush=True)
    print(f"\nllama.cpp {cand.precision}, {args.threads} thread(s), {args.input_tokens} in / "
          f"{args.output_tokens} out tokens, {args.requests} requests per step — MEASURED ({root})")
    print("| tool | c | ok | out tok/s | TTFT p50 s | TTFT p99 s | ITL p50 s | ITL p99 s | "
          "load avg (1 min) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in sorted(rows, key=lambda r: (r["c"], r["tool"] != "servingbench")):
        print(f"| {r['tool']} | {r['c']} | {r['n_ok']} | {r['output_tok_s'] or 0:.2f} | "
              f"{r['ttft_s_p50'] or 0:.3f} | {r['ttft_s_p99'] or 0:.3f} | {r['itl_s_p50'] or 0:.3f} | "
              f"{r['itl_s_p99'] or 0:.3f} | {r['load'][0]:.1f} → {r['load'][1]:.1f} |")
    for r in rows:
        if "aiperf" in r:
            a = r["aiperf"]
            print(f"AIPerf's own c={r['c']}: TTFT p50/p99 {a['time_to_first_token']['p50']}/"
                  f"{a['time_to_first_token']['p99']} s, ITL (per request) p50/p99 "
                  f"{a['inter_token_latency']['p50']}/{a['inter_token_latency']['p99']} s, "
                  f"output tok/s {a['output_token_throughput']['avg']}")
    (root / "side_by_side.json").write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
