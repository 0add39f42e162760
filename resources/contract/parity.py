"""A run folder's quality parity verdict (`quality_parity.json`, written by the chain's
`quality_matches_reference` check): the one reader every report, ranking and terminal table
asks, so "failed quality parity" means the same everywhere."""

from __future__ import annotations

import json
from pathlib import Path

PARITY_FILE = "quality_parity.json"


class ParityFileError(ValueError):
    """The verdict file exists but is not a JSON object."""


def read(run_dir: Path) -> dict | None:
    """The verdict of the run at `run_dir` (`status`, `passed`, `message`, ...); None when
    none was written (an emulated run, or a candidate without a quality plan)."""
    path = Path(run_dir) / PARITY_FILE
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ParityFileError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ParityFileError(f"{path}: expected a JSON object")
    return doc


def failed(verdict: dict | None) -> bool:
    """Whether a verdict says the run trails its reference: shown, never ranked. No verdict,
    or one that is not a judgement (`passed` null), is not a failure."""
    return verdict is not None and verdict.get("passed") is False


def run_failed(run_dir: Path) -> bool:
    """`failed` of the run at `run_dir`; an unreadable verdict file is reported, not taken
    for a pass."""
    return failed(read(run_dir))
