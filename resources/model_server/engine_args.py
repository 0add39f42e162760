"""Engine arguments a sweep varies, in one engine-neutral spelling, and each engine's own.

A candidate's `engine_args` uses the neutral names below; each engine gets them in its own
spelling (vLLM's flag, SGLang's flag, vLLM on Neuron), and an engine that has no such
setting refuses the key by name, so a sweep lists that combination as skipped instead of
running a configuration that silently ignores what it claims to vary.

  max_num_seqs            sequences batched at once   vLLM --max-num-seqs, SGLang --max-running-requests
  max_num_batched_tokens  token budget of one step    vLLM --max-num-batched-tokens, SGLang --chunked-prefill-size
  kv_cache_dtype          auto | fp8                  vLLM --kv-cache-dtype fp8, SGLang --kv-cache-dtype fp8_e4m3
  speculative             false, or {method, num_speculative_tokens, model}
                          vLLM --speculative-config JSON, SGLang --speculative-algorithm/-num-draft-tokens
"""

from __future__ import annotations

import json

KEYS = ("max_num_seqs", "max_num_batched_tokens", "kv_cache_dtype", "speculative")
KV_CACHE_DTYPES = ("auto", "fp8")
SPEC_METHODS = ("ngram", "eagle", "eagle3", "draft_model")
SPEC_KEYS = ("method", "num_speculative_tokens", "model")
# What each engine can take. vLLM on Neuron has no FP8 KV cache; llama.cpp's server here
# (llama-cpp-python) takes none of them: its own settings live under `llamacpp`.
SUPPORTED = {
    "vllm": set(KEYS),
    "sglang": set(KEYS),
    "vllm-neuron": {"max_num_seqs", "max_num_batched_tokens", "speculative"},
    "llama.cpp": set(),
}


class EngineArgsError(ValueError):
    """A bad value for an engine argument; the message names the key."""


def _positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def check(args: dict, where: str) -> dict:
    """The engine-neutral mapping, validated; raises EngineArgsError naming the key."""
    if not isinstance(args, dict):
        raise EngineArgsError(f"{where}: expected a mapping of {', '.join(KEYS)}")
    for key, value in args.items():
        if key not in KEYS:
            raise EngineArgsError(f"{where}.{str(key)[:80]}: unknown engine argument; known: "
                                  f"{', '.join(KEYS)}")
        if key in ("max_num_seqs", "max_num_batched_tokens") and not (
                value is None or _positive_int(value) and value <= 1_048_576):
            raise EngineArgsError(f"{where}.{key}: expected a positive integer, got {value!r}")
        if key == "kv_cache_dtype" and value not in (None, *KV_CACHE_DTYPES):
            raise EngineArgsError(f"{where}.{key}: {value!r} is not one of "
                                  f"{', '.join(KV_CACHE_DTYPES)}")
        if key == "speculative":
            _check_speculative(value, f"{where}.{key}")
    return dict(args)


def _check_speculative(value, where: str) -> None:
    if value in (None, False):
        return
    if not isinstance(value, dict):
        raise EngineArgsError(f"{where}: expected false or a mapping {{method, "
                              f"num_speculative_tokens, model}}, got {value!r}")
    for key in value:
        if key not in SPEC_KEYS:
            raise EngineArgsError(f"{where}.{str(key)[:80]}: unknown key; known: {', '.join(SPEC_KEYS)}")
    if value.get("method") not in SPEC_METHODS:
        raise EngineArgsError(f"{where}.method: {value.get('method')!r} is not one of "
                              f"{', '.join(SPEC_METHODS)}")
    if not _positive_int(value.get("num_speculative_tokens", 1)):
        raise EngineArgsError(f"{where}.num_speculative_tokens: expected a positive integer")
    needs_model = value["method"] == "draft_model"
    model = value.get("model")
    if needs_model and not isinstance(model, str):
        raise EngineArgsError(f"{where}.model: method draft_model needs the draft model's id")
    if model is not None and (not isinstance(model, str) or model.startswith("-")):
        raise EngineArgsError(f"{where}.model: expected a model id, got {model!r}")


def active(args: dict) -> dict:
    """The arguments that change anything: null, `auto` KV cache and speculation off are
    each engine's default, so they are never spelt out (nor refused)."""
    return {k: v for k, v in args.items()
            if v is not None and v is not False and not (k == "kv_cache_dtype" and v == "auto")}


def unsupported(engine: str, args: dict) -> list[str]:
    """The active arguments `engine` has no setting for, in KEYS order."""
    have = SUPPORTED.get(engine, set())
    return [k for k in KEYS if k in active(args) and k not in have]


def flags(engine: str, args: dict) -> list[str]:
    """Command-line flags for `engine` (vllm, sglang, vllm-neuron); raises EngineArgsError
    for an argument the engine has no setting for."""
    missing = unsupported(engine, args)
    if missing:
        raise EngineArgsError(f"engine_args.{missing[0]}: {engine} has no such setting")
    a = active(args)
    out: list[str] = []
    sglang = engine == "sglang"
    if "max_num_seqs" in a:
        out += ["--max-running-requests" if sglang else "--max-num-seqs", str(a["max_num_seqs"])]
    if "max_num_batched_tokens" in a:
        out += ["--chunked-prefill-size" if sglang else "--max-num-batched-tokens",
                str(a["max_num_batched_tokens"])]
    if "kv_cache_dtype" in a:
        out += ["--kv-cache-dtype", "fp8_e4m3" if sglang else a["kv_cache_dtype"]]
    if "speculative" in a:
        spec = a["speculative"]
        n = spec.get("num_speculative_tokens", 1)
        if sglang:
            algorithm = {"draft_model": "STANDALONE"}.get(spec["method"], spec["method"].upper())
            out += ["--speculative-algorithm", algorithm, "--speculative-num-draft-tokens", str(n)]
            if spec.get("model"):
                out += ["--speculative-draft-model-path", spec["model"]]
        else:
            config = {"method": spec["method"], "num_speculative_tokens": n}
            if spec.get("model"):
                config["model"] = spec["model"]
            out += ["--speculative-config", json.dumps(config, sort_keys=True)]
    return out
