"""What a workload kind's file declares, `KIND = Kind(...)`: its name as `scenario.kind`
spells it, the keys it accepts (each with its default and the check of one value), the token
targets it takes when the scenario sets none, and the check of the scenario as a whole.

spec.py finds every `scenarios/<kind>.py` that defines `KIND` and builds `Scenario` from
them, so adding a workload is adding one file. This module imports nothing but the errors,
so a kind's file can import it while spec.py imports that file.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from servingbench.resources.loadgen.errors import LoadConfigError

SLO_KEYS = ("ttft_p99_s", "tpot_p99_s")  # what an SLO bounds (the SLO search, --slo-search)
# the keys every kind built from token targets accepts (a kind with `targets=False` does not)
COMMON = ("input_tokens", "output_tokens", "dataset", "images", "image_size")


@dataclass(frozen=True)
class Key:
    """One key a kind accepts: its default, the check of its value (`(where, value)`, raising
    LoadConfigError naming `where`; run on every scenario, whatever its kind, as the value
    must make sense wherever it is given), and `convert` (`(where, value)` -> value), applied
    to a YAML value before the scenario is built (a path given as text -> Path)."""

    default: object = None
    check: Callable[[str, object], None] | None = None
    convert: Callable[[str, object], object] | None = None
    # the values it takes, when it names them (a shape's name): what a flag offers for it
    choices: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Kind:
    name: str
    order: int  # its place in the messages' list of kinds (`fixed` is 0)
    keys: Mapping[str, Key] = field(default_factory=dict)  # besides `kind` and COMMON
    targets: bool = True  # whether it is built from token targets (accepts COMMON)
    # the token targets it takes when neither the scenario nor the flags set them
    default_targets: Mapping[str, int] = field(default_factory=dict)
    # the whole scenario, after every key's check: `(scenario, where)`, raising LoadConfigError
    check: Callable[[object, str], None] | None = None
    # it schedules its own steps (the load config's concurrency / rates / profile do not apply)
    own_steps: bool = False
    # it runs in one load worker only (its steps cannot be split across worker processes)
    one_worker: bool = False


def suggest(word: str, choices) -> str:
    near = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _at_most(where: str, v, most) -> None:
    if most is not None and v > most:
        raise LoadConfigError(f"{where}: {v!r} is above the maximum {most:,}")


def pos_int(where: str, v, most: int | None = None) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise LoadConfigError(f"{where}: must be a positive integer, got {v!r}")
    _at_most(where, v, most)


def pos_num(where: str, v, zero_ok: bool = False, most: float | None = None) -> None:
    """A finite number, > 0 (>= 0 with `zero_ok`), at most `most`: YAML's .inf and .nan are
    floats, and an infinite length or rate would hold a paid run until its max runtime."""
    if (isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0
            or (v == 0 and not zero_ok)):
        raise LoadConfigError(f"{where}: must be a finite "
                              f"{'non-negative' if zero_ok else 'positive'} number, got {v!r}")
    _at_most(where, v, most)


def non_neg_num(where: str, v, most: float | None = None) -> None:
    pos_num(where, v, zero_ok=True, most=most)


def at_most(check: Callable[..., None], most) -> Callable[[str, object], None]:
    """`check` with an upper bound: `at_most(pos_num, 3600)`."""
    return lambda where, v: check(where, v, most=most)


def one_of(choices: tuple[str, ...]) -> Callable[[str, object], None]:
    def check(where: str, v) -> None:
        if v not in choices:
            raise LoadConfigError(f"{where}: {v!r} is not one of {', '.join(choices)}"
                                  + suggest(v, choices))
    return check


def optional(check: Callable[[str, object], None]) -> Callable[[str, object], None]:
    return lambda where, v: None if v is None else check(where, v)
