"""ASCII digits only. `str.isdigit()` is true for `²`, `٣` or `𝟗`, which `int()` then
refuses or reads as another number: a tag, an index or a count that reached us as text is
checked here before `int()` sees it."""

from __future__ import annotations

import re

_DIGITS = re.compile(r"[0-9]+")


def is_digits(text: object) -> bool:
    """True for a non-empty string of ASCII 0-9 only."""
    return isinstance(text, str) and _DIGITS.fullmatch(text) is not None
