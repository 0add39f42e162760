"""What sampling telemetry costs the load generator: its event-loop lag and CPU with the
sampler off, at 1 s (the default) and at 0.1 s, side by side in one run.

    .venv/bin/python benchmarks/telemetry_overhead.py [--repeat 3] [--concurrency 32]
                                                      [--requests 192] [--output-tokens 64]

One emulator process (p5.48xlarge, Scout, bf16; EMULATED) serves every trial. Each trial is a
fresh `run_load` (one closed-loop step) in this process, with a `Sampler` reading the
emulator's /metrics (its vLLM gauges and modelled DCGM series: ~40 rows a tick) in a
background thread of the same process, which is where the chain runs it. The modes rotate
within each repeat (off, 1 s, 0.1 s, then shifted), so drift on a shared machine falls on
all of them. Figures: the step's loop-lag p99 and client CPU share from the load
generator's own self-watch (manifest `steps[]`), output tokens/s, and samples taken;
medians over repeats, and each mode's ratio to "off".
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from servingbench.emulator.process import EmulatorProcess  # noqa: E402
from servingbench.resources.contract.schemas import read_records  # noqa: E402
from servingbench.resources.loadgen import LoadConfig, run_load  # noqa: E402
from servingbench.resources.telemetry import Sampler, sources_from  # noqa: E402

MODES = {"off": None, "1 s": 1.0, "0.1 s": 0.1}


def trial(base: str, interval: float | None, args, run_dir: Path) -> dict:
    cfg = LoadConfig(endpoint=base, model="meta-llama/Llama-4-Scout-17B-16E-Instruct",
                     concurrency=[args.concurrency], requests_per_step=args.requests,
                     warmup_requests=0, input_tokens=256, output_tokens=args.output_tokens)
    run_dir.mkdir(parents=True)
    sampler = None
    if interval is not None:
        sampler = Sampler(run_dir, "bench", sources_from(
            [{"kind": "emulated", "url": f"{base}/metrics"}]), interval_s=interval).start()
    try:
        run_load(cfg, run_dir, progress=False)
    finally:
        ticks = 0
        if sampler is not None:
            sampler.stop()
            ticks = sampler.ticks
    step = json.loads((run_dir / "manifest.json").read_text())["steps"][0]
    reqs = read_records(run_dir, "steady_state_request_log").to_pylist()
    t0 = min(r["sent_at"].value for r in reqs)
    t1 = max(r["finished_at"].value for r in reqs)
    tokens = sum(r["output_tokens"] or 0 for r in reqs if r["status"] == "ok")
    return {"lag_p99_ms": step["loop_lag_p99_s"] * 1e3, "cpu": step["client_cpu_share"],
            "tok_s": tokens / ((t1 - t0) / 1e9), "ticks": ticks}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--requests", type=int, default=192)
    p.add_argument("--output-tokens", type=int, default=64)
    args = p.parse_args(argv)
    results: dict[str, list[dict]] = {m: [] for m in MODES}
    names = list(MODES)
    emu_args = ["--candidate", "p5.48xlarge", "--model", "scout", "--precision", "bf16",
                "--cold-start-s", "0"]
    with EmulatorProcess(emu_args) as emu, tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):
            order = names[r % len(names):] + names[:r % len(names)]
            for mode in order:
                run_dir = Path(tmp) / f"{r}-{mode.replace(' ', '').replace('.', '')}"
                res = trial(emu.base_url, MODES[mode], args, run_dir)
                results[mode].append(res)
                print(f"repeat {r} {mode:>5}: loop lag p99 {res['lag_p99_ms']:.2f} ms, "
                      f"client CPU {res['cpu']:.2f}, {res['tok_s']:,.0f} tok/s, "
                      f"{res['ticks']} samples", flush=True)
    med = {m: {k: statistics.median(x[k] for x in v) for k in v[0]} for m, v in results.items()}
    base = med["off"]
    print("\n| sampling | loop lag p99 ms | × off | client CPU share | × off | output tok/s | × off | samples |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for m, v in med.items():
        print(f"| {m} | {v['lag_p99_ms']:.2f} | {v['lag_p99_ms'] / base['lag_p99_ms']:.2f} | "
              f"{v['cpu']:.3f} | {v['cpu'] / base['cpu']:.2f} | {v['tok_s']:,.0f} | "
              f"{v['tok_s'] / base['tok_s']:.2f} | {v['ticks']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
