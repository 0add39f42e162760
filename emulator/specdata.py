"""The emulator's YAML spec files, read once, and the one error their lookups raise."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent


class SpecError(ValueError):
    """An unknown candidate, model, precision or engine, or an impossible TP degree."""


@cache
def load(name: str) -> dict[str, Any]:
    with (HERE / name).open() as fh:
        return yaml.safe_load(fh)


def resolve(name: str, spellings: dict[str, list[str]]) -> str | None:
    """The key whose spellings include `name` (case-insensitive), or None."""
    low = name.strip().lower()
    for key, names in spellings.items():
        if any(low == s.lower() for s in names):
            return key
    return None
