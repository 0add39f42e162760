"""The benchmark peers for tests and benchmarks: where `make peers` installed each one, and
short runs of them against a server on 127.0.0.1 (the emulator's fixed-timing mode).

A peer lives in its own virtualenv (~/.cache/servingbench/peers/<name>-<version>/), never
in servingbench's; a test that needs one skips, naming `make peers`, when it is absent.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from servingbench.resources.contract import settings

ROOT = Path(settings.get("SERVINGBENCH_PEERS") or Path.home() / ".cache/servingbench/peers")
VERSIONS = {"aiperf": "0.13.0", "guidellm": "0.8.1", "inference-perf": "0.7.0"}

# AIPerf and guidellm size prompts with a Hugging Face tokenizer, and their defaults fetch
# one from the hub; with no network each gets one built here with the `tokenizers` package
# of the peer's own virtualenv. AIPerf's is word-level (whitespace words, as the
# fixed-timing server's prompts are counted); guidellm writes its synthetic prompts from
# English text, which a word-level vocabulary would decode to nothing, so its tokenizer is
# byte-level (one token per byte; prompt sizes are then in bytes, which nothing here needs).
_WORD_TOKENIZER = """
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
_BYTE_TOKENIZER = """
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2}
for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
    vocab[ch] = len(vocab)
tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", bos_token="<s>",
                        eos_token="</s>").save_pretrained(sys.argv[1])
"""


def venv(peer: str) -> Path:
    return ROOT / f"{peer}-{VERSIONS[peer]}"


def python(peer: str) -> Path | None:
    """The peer's interpreter, or None when `make peers` has not installed it."""
    d = venv(peer)
    return d / "bin" / "python" if (d / ".servingbench-installed").exists() else None


def require(peer: str) -> Path:
    """The peer's interpreter, or skip the test saying how to install it."""
    p = python(peer)
    if p is None:
        pytest.skip(f"{peer} {VERSIONS[peer]} is not installed in {venv(peer)} "
                    "(`make peers` installs it)")
    return p


def tokenizer(py: Path, where: Path, byte_level: bool = False) -> Path:
    """The tokenizer folder at `where`, copied from the one built once per peer virtualenv
    (keyed by the code that builds it): building it imports `transformers` in the peer's
    interpreter, seconds of CPU that every module and benchmark run would otherwise repeat
    for the same few kilobytes."""
    if (where / "tokenizer.json").exists():
        return where
    code = _BYTE_TOKENIZER if byte_level else _WORD_TOKENIZER
    digest = hashlib.sha256(code.encode()).hexdigest()[:12]
    kind = "byte" if byte_level else "word"
    built = Path(py).parent.parent / "servingbench-tokenizers" / f"{kind}-{digest}"
    if not (built / "tokenizer.json").exists():
        try:
            built.parent.mkdir(parents=True, exist_ok=True)
            # built beside its final name and renamed into place: a worker that finds the
            # folder finds it whole, and two that build it at once both end with a whole one
            scratch = Path(tempfile.mkdtemp(prefix=f".{kind}-", dir=built.parent))
        except OSError:  # a read-only install: build it where it is wanted, as before
            subprocess.run([str(py), "-c", code, str(where)], check=True, capture_output=True,
                           timeout=300)
            return where
        try:
            subprocess.run([str(py), "-c", code, str(scratch / "tok")], check=True,
                           capture_output=True, timeout=300)
            with contextlib.suppress(OSError):  # another worker renamed its copy first
                (scratch / "tok").rename(built)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(built, where, dirs_exist_ok=True)
    return where


def _env(offline: bool) -> dict:
    # no colour codes in the logs a failure prints; guidellm and inference-perf are told the
    # hub is off (they look there otherwise), AIPerf is not: offline, its tokenizer-alias
    # lookup refuses a local folder ("Repo id must be in the form ...")
    env = {**os.environ, "NO_COLOR": "1", "TERM": "dumb"}
    if offline:
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    return env


def _run(cmd: list[str], what: str, timeout: float, offline: bool = True) -> None:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(offline))
    if p.returncode != 0:
        raise AssertionError(f"{what} failed ({p.returncode}):\n{p.stdout[-3000:]}\n"
                             f"{p.stderr[-3000:]}")


