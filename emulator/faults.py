"""Faults on demand: per request via `X-Servingbench-Fault: key=value[;key=value...]`,
or by rate (`--fault-rate KIND=P`, seeded).

Keys: status=429|500, first_byte_delay_s=S, stall_s=S, disconnect_after=K,
malformed_after=K, tokens_per_chunk=K, empty=1. Delays are real seconds (not scaled).
Rate kinds: status_429, status_500, first_byte_delay, stall, disconnect, malformed,
bundle, empty — each drawn with its defaults below.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

HEADER = "x-servingbench-fault"
RATE_KINDS = ("status_429", "status_500", "first_byte_delay", "stall", "disconnect",
              "malformed", "bundle", "empty")
DEFAULT_DELAY_S = 1.0
DEFAULT_BUNDLE = 4


class FaultError(ValueError):
    """A malformed fault header or --fault-rate value."""


@dataclass(frozen=True)
class Faults:
    status: int | None = None
    first_byte_delay_s: float = 0.0
    stall_s: float = 0.0
    disconnect_after: int | None = None
    malformed_after: int | None = None
    tokens_per_chunk: int = 1
    empty: bool = False

    @property
    def any(self) -> bool:
        return self != Faults()


def _num(key: str, value: str, kind: type, lo: float) -> float | int:
    try:
        v = kind(value)
    except ValueError:
        raise FaultError(f"fault {key}={value!r}: expected a {kind.__name__}") from None
    if v < lo:
        raise FaultError(f"fault {key}={value!r}: must be ≥ {lo}")
    return v


def parse_header(text: str | None) -> Faults:
    if not text:
        return Faults()
    f = Faults()
    for item in text.split(";"):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            raise FaultError(f"fault {item!r}: expected key=value")
        if key == "status":
            if value not in ("429", "500"):
                raise FaultError(f"fault status={value!r}: only 429 and 500 are supported")
            f = replace(f, status=int(value))
        elif key in ("first_byte_delay_s", "stall_s"):
            f = replace(f, **{key: float(_num(key, value, float, 0.0))})
        elif key in ("disconnect_after", "malformed_after"):
            f = replace(f, **{key: int(_num(key, value, int, 0))})
        elif key == "tokens_per_chunk":
            f = replace(f, tokens_per_chunk=int(_num(key, value, int, 1)))
        elif key == "empty":
            if value not in ("0", "1"):
                raise FaultError(f"fault empty={value!r}: expected 1 or 0")
            f = replace(f, empty=value == "1")
        else:
            raise FaultError(f"unknown fault {key!r}; known: status, first_byte_delay_s, "
                             "stall_s, disconnect_after, malformed_after, tokens_per_chunk, empty")
    return f


def parse_rate(text: str) -> tuple[str, float]:
    kind, sep, p = text.partition("=")
    if not sep or kind not in RATE_KINDS:
        raise FaultError(f"--fault-rate {text!r}: expected KIND=P with KIND one of {', '.join(RATE_KINDS)}")
    try:
        prob = float(p)
    except ValueError:
        raise FaultError(f"--fault-rate {text!r}: P must be a number in [0, 1]") from None
    if not 0.0 <= prob <= 1.0:
        raise FaultError(f"--fault-rate {text!r}: P must be in [0, 1]")
    return kind, prob


def draw(rates: dict[str, float], rng: random.Random, output_tokens: int) -> Faults:
    """Random faults for one request (the header, when given, takes precedence)."""
    f = Faults()
    for kind in RATE_KINDS:
        p = rates.get(kind, 0.0)
        if p <= 0.0 or rng.random() >= p:
            continue
        cut = rng.randint(1, max(1, output_tokens - 1))
        changes = {
            "status_429": {"status": 429}, "status_500": {"status": 500},
            "first_byte_delay": {"first_byte_delay_s": DEFAULT_DELAY_S},
            "stall": {"stall_s": DEFAULT_DELAY_S}, "disconnect": {"disconnect_after": cut},
            "malformed": {"malformed_after": cut}, "bundle": {"tokens_per_chunk": DEFAULT_BUNDLE},
            "empty": {"empty": True},
        }[kind]
        f = replace(f, **changes)
    return f
