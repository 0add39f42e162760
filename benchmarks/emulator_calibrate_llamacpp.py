"""Fit the emulator's "host CPU + tiny model" spec to llama.cpp on this host, then check it.

Two steps, one command each (`benchmarks/emulator_calibrate.py llamacpp-…` runs them too):

    .venv/bin/python benchmarks/emulator_calibrate_llamacpp.py measure --json M.json
    .venv/bin/python benchmarks/emulator_calibrate_llamacpp.py check --json M.json \
        [--spec llamacpp-gemma3-270m-q4-this-host]

`fit --json M.json` refits from saved measurements. `measure` starts the real engine once (LlamaCppModelServer: llama.cpp's server, Gemma 3
270M Q4_K_M, `make engine`), drives it with servingbench's load generator over the GRID
below (closed loop; each point its own run folder), records TTFT / ITL / throughput per
point and the host's load average around each point, fits the model on the c=1 points and
prints the fitted figures as a specs.yaml block. `check` drives the emulator with the named
fitted spec (`--spec`, real time, `--no-usage` and `--no-prefix-cache` like llama-cpp-python's
server) under the same load points
and prints emulated beside measured, with the relative error per metric.

The fit (batch 1 only: llama-cpp-python's server runs one request at a time, so the
emulator's `max_num_seqs` is 1 and c>1 queues, as there):

  ITL  = d                      decode step (memory-bound term: weights bytes / d)
  TTFT = t0 + F(n) / R          least squares over the c=1 points, F(n) = the model's
                                prompt FLOPs (2 × params × n + attention over n tokens)
       → effective FLOP/s = R, request overhead = t0, step overhead = 0

The c=2 and c=4 points are not used by the fit: they test the queueing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (concurrency, input tokens, output tokens, requests); c=1 points fit, the others check
GRID = [(1, 32, 32, 6), (1, 128, 32, 6), (1, 384, 16, 6), (2, 64, 16, 8), (4, 64, 16, 8)]
METRICS = ("ttft_s_p50", "ttft_s_p99", "itl_s_p50", "itl_s_p99", "output_tok_s")
SPEC = "llamacpp-gemma3-270m-q4-this-host"


def _label(c: int, i: int, o: int) -> str:
    return f"c{c}-in{i}-out{o}"


def _drive(endpoint: str, model: str, root: Path, grid) -> list[dict]:
    from servingbench.resources.analysis.analyze import analyze_run
    from servingbench.resources.loadgen import LoadConfig, run_load

    points = []
    for c, i, o, n in grid:
        run_dir = root / _label(c, i, o)
        load_before = os.getloadavg()
        t0 = time.monotonic()
        cfg = LoadConfig(endpoint=endpoint, model=model, concurrency=[c], requests_per_step=n,
                         warmup_requests=1, warmup_concurrency=1, input_tokens=i,
                         output_tokens=o, run_id=f"calib-{_label(c, i, o)}-{int(time.time())}",
                         # at c=4 the last request queues behind three others (~30 s here):
                         # the default 30 s drain would cut it
                         drain_timeout_s=180)
        run_load(cfg, run_dir, progress=False)
        row = analyze_run(run_dir).metrics.to_pylist()[0]
        point = {"concurrency": c, "input_tokens": i, "output_tokens": o, "requests": n,
                 "n_ok": row["n_ok"], "valid": row["valid"], "wall_s": time.monotonic() - t0,
                 "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
                 **{m: row[m] for m in METRICS}}
        points.append(point)
        print(f"{_label(c, i, o):>16}: " + "  ".join(f"{m} {point[m]:.4f}" for m in METRICS)
              + f"  load {point['loadavg_after'][0]:.1f}", flush=True)
    return points


def fit(points: list[dict], cfg) -> dict:
    """The fitted figures from the c=1 points, in the emulator's own terms: the prompt's
    FLOPs are the model's (2 × the linear layers' params per prompt token, the LM head for
    the one row that samples, and the attention term), so the line is TTFT = request
    overhead + FLOPs / effective FLOP/s."""
    from servingbench.emulator.perf import PerfModel

    m = PerfModel(cfg)
    ones = [p for p in points if p["concurrency"] == 1]
    d = statistics.median(p["itl_s_p50"] for p in ones)
    xs = [2 * m.dense_params * p["input_tokens"] + 2 * m.head_params
          + m.prefill_pairs(0, p["input_tokens"]) * m.pair_flops_prefill for p in ones]
    ys = [p["ttft_s_p50"] for p in ones]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    t0 = my - slope * mx
    return {"decode_step_s": d, "s_per_prefill_flop": slope, "ttft_intercept_s": t0,
            "effective_gbps": cfg.weights_bytes / d / 1e9, "effective_tflops": 1 / slope / 1e12,
            "request_overhead_ms": max(t0, 0.0) * 1e3,
            "ttft_fit_residuals_s": {p["input_tokens"]: y - (t0 + slope * x)
                                     for p, x, y in zip(ones, xs, ys, strict=True)}}


def _fit_report(points: list[dict]) -> dict:
    from servingbench.emulator import specs

    fitted = fit(points, specs.config("local.host-this-host", "gemma3-270m", "q4_k_m"))
    print(json.dumps(fitted, indent=1))
    print(f"\nspecs.yaml: accelerators.cpu-this-host.hbm_gbps {fitted['effective_gbps']:.4f}, "
          f"bf16_tflops {fitted['effective_tflops']:.6f}; fitted.{SPEC}.efficiency."
          f"request_overhead_ms {fitted['request_overhead_ms']:.1f}")
    return fitted


def measure(args) -> int:
    from servingbench.pipelines.catalog import load_candidates
    from servingbench.pipelines.config import REAL_FILE
    from servingbench.resources.model_server.local.llamacpp import (
        LlamaCppModelServer,
        engine_available,
    )

    why = engine_available()
    if why:
        print(f"emulator_calibrate_llamacpp: {why}", file=sys.stderr)
        return 2
    cand = {c.name: c for c in load_candidates(REAL_FILE)}["local-gemma3-270m-q4"]
    cand = replace(cand, llamacpp=replace(cand.llamacpp, threads=args.threads))
    grid = [g for g in GRID if not args.only or _label(*g[:3]) in args.only]
    root = Path(tempfile.mkdtemp(prefix="sb-calib-real-"))
    (root / "deploy").mkdir()
    with LlamaCppModelServer().deploy(cand, None, root / "deploy") as dep:
        phases = {k: v for k, v in dep.phases.items()}
        points = _drive(dep.endpoint, dep.served_model, root, grid)
    if args.only and args.json.is_file():  # remeasured points replace theirs, in grid order
        new = {_label(p["concurrency"], p["input_tokens"], p["output_tokens"]): p for p in points}
        old = json.loads(args.json.read_text())
        points = [new.get(_label(p["concurrency"], p["input_tokens"], p["output_tokens"]), p)
                  for p in old["points"]]
        phases = old["phases"]
    out = {"engine": "llama.cpp (llama-cpp-python 0.3.36)", "model": "gemma-3-270m-q4_k_m.gguf",
           "threads": args.threads, "host": os.uname().nodename, "cores": os.cpu_count(),
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "run_root": str(root), "phases": phases, "points": points}
    args.json.write_text(json.dumps(out, indent=1, default=str))
    _fit_report(points)
    return 0


def check(args) -> int:
    from servingbench.emulator.process import EmulatorProcess

    meas = json.loads(args.json.read_text())
    grid = [(p["concurrency"], p["input_tokens"], p["output_tokens"], p["requests"])
            for p in meas["points"]]
    root = Path(tempfile.mkdtemp(prefix="sb-calib-emu-"))
    # --no-prefix-cache: llama-cpp-python's server keeps no prefix cache across requests
    # (only the last prompt's KV), while the emulator's would serve the c=4 point's prompts
    # from the c=2 point's (same seed, same lengths) and cut their prefill.
    with EmulatorProcess(["--spec", args.spec, "--time-scale", "1", "--cold-start-s", "0",
                          "--no-usage", "--no-prefix-cache", "--seed", "0"]) as emu:
        status = emu.status()
        points = _drive(emu.base_url, status["config"]["served_model_name"], root, grid)
    rows = ["| load point | metric | llama.cpp (measured) | emulator (fitted spec) | error |",
            "|---|---|---:|---:|---:|"]
    errors: dict[str, list[float]] = {m: [] for m in METRICS}
    for real, emu_p in zip(meas["points"], points, strict=True):
        label = _label(real["concurrency"], real["input_tokens"], real["output_tokens"])
        for m in METRICS:
            r, e = real[m], emu_p[m]
            err = (e - r) / r if r else float("nan")
            errors[m].append(abs(err))
            rows.append(f"| {label} | {m} | {r:.3f} | {e:.3f} | {err:+.0%} |")
    print("\n".join(rows))
    print("\nmean |error| per metric: " + ", ".join(
        f"{m} {statistics.fmean(v):.0%}" for m, v in errors.items()))
    if args.out:
        args.out.write_text(json.dumps({"spec": args.spec, "measured": meas["points"],
                                        "emulated": points}, indent=1, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="llama.cpp over the grid, then fit")
    m.add_argument("--json", type=Path, required=True, help="where the measurements go")
    m.add_argument("--threads", type=int, default=1)
    m.add_argument("--only", action="append", default=[], metavar="LABEL",
                   help="remeasure only this point (e.g. c4-in64-out16) and merge it into --json")
    f = sub.add_parser("fit", help="refit from the measurements of `measure`")
    f.add_argument("--json", type=Path, required=True)
    c = sub.add_parser("check", help="the emulator with the fitted spec over the same grid")
    c.add_argument("--json", type=Path, required=True, help="the measurements of `measure`")
    c.add_argument("--spec", default=SPEC)
    c.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.cmd != "measure" and not args.json.is_file():
        print(f"emulator_calibrate_llamacpp: --json {args.json}: no such file (run measure first)",
              file=sys.stderr)
        return 2
    if args.cmd == "fit":
        _fit_report(json.loads(args.json.read_text())["points"])
        return 0
    return measure(args) if args.cmd == "measure" else check(args)


if __name__ == "__main__":
    sys.exit(main())