def run_aiperf(py: Path, base_url: str, out: Path, tok: Path, *, concurrency: int = 2,
               requests: int = 8, warmup: int = 2, input_tokens: int = 32,
               output_tokens: int = 8, raw: bool = True, model: str = "fixed",
               timeout: float = 300) -> Path:
    """`aiperf profile` against `base_url` (closed loop), its artifacts in `out`."""
    cmd = [str(py), "-m", "aiperf", "profile", "--model", model, "--tokenizer", str(tok),
           "--url", base_url, "--endpoint-type", "completions", "--streaming",
           "--concurrency", str(concurrency), "--request-count", str(requests),
           "--synthetic-input-tokens-mean", str(input_tokens),
           "--synthetic-input-tokens-stddev", "0", "--output-tokens-mean", str(output_tokens),
           "--output-tokens-stddev", "0", "--extra-inputs", "ignore_eos:true",
           "--artifact-dir", str(out), "--export-level", "raw" if raw else "records",
           "--ui", "none", "--no-server-metrics", "--no-gpu-telemetry"]
    if warmup:
        cmd += ["--warmup-request-count", str(warmup)]
    _run(cmd, "aiperf profile", timeout, offline=False)
    return out


def run_guidellm(py: Path, base_url: str, out: Path, tok: Path, *, concurrency: int = 2,
                 requests: int = 8, input_tokens: int = 32, output_tokens: int = 8,
                 model: str = "fixed", timeout: float = 300) -> Path:
    """`guidellm run` against `base_url` (closed loop), its report `out/benchmarks.json`;
    `tok` a byte-level tokenizer (`tokenizer(py, where, byte_level=True)`)."""
    out.mkdir(parents=True, exist_ok=True)
    report = out / "benchmarks.json"
    cmd = [str(py), "-m", "guidellm", "run",
           "--backend", f"kind=openai_http,target={base_url},model={model},"
                        "request_format=/v1/completions,http2=false",
           "--tokenizer", f"kind=huggingface_auto,model={tok}",
           "--profile", f"kind=concurrent,streams={concurrency}",
           "--constraint", f"kind=max_requests,count={requests}",
           "--data", f"kind=synthetic_text,prompt_tokens={input_tokens},"
                     f"output_tokens={output_tokens}",
           "--output", f"kind=json,path={report}", "--disable-console-interactive"]
    _run(cmd, "guidellm run", timeout)
    return report


_INFERENCE_PERF_CONFIG = """\
api: {{type: completion, streaming: true}}
server: {{type: vllm, model_name: {model}, base_url: "{base_url}", ignore_eos: true}}
tokenizer: {{pretrained_model_name_or_path: "{tok}"}}
data:
  type: random
  input_distribution: {{min: {inp}, max: {inp}, mean: {inp}, std_dev: 0}}
  output_distribution: {{min: {out}, max: {out}, mean: {out}, std_dev: 0}}
load:
  type: concurrent
  stages: [{{num_requests: {requests}, concurrency_level: {concurrency}}}]
  num_workers: 1
report:
  request_lifecycle: {{summary: true, per_stage: true, per_request: true}}
storage:
  local_storage: {{path: "{out_dir}"}}
"""


def run_inference_perf(py: Path, base_url: str, out: Path, tok: Path, *, concurrency: int = 2,
                       requests: int = 8, input_tokens: int = 32, output_tokens: int = 8,
                       model: str = "fixed", timeout: float = 300) -> Path:
    """`inference-perf --config_file` against `base_url` (one closed-loop stage), its
    reports (per-request lifecycle metrics included) in `out`; `tok` word-level."""
    out.parent.mkdir(parents=True, exist_ok=True)
    config = out.parent / f"{out.name}.yml"
    config.write_text(_INFERENCE_PERF_CONFIG.format(
        model=model, base_url=base_url, tok=tok, inp=input_tokens, out=output_tokens,
        requests=requests, concurrency=concurrency, out_dir=out))
    _run([str(py.parent / "inference-perf"), "--config_file", str(config)], "inference-perf",
         timeout)
    return out
