"""Argument types shared by the commands: a numeric flag is finite and in range, or argparse
exits 2 naming the flag (`argument --duration-s: ...`), never a traceback later on."""

from __future__ import annotations

import argparse
import math


def finite(text: str) -> float:
    """A finite number: `nan`, `inf` and `1e999` are refused."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive(text: str) -> float:
    value = finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def non_negative(text: str) -> float:
    value = finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def int_or(word: str, minimum: int):
    """An argparse type: an integer >= `minimum`, or the one word (`auto`, `env`) as is."""
    def parse(text: str) -> int | str:
        if text == word:
            return text
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(
                f"expected an integer >= {minimum} or {word!r}, got {text!r}")
        return value
    return parse


def positive_floats(text: str) -> list[float]:
    """A comma list of finite numbers > 0."""
    values = [positive(x) for x in text.split(",") if x.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}")
    return values
