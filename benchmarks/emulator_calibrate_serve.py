"""Serving rows of our own on a lent GPU: Hugging Face transformers' continuous batching.

The engines of the published table (vLLM, SGLang, TensorRT-LLM) cannot travel to the lent
machine (each is hundreds of MB of CUDA wheels; the machine reaches no registry), and no
weights can be downloaded. What the machine does have is PyTorch and transformers, and
transformers ships a continuous-batching engine of its own (paged KV cache in 256-token
blocks, chunked prefill mixed with decodes in one token budget, CUDA graphs, FIFO admission:
`transformers/generation/continuous_batching`). So each model here is built from its
published configuration (emulator/architectures.yaml, with its source) with random bf16
weights, which cost the same time as trained ones, and driven closed-loop at fixed
concurrency with fixed prompt and output lengths (EOS disabled, so every request generates
exactly its output tokens).

Every request's raw record is kept: its submit time, and the time each generated token
reached the engine's output (perf_counter, seconds). The row's figures are derived from
those records only (`summarize`), as the table's README defines them:
  output_tok_s_total  all output tokens of the level / (last token - first submit)
  ttft_ms_median      median of first token - submit
  tpot_ms_median      median of (last token - first token) / (tokens - 1)
  req_per_s           requests / (last token - first submit)

Needs only torch, transformers and PyYAML, so it runs on the device's own Python:
  python benchmarks/emulator_calibrate_serve.py --out $OUT --deadline-s 420
Anywhere else, `--model tiny --device cpu` runs the same path on a 2-layer model (the test).

Back here, the calibration table's `measured_here` rows are derived from the kept records:
  python benchmarks/emulator_calibrate_serve.py table docs/calibration/measured_here/h200_transformers_raw.jsonl.gz \
      docs/calibration/measured_here/h200_transformers_runs.jsonl
prints them as the table's CSV rows (tests/emulator/test_measured_here.py checks that the
table holds exactly these).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import random
import statistics
import sys
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent.parent
ARCH = HERE / "emulator" / "architectures.yaml"

# The engine's settings, all explicit: the row's notes name them, and the emulator's
# profile for this engine reads the same numbers (emulator/engines.yaml, `transformers`).
BLOCK_TOKENS = 256
MAX_BATCH_TOKENS = 8192
MAX_REQUESTS_PER_BATCH = 256


def hf_config(key: str):
    """The transformers config of a model the emulator knows, from its published shapes."""
    from transformers import LlamaConfig, MixtralConfig

    tiny = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, vocab_size=512, max_position_embeddings=4096)
    if key == "tiny":
        return LlamaConfig(**tiny)
    if key == "tiny-moe":
        return MixtralConfig(num_local_experts=4, num_experts_per_tok=2, **tiny)
    a = yaml.safe_load(ARCH.read_text())[key]
    att = a["attention"]
    common = dict(hidden_size=a["hidden_size"], num_hidden_layers=a["layers"],
                  num_attention_heads=att["heads"], num_key_value_heads=att["kv_heads"],
                  head_dim=att["head_dim"], vocab_size=a["vocab_size"],
                  max_position_embeddings=min(a["max_context"], 32768),
                  tie_word_embeddings=a["tie_word_embeddings"])
    if "moe" in a:
        moe = a["moe"]
        return MixtralConfig(intermediate_size=moe["intermediate_size"],
                             num_local_experts=moe["experts"],
                             num_experts_per_tok=moe["top_k"], **common)
    return LlamaConfig(intermediate_size=a["ffn"]["intermediate_size"], rope_theta=500000.0,
                       **common)


def build(key: str, device: str):
    import torch
    from transformers import AutoModelForCausalLM

    cfg = hf_config(key)
    torch.manual_seed(0)
    t = time.perf_counter()
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.eval()
    # random weights scaled down so activations stay finite in bf16 over many layers
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    return model, time.perf_counter() - t


def run_level(manager, concurrency: int, n_requests: int, input_tokens: int,
              output_tokens: int, vocab: int, deadline: float, rng: random.Random) -> list[dict]:
    """Closed loop: `concurrency` requests in flight; a finished one is replaced at once."""
    records: dict[str, dict] = {}
    submitted = finished = 0

    def submit() -> None:
        nonlocal submitted
        ids = [rng.randrange(3, vocab) for _ in range(input_tokens)]
        rid = f"c{concurrency}-{submitted}"
        t = time.perf_counter()
        manager.add_request(ids, request_id=rid, max_new_tokens=output_tokens,
                            record_timestamps=True, eos_token_id=-1)
        records[rid] = {"request_id": rid, "submit_s": t}
        submitted += 1

    for _ in range(min(concurrency, n_requests)):
        submit()
    while finished < submitted:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"level {concurrency}: {finished} of {n_requests} finished by the deadline")
        out = manager.get_result(timeout=5.0)
        if out is None or not out.is_finished():
            continue
        rec = records[out.request_id]
        rec.update(engine_created_s=out.created_time, token_s=list(out.timestamps or []),
                   output_tokens=len(out.generated_tokens), error=out.error)
        finished += 1
        if submitted < n_requests:
            submit()
    return list(records.values())


def summarize(records: list[dict]) -> dict:
    ok = [r for r in records if not r.get("error") and r["token_s"]]
    start = min(r["submit_s"] for r in ok)
    end = max(r["token_s"][-1] for r in ok)
    ttft = [(r["token_s"][0] - r["submit_s"]) * 1e3 for r in ok]
    tpot = [(r["token_s"][-1] - r["token_s"][0]) * 1e3 / (len(r["token_s"]) - 1)
            for r in ok if len(r["token_s"]) > 1]
    tokens = sum(r["output_tokens"] for r in ok)
    return {"requests": len(ok), "failed": len(records) - len(ok),
            "output_tokens_sum": tokens, "duration_s": end - start,
            "output_tok_s_total": tokens / (end - start),
            "ttft_ms_median": statistics.median(ttft), "ttft_ms_mean": statistics.fmean(ttft),
            "tpot_ms_median": statistics.median(tpot) if tpot else None,
            "tpot_ms_mean": statistics.fmean(tpot) if tpot else None,
            "req_per_s": len(ok) / (end - start)}


def serve(key: str, device: str, levels: list[int], input_tokens: int, output_tokens: int,
          per_level: int, num_blocks: int | None, deadline: float, raw, log) -> list[dict]:
    import torch
    import transformers
    from transformers import ContinuousBatchingConfig, GenerationConfig

    model, built_s = build(key, device)
    gen = GenerationConfig(max_new_tokens=output_tokens, do_sample=False, eos_token_id=-1,
                           pad_token_id=0)
    cb = ContinuousBatchingConfig(block_size=BLOCK_TOKENS, max_batch_tokens=MAX_BATCH_TOKENS,
                                  max_requests_per_batch=MAX_REQUESTS_PER_BATCH,
                                  num_blocks=num_blocks, allow_block_sharing=False)
    manager = model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)
    t = time.perf_counter()
    if hasattr(manager, "warmup"):
        manager.warmup()
    manager.start()
    rng = random.Random(0)
    vocab = model.config.vocab_size
    # warm-up: the first requests pay CUDA-graph captures and allocator growth
    run_level(manager, 4, 8, input_tokens, 16, vocab, deadline, rng)
    warm_s = time.perf_counter() - t
    meta = {"model": key, "device": str(torch.cuda.get_device_name() if device == "cuda" else device),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "attn_implementation": model.config._attn_implementation,
            "experts_implementation": getattr(model.config, "_experts_implementation_internal", None),
            "kv_blocks": getattr(getattr(manager, "batch_processor", None), "cache", None)
            and manager.batch_processor.cache.num_blocks,
            "cuda_graphs": str(cb.use_cuda_graph), "built_s": round(built_s, 1), "warmup_s": round(warm_s, 1),
            "block_tokens": BLOCK_TOKENS, "max_batch_tokens": MAX_BATCH_TOKENS,
            "max_requests_per_batch": MAX_REQUESTS_PER_BATCH}
    rows = []
    try:
        for c in levels:
            n = max(per_level, 2 * c)
            recs = run_level(manager, c, n, input_tokens, output_tokens, vocab, deadline, rng)
            for r in recs:
                raw.write(json.dumps({"model": key, "concurrency": c, "input_tokens": input_tokens,
                                      **r}) + "\n")
            raw.flush()
            row = {**meta, "concurrency": c, "input_tokens": input_tokens,
                   "output_tokens": output_tokens, **summarize(recs)}
            rows.append(row)
            print(json.dumps(row), file=log, flush=True)
    finally:
        manager.stop(block=True, timeout=30)
        del manager, model
        import gc

        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


# the calibration table (its columns: docs/calibration/README.md) and what each row here states
TABLE = HERE / "docs" / "calibration" / "published_serving.csv"
TABLE_MODELS = {"llama-3.1-8b": ("Llama-3.1-8B", 8.03, 8.03), "mixtral-8x7b": ("Mixtral-8x7B", 46.7, 12.9)}
ACCELERATORS = {"NVIDIA H200": "H200-SXM-141GB"}
RAW = "docs/calibration/measured_here/h200_transformers_raw.jsonl.gz"


def _records(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def table_rows(raw_path: Path, runs_path: Path, first_id: int = 1) -> list[dict[str, str]]:
    """The table's rows of these runs: every figure from the raw records (`summarize`); the
    run's settings and versions from the runs' log."""
    runs = {(r["model"], r["concurrency"]): r for r in _records(runs_path)}
    groups: dict[tuple, list[dict]] = {}
    for rec in _records(raw_path):
        groups.setdefault((rec["model"], rec["concurrency"], rec["input_tokens"]), []).append(rec)
    rows = []
    for i, ((model, conc, isl), recs) in enumerate(sorted(groups.items())):
        run = runs[(model, conc)]
        name, total, active = TABLE_MODELS[model]
        fig = summarize(recs)
        osl = recs[0]["output_tokens"]
        notes = (f"[measured here] {fig['requests']} requests, closed loop, after an 8-request "
                 f"warm-up; in-process (no HTTP server); random bf16 weights of the published "
                 f"configuration, prompts of random token ids, EOS disabled (every request "
                 f"generates exactly {osl} tokens); torch {run['torch']}, attention "
                 f"{run['attn_implementation']}, experts {run['experts_implementation']}, CUDA "
                 f"graphs off (the engine's default with sdpa); block_size {run['block_tokens']}, "
                 f"max_batch_tokens {run['max_batch_tokens']}, max_requests_per_batch "
                 f"{run['max_requests_per_batch']}, KV cache {run['kv_blocks']} blocks (0.9 of "
                 f"free memory)")
        rows.append({
            "row_id": f"m{first_id + i:03d}",
            "source": f"servingbench benchmarks/emulator_calibrate_serve.py on a lent H200, "
                      f"2026-12-04; raw records {RAW}",
            "claim_kind": "measured_here", "model": name, "total_params_b": f"{total:g}",
            "active_params_b": f"{active:g}", "weight_precision": "bf16",
            "kv_cache_precision": "bf16", "engine": "transformers",
            "engine_version": run["transformers"], "accelerator": ACCELERATORS[run["device"]],
            "instance": "", "n_accel": "1", "tp": "1", "ep": "", "input_tokens": str(isl),
            "output_tokens": str(osl), "load_kind": "concurrency", "load_value": str(conc),
            "output_tok_s_total": f"{fig['output_tok_s_total']:.1f}",
            "ttft_ms_median": f"{fig['ttft_ms_median']:.1f}",
            "ttft_ms_mean": f"{fig['ttft_ms_mean']:.1f}", "ttft_ms_p99": "",
            "tpot_ms_median": f"{fig['tpot_ms_median']:.2f}",
            "tpot_ms_mean": f"{fig['tpot_ms_mean']:.2f}",
            "req_per_s": f"{fig['req_per_s']:.3f}", "speculative": "", "notes": notes})
    return rows


def print_table(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="emulator_calibrate_serve.py table")
    p.add_argument("raw", type=Path)
    p.add_argument("runs", type=Path)
    a = p.parse_args(argv)
    buf = io.StringIO()
    with open(TABLE, newline="") as fh:
        columns = next(csv.reader(fh))
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    w.writerows(table_rows(a.raw, a.runs))
    print(buf.getvalue(), end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["table"]:
        return print_table(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--model", action="append", default=None,
                   help="architectures.yaml key (repeatable); default llama-3.1-8b, mixtral-8x7b")
    p.add_argument("--device", default="cuda")
    p.add_argument("--levels", default="1,4,16,64")
    p.add_argument("--input-tokens", type=int, default=1024)
    p.add_argument("--output-tokens", type=int, default=256)
    p.add_argument("--per-level", type=int, default=8, help="requests per level at least")
    p.add_argument("--num-blocks", type=int, default=None,
                   help="KV-cache blocks (default: the engine sizes it from free GPU memory)")
    p.add_argument("--deadline-s", type=float, default=420.0)
    a = p.parse_args(argv)
    deadline = time.perf_counter() + a.deadline_s
    a.out.mkdir(parents=True, exist_ok=True)
    levels = [int(x) for x in a.levels.split(",")]
    rows: list[dict] = []
    with open(a.out / "serve_raw.jsonl", "a") as raw, open(a.out / "serve_rows.jsonl", "a") as log:
        for key in a.model or ["llama-3.1-8b", "mixtral-8x7b"]:
            if time.perf_counter() > deadline:
                print(f"skipped {key}: past the deadline", file=sys.stderr)
                continue
            try:
                rows += serve(key, a.device, levels, a.input_tokens, a.output_tokens,
                              a.per_level, a.num_blocks, deadline, raw, log)
            except Exception as e:  # one model failing keeps the other's rows
                print(f"{key}: {type(e).__name__}: {e}", file=sys.stderr)
    print(json.dumps(rows, indent=1))
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
