"""A candidate's `engine_args`: the engine settings a sweep varies, by their common name.

Each engine's file (engines/<engine>.py, `SETTINGS`) spells them its own way (vLLM
`--max-num-seqs`, SGLang `--max-running-requests`, ...); this module only checks the values
and says which settings an engine has none of, so a sweep lists that combination as skipped
instead of running a configuration that ignores what it claims to vary.

  max_num_seqs            sequences batched at once (a positive integer)
  max_num_batched_tokens  the token budget of one step (a positive integer)
  kv_cache_dtype          auto | fp8
  speculative             false, or the engine's own value: a mapping as vLLM
                          (`{method, num_speculative_tokens, model}`) or SGLang (`{algorithm,
                          num_steps, ...}`) takes it, or llama.cpp's prompt-lookup token count
"""

from __future__ import annotations

from servingbench.resources.model_server import engines

KEYS = ("max_num_seqs", "max_num_batched_tokens", "kv_cache_dtype", "speculative")
KV_CACHE_DTYPES = ("auto", "fp8")


class EngineArgsError(ValueError):
    """A bad value for an engine argument; the message names the key."""


def _positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1_048_576


def check(args: dict, where: str) -> dict:
    """The mapping, validated; raises EngineArgsError naming the key."""
    if not isinstance(args, dict):
        raise EngineArgsError(f"{where}: expected a mapping of {', '.join(KEYS)}")
    for key, value in args.items():
        if key not in KEYS:
            raise EngineArgsError(f"{where}.{str(key)[:80]}: unknown engine argument; known: "
                                  f"{', '.join(KEYS)}")
        if key in ("max_num_seqs", "max_num_batched_tokens") and not (
                value is None or _positive_int(value)):
            raise EngineArgsError(f"{where}.{key}: expected a positive integer, got {value!r}")
        if key == "kv_cache_dtype" and value not in (None, *KV_CACHE_DTYPES):
            raise EngineArgsError(f"{where}.{key}: {value!r} is not one of "
                                  f"{', '.join(KV_CACHE_DTYPES)}")
        if key == "speculative" and not (value in (None, False) or isinstance(value, dict)
                                         and value or _positive_int(value)):
            raise EngineArgsError(f"{where}.{key}: expected false, the engine's mapping (e.g. "
                                  f"{{method: ngram, num_speculative_tokens: 3}}) or a token "
                                  f"count, got {value!r}")
    return dict(args)


def active(args: dict) -> dict:
    """The arguments that change anything: null, `auto` KV cache and speculation off are
    each engine's default, so they are never spelt out (nor refused)."""
    return {k: v for k, v in args.items()
            if v is not None and v is not False and not (k == "kv_cache_dtype" and v == "auto")}


def unsupported(engine: str, args: dict) -> list[str]:
    """The active arguments `engine` has no setting for, in KEYS order (all of them for an
    engine servingbench does not know)."""
    try:
        have = engines.get(engine).settings
    except ValueError:
        have = {}
    return [k for k in KEYS if k in active(args) and k not in have]


def flags(engine: str, args: dict) -> list[str]:
    """The arguments in `engine`'s own spelling (its file's SETTINGS); ValueError for one it
    does not have."""
    return engines.get(engine).setting_args(active(args))
