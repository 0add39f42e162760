"""Calibration check of the emulator's physics on one GPU (meant for the lent H200).

Times ONE Llama-4-Scout-shaped decoder layer with random bf16 weights (GQA attention
with a KV cache, the shared expert, top-1 routing over 16 routed experts) at decode
batch sizes 1–256 and prefills of 512–8k tokens, and prints it beside what the
emulator's model predicts for one layer on the same accelerator (TP=1). No model
weights are needed. Without PyTorch/CUDA, `--predict-only` prints the predictions.

Run on the device:  python benchmarks/emulator_calibrate.py --json $OUT/calib.json

On a CPU host, against the real local engine instead (llama.cpp + Gemma 3 270M, `make
engine`): `python benchmarks/emulator_calibrate.py llamacpp measure|fit|check …` runs
benchmarks/emulator_calibrate_llamacpp.py, which fits and checks the emulator's fitted spec
`llamacpp-gemma3-270m-q4-this-host` (docs/emulator.md, "Calibration").
Per-layer prediction = (whole-model step − step overhead) / layers, TP=1, so the
embedding/LM-head share (~2 % of Scout) is spread over the layers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from servingbench.emulator import specs
from servingbench.emulator.perf import PerfModel

BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
PREFILLS = [512, 1024, 2048, 4096, 8192]
CONTEXT = 1024  # KV tokens per sequence during the decode measurements


def predict(candidate: str = "p5en.48xlarge") -> dict:
    m = PerfModel(specs.config(candidate, "scout", "bf16", tp=1))
    layers = m.cfg.model.layers
    dec = {b: (m.decode_step(b, CONTEXT) - m.overhead_s) / layers for b in BATCHES}
    pre = {n: (m.prefill_time(n, budget=n) - m.overhead_s) / layers for n in PREFILLS}
    return {"decode_s": dec, "prefill_s": pre}


def measure(iters: int = 20) -> dict:  # pragma: no cover - needs a GPU
    import torch
    import torch.nn.functional as F  # noqa: N812

    dev, dt = "cuda", torch.bfloat16
    m = specs.model("scout")
    h, nh, nkv, hd, inter, e = m.hidden_size, m.attention_heads, m.kv_heads, m.head_dim, 8192, m.routed_experts
    torch.manual_seed(0)

    def w(*shape):
        return torch.randn(*shape, device=dev, dtype=dt) * 0.02

    wq, wk, wv, wo = w(h, nh * hd), w(h, nkv * hd), w(h, nkv * hd), w(nh * hd, h)
    sg, su, sd = w(h, inter), w(h, inter), w(inter, h)  # shared expert (SwiGLU)
    router = w(h, e)
    eg, eu, ed = w(e, h, inter), w(e, h, inter), w(e, inter, h)  # routed experts

    def moe(x):
        out = (F.silu(x @ sg) * (x @ su)) @ sd
        idx = (x @ router).argmax(-1)
        for j in torch.unique(idx).tolist():
            sel = (idx == j).nonzero().squeeze(-1)
            xs = x[sel]
            out[sel] += (F.silu(xs @ eg[j]) * (xs @ eu[j])) @ ed[j]
        return out

    def decode_layer(x, kc, vc):
        b = x.shape[0]
        q = (x @ wq).view(b, nh, 1, hd)
        kc[:, :, -1] = (x @ wk).view(b, nkv, hd)
        vc[:, :, -1] = (x @ wv).view(b, nkv, hd)
        a = F.scaled_dot_product_attention(q, kc, vc, enable_gqa=True)
        x = x + a.reshape(b, nh * hd) @ wo
        return x + moe(x)

    def prefill_layer(x):
        n = x.shape[0]
        q = (x @ wq).view(n, nh, hd).transpose(0, 1)[None]
        k = (x @ wk).view(n, nkv, hd).transpose(0, 1)[None]
        v = (x @ wv).view(n, nkv, hd).transpose(0, 1)[None]
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + a[0].transpose(0, 1).reshape(n, nh * hd) @ wo
        return x + moe(x)

    def timed(fn) -> float:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            s, t = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            t.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(t) / 1e3)
        return statistics.median(times)

    out: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                 "decode_s": {}, "prefill_s": {}}
    with torch.inference_mode():
        for b in BATCHES:
            x = w(b, h) * 50
            kc = w(b, nkv, CONTEXT, hd)
            vc = w(b, nkv, CONTEXT, hd)
            out["decode_s"][b] = timed(lambda x=x, kc=kc, vc=vc: decode_layer(x, kc, vc))
        for n in PREFILLS:
            x = w(n, h) * 50
            out["prefill_s"][n] = timed(lambda x=x: prefill_layer(x))
    return out


def main() -> None:
    if sys.argv[1:2] == ["llamacpp"]:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from emulator_calibrate_llamacpp import main as llamacpp_main
        sys.exit(llamacpp_main(sys.argv[2:]))
    p = argparse.ArgumentParser()
    p.add_argument("--predict-only", action="store_true")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    pred = predict()
    meas = None if a.predict_only else measure()
    rows = ["| shape | predicted ms/layer | measured ms/layer | measured / predicted |",
            "|---|---:|---:|---:|"]
    for kind, keys in (("decode_s", BATCHES), ("prefill_s", PREFILLS)):
        for k in keys:
            pr = pred[kind][k] * 1e3
            me = meas[kind][k] * 1e3 if meas else float("nan")
            label = f"decode b={k} ctx={CONTEXT}" if kind == "decode_s" else f"prefill {k} tokens"
            rows.append(f"| {label} | {pr:.3f} | {me:.3f} | {me / pr:.2f} |")
    print("\n".join(rows))
    if a.json:
        a.json.write_text(json.dumps({"predicted": pred, "measured": meas}, indent=1))


if __name__ == "__main__":
    main()
