"""The checks every part of the candidates file is read with: ConfigError (naming the file and
the key), unknown keys with a suggestion, finite numbers, the sane maxima, messages that
quote a value cut short. pipelines/config.py (a candidate) and candidate_plans.py (its load,
engine and quality plans) both use them; sweeps.py and catalog.py too."""

from __future__ import annotations

import difflib
import math
import re

from servingbench.resources.contract.deployment import MAX_NODES
from servingbench.resources.loadgen.config import MAX_TOKENS

NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")

# Sane upper bounds: a value past them is a typo, and some (input_tokens) size memory.
MAXIMA = {"tensor_parallel": 128, "node_count": MAX_NODES, "max_model_len": MAX_TOKENS,
          "input_tokens": MAX_TOKENS, "output_tokens": MAX_TOKENS, "concurrency": 4096,
          "rates": 10_000, "requests_per_step": 1_000_000, "warmup_requests": 100_000, "workers": 256,
          "hourly_usd_per_node": 10_000}

class ConfigError(ValueError):
    """The candidates file or price sheet is malformed; the message names the key."""


def unknown(where: str, key, allowed) -> ConfigError:
    key = str(key)[:80]  # YAML keys may be numbers, dates or very long strings
    close = difflib.get_close_matches(key, list(allowed), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigError(f"{where}.{key}: unknown key{hint}")


def check_keys(obj: dict, allowed, where: str) -> None:
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a mapping")
    for key in obj:
        if key not in allowed:
            raise unknown(where, key, allowed)


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v) -> bool:
    """A finite int or float (YAML's .nan and .inf are floats too, and not numbers here)."""
    return (is_int(v) or isinstance(v, float)) and math.isfinite(v)


def at_most(value, key: str, where: str) -> None:
    limit = MAXIMA[key]
    if value > limit:
        raise ConfigError(f"{where}: {value!r} is above the maximum {limit:,}")


def positive_ints(value, where: str, key: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(is_int(v) and v > 0 for v in value):
        raise ConfigError(f"{where}: expected a list of positive integers, got {short(value)}")
    for v in value:
        at_most(v, key, where)
    return tuple(value)


def short(value) -> str:
    """`repr` cut short: a message quotes the bad value, never a whole hostile document."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
