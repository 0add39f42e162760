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
