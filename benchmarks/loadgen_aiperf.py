"""AIPerf as a benchmark peer, from a separate virtualenv (never a servingbench dependency).

    python3 -m venv /tmp/aiperf-venv && /tmp/aiperf-venv/bin/pip install aiperf==0.13.0

AIPerf sizes prompts with a Hugging Face tokenizer and its `builtin` one downloads
tiktoken data, so with no network we give it a local word-level tokenizer (built here
with the `tokenizers` package of its own virtualenv). Its per-request export carries the
`X-Request-ID` it sent, which joins it to the server's ground truth.
"""

from __future__ import annotations

import json
import resource
import subprocess
import tempfile
from pathlib import Path

_MAKE_TOKENIZER = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2}
for i in range(4096):
    vocab[f"t{i}"] = len(vocab)
tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", bos_token="<s>",
                        eos_token="</s>").save_pretrained(sys.argv[1])
"""


def make_tokenizer(python: str, where: Path) -> Path:
    """A whitespace word-level tokenizer, like the fixed-timing server's own count."""
    subprocess.run([python, "-c", _MAKE_TOKENIZER, str(where)], check=True, capture_output=True)
    return where


def run_aiperf(python: str, taskset: list[str], base: str, mode: str, value: float, count: int,
               tmp: Path) -> tuple[dict, list[dict]]:
    out = Path(tempfile.mkdtemp(dir=tmp, prefix=f"aiperf-{mode}{value:g}-"))
    tok = make_tokenizer(python, tmp / "aiperf-tokenizer")
    load = ["--concurrency", str(int(value))] if mode == "c" else ["--request-rate", str(value)]
    cmd = [*taskset, python, "-m", "aiperf", "profile", "--model", "fixed", "--tokenizer", str(tok),
           "--url", base, "--endpoint-type", "completions", "--streaming", *load,
           "--request-count", str(count), "--synthetic-input-tokens-mean", "512",
           "--synthetic-input-tokens-stddev", "0", "--output-tokens-mean", "128",
           "--output-tokens-stddev", "0", "--extra-inputs", "ignore_eos:true",
           "--artifact-dir", str(out)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise RuntimeError(f"aiperf failed: {p.stdout[-1500:]}{p.stderr[-1500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    reqs = []
    for line in (out / "profile_export.jsonl").read_text().splitlines():
        r = json.loads(line)
        md, m = r["metadata"], r.get("metrics", {})
        if md.get("benchmark_phase") != "profiling":
            continue
        start = md["request_start_ns"]
        ok = "time_to_first_token" in m and not md.get("was_cancelled")
        chunks = []
        if ok:
            at = start + int(m["time_to_first_token"]["value"] * 1e6)
            chunks.append((at, 1))
            for gap in m.get("inter_chunk_latency", {}).get("value", []):
                at += int(gap * 1e6)
                chunks.append((at, 1))
        reqs.append({"request_id": md["x_request_id"], "scheduled": md.get("credit_issued_ns", start),
                     "sent": start, "finished": md["request_end_ns"], "chunks": chunks, "ok": ok})
    return {"cpu_s": cpu, "wall_s": None, "cpu_note": "whole AIPerf run, start-up included"}, reqs


# --- against llama.cpp's server (benchmarks/real_engine.py) -----------------------------------
# AIPerf sizes its synthetic prompts with a Hugging Face tokenizer; to ask llama.cpp for the
# same prompt lengths as servingbench does (which counts with the server's own tokenizer),
# AIPerf gets the model's own tokenizer, rebuilt offline from the GGUF file's metadata
# (transformers' GGUF converter; its GGUF *reader* needs PyTorch, so the `gguf` package reads
# the file instead: `/tmp/aiperf-venv/bin/pip install gguf==0.19.0`).
_GGUF_TOKENIZER = """
import sys
from gguf import GGUFReader, GGUFValueType
from transformers import PreTrainedTokenizerFast
from transformers.integrations.gguf.gguf_tokenizer_mapping import (GGUF_TOKENIZER_MAPPING,
                                                                   convert_gguf_tokenizer)
reader = GGUFReader(sys.argv[1])
def value(f):
    if f.types[0] == GGUFValueType.ARRAY:
        if f.types[1] == GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8", errors="replace") for i in f.data]
        return [f.parts[i].tolist()[0] for i in f.data]
    if f.types[0] == GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode()
    return f.parts[f.data[0]].tolist()[0]
meta = {k: value(f) for k, f in reader.fields.items()
        if k.startswith("tokenizer.") or k == "general.architecture"}
tok = {name: meta[f"tokenizer.{key}"] for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
       if f"tokenizer.{key}" in meta}
backend, _ = convert_gguf_tokenizer(meta["general.architecture"], tok)
PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=tok["tokens"][tok["bos_token_id"]],
                        eos_token=tok["tokens"][tok["eos_token_id"]]).save_pretrained(sys.argv[2])
"""


def make_gguf_tokenizer(python: str, gguf: Path, where: Path) -> Path:
    """The GGUF model's own tokenizer as a Hugging Face folder AIPerf can load offline."""
    if not (where / "tokenizer.json").is_file():
        p = subprocess.run([python, "-c", _GGUF_TOKENIZER, str(gguf), str(where)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"tokenizer from {gguf.name} failed: {p.stderr[-1500:]}")
    return where


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q
    lo = int(k)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (k - lo)


def run_aiperf_closed(python: str, base: str, model: str, tokenizer: Path, concurrency: int,
                      count: int, input_tokens: int, output_tokens: int, out: Path) -> dict:
    """One closed-loop AIPerf step (streaming completions), AIPerf's own figures plus the
    TTFT and ITL percentiles recomputed from its per-request export with servingbench's
    definitions (ITL = every inter-chunk gap, pooled; contract §5)."""
    cmd = [python, "-m", "aiperf", "profile", "--model", model, "--tokenizer", str(tokenizer),
           "--url", base, "--endpoint-type", "completions", "--streaming",
           "--concurrency", str(concurrency), "--request-count", str(count),
           "--warmup-request-count", "1",
           "--synthetic-input-tokens-mean", str(input_tokens), "--synthetic-input-tokens-stddev", "0",
           "--output-tokens-mean", str(output_tokens), "--output-tokens-stddev", "0",
           # llama-cpp-python honours min_tokens (not ignore_eos): exact output lengths
           "--extra-inputs", f"min_tokens:{output_tokens}", "--extra-inputs", "ignore_eos:true",
           "--ui-type", "none", "--artifact-dir", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"aiperf failed ({p.returncode}): {p.stdout[-2000:]}{p.stderr[-2000:]}")
    ttft, gaps, n_ok = [], [], 0
    for line in (out / "profile_export.jsonl").read_text().splitlines():
        r = json.loads(line)
        md, m = r["metadata"], r.get("metrics", {})
        if md.get("benchmark_phase") != "profiling" or "time_to_first_token" not in m:
            continue
        n_ok += 1
        ttft.append(m["time_to_first_token"]["value"] / 1e3)
        gaps += [g / 1e3 for g in m.get("inter_chunk_latency", {}).get("value", [])]
    summary = json.loads((out / "profile_export_aiperf.json").read_text())
    own = {}
    for tag in ("time_to_first_token", "inter_token_latency", "output_token_throughput"):
        entry = summary.get(tag) or summary.get("records", {}).get(tag) or {}
        scale = 1e-3 if entry.get("unit") == "ms" else 1.0
        own[tag] = {k: (entry[k] * scale if entry.get(k) is not None else None)
                    for k in ("avg", "p50", "p99")}
    return {"n_ok": n_ok, "ttft_s_p50": _pct(ttft, 0.5), "ttft_s_p99": _pct(ttft, 0.99),
            "itl_s_p50": _pct(gaps, 0.5), "itl_s_p99": _pct(gaps, 0.99),
            "output_tok_s": own["output_token_throughput"]["avg"], "aiperf": own}
