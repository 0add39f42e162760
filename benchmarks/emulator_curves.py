"""Modelled (EMULATED, uncalibrated) curves of the five candidates: a markdown table and a PNG.

Closed loop in virtual time with the emulator's own scheduler and performance model,
input 512 / output 128 tokens (the seeds' first test proposal).
Run:  .venv/bin/python benchmarks/emulator_curves.py --png docs/emulator_curves.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

from servingbench.emulator import specs
from servingbench.emulator.fit import fit_of
from servingbench.emulator.perf import PerfModel
from servingbench.emulator.scheduler import simulate

CANDIDATES = ["p5.48xlarge", "p4d.24xlarge", "g6e.48xlarge", "trn2.48xlarge", "inf2.48xlarge"]
CONCURRENCY = [1, 4, 8, 16, 32, 64, 128, 256]
PROMPTS = [128, 512, 2048, 8192, 32768]


def curves(model: str = "scout", precision: str = "bf16", prompt: int = 512, output: int = 128):
    out = {}
    for cand in CANDIDATES:
        cfg = specs.config(cand, model, precision)
        fit = fit_of(cfg)
        if not fit.fits:
            out[cand] = None
            continue
        m = PerfModel(cfg)
        kv = m.kv_capacity_tokens(fit.kv_capacity_gb)
        rows = [simulate(m, c, prompt, output, kv_tokens=kv) for c in CONCURRENCY]
        ttft = [m.prefill_time(p) for p in PROMPTS]
        out[cand] = (rows, ttft)
    return out


def table(data, model: str, precision: str) -> str:
    lines = [f"EMULATED (uncalibrated model) — Llama 4 {model} {precision}, input 512 / output 128, "
             "closed loop", "",
             "| candidate | concurrency | output tok/s (aggregate) | mean TTFT ms | mean ITL ms |",
             "|---|---:|---:|---:|---:|"]
    for cand, d in data.items():
        if d is None:
            lines.append(f"| {cand} | — | does not fit | | |")
            continue
        for r in d[0]:
            lines.append(f"| {cand} | {r.concurrency} | {r.throughput_tok_s:,.0f} | "
                         f"{r.ttft_s * 1e3:,.1f} | {r.itl_s * 1e3:.1f} |")
    lines += ["", "| candidate | " + " | ".join(f"TTFT ms @ {p} in" for p in PROMPTS) + " |",
              "|---|" + "---:|" * len(PROMPTS)]
    for cand, d in data.items():
        if d is not None:
            lines.append(f"| {cand} | " + " | ".join(f"{t * 1e3:,.1f}" for t in d[1]) + " |")
    return "\n".join(lines)


def plot(data, path: Path, model: str, precision: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    for cand, d in data.items():
        if d is None:
            continue
        rows, ttft = d
        axes[0].plot(CONCURRENCY, [r.throughput_tok_s for r in rows], marker="o", label=cand)
        axes[1].plot(CONCURRENCY, [r.itl_s * 1e3 for r in rows], marker="o", label=cand)
        axes[2].plot(PROMPTS, [t * 1e3 for t in ttft], marker="o", label=cand)
    axes[0].set(xscale="log", xlabel="concurrency (closed loop)", ylabel="output tokens/s",
                title="aggregate throughput")
    axes[1].set(xscale="log", xlabel="concurrency (closed loop)", ylabel="ms", title="mean ITL")
    axes[2].set(xscale="log", yscale="log", xlabel="prompt tokens", ylabel="ms",
                title="TTFT of a lone request")
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"EMULATED — modelled, UNCALIBRATED, not measured: Llama 4 {model} {precision}, "
                 "input 512 / output 128", color="darkred", fontsize=13, fontweight="bold")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="scout")
    p.add_argument("--precision", default="bf16")
    p.add_argument("--png", type=Path, default=None)
    a = p.parse_args()
    data = curves(a.model, a.precision)
    print(table(data, a.model, a.precision))
    if a.png:
        plot(data, a.png, a.model, a.precision)


if __name__ == "__main__":
    main()
