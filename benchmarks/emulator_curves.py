"""Modelled (EMULATED) curves of the five candidates: a markdown table and a PNG.

Closed loop in virtual time through `servingbench predict`'s path (emulator/predict.py): each
instance's default engine profile (vLLM on the GPUs, vLLM on Neuron on trn2 and inf2, with
Neuron's context encoding as its own phase), the calibrated figures of
emulator/calibration.yaml, one replica of the whole instance; input 512 / output 128 tokens
(the seeds' first test proposal). Each candidate's error band is printed beside it.
Run:  .venv/bin/python benchmarks/emulator_curves.py --png docs/emulator_curves.png
"""

from __future__ import annotations

import argparse
from collections import namedtuple
from pathlib import Path

from servingbench.emulator import fidelity, specs
from servingbench.emulator import predict as pr
from servingbench.emulator.rows import read_row

CANDIDATES = ["p5.48xlarge", "p4d.24xlarge", "g6e.48xlarge", "trn2.48xlarge", "inf2.48xlarge"]
CONCURRENCY = [1, 4, 8, 16, 32, 64, 128, 256]
PROMPTS = [128, 512, 2048, 8192, 32768]
MODELS = {"scout": "Llama-4-Scout-17B-16E", "maverick": "Llama-4-Maverick-17B-128E"}
Curve = namedtuple("Curve", "concurrency throughput_tok_s ttft_s itl_s")


def _row(cand: str, model: str, precision: str, prompt: int, output: int, c: int):
    inst = specs.instance(cand)
    return read_row({"row_id": f"{cand}-c{c}-{prompt}", "model": MODELS.get(model, model),
                     "weight_precision": precision, "instance": cand,
                     "n_accel": str(inst.count), "input_tokens": str(prompt),
                     "output_tokens": str(output), "load_kind": "concurrency",
                     "load_value": str(c), "num_requests": str(max(4 * c, 32))}, 0)


def curves(model: str = "scout", precision: str = "bf16", prompt: int = 512, output: int = 128):
    out = {}
    for cand in CANDIDATES:
        rows = []
        for c in CONCURRENCY:
            p = pr.simulate(_row(cand, model, precision, prompt, output, c))
            if p.status != "ok":
                break
            rows.append(Curve(c, p.output_tok_s, p.ttft_ms_mean / 1e3, p.itl_ms_median / 1e3))
        if len(rows) < len(CONCURRENCY):
            out[cand] = None
            continue
        lone = [pr.simulate(_row(cand, model, precision, n, 1, 1)) for n in PROMPTS]
        ttft = [q.ttft_ms_median / 1e3 if q.status == "ok" else float("nan") for q in lone]
        plan = pr.plan(_row(cand, model, precision, prompt, output, 1))
        band = fidelity.band(plan.config.instance.accelerator.name, plan.config.engine)
        out[cand] = (rows, ttft, band)
    return out


def table(data, model: str, precision: str) -> str:
    lines = [f"EMULATED (calibrated model) — Llama 4 {model} {precision}, input 512 / output 128, "
             "closed loop; each candidate's error band on output tokens/s:", ""]
    lines += [f"- {cand}: {d[2].text()}" for cand, d in data.items() if d is not None]
    lines += ["",
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
        rows, ttft = d[0], d[1]
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
    fig.suptitle(f"EMULATED — modelled, not measured (calibrated on published rows): Llama 4 {model} {precision}, "
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
