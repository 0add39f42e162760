from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.report.fixtures import build_comparison


@pytest.fixture(scope="session")
def _pristine(tmp_path_factory) -> list[Path]:
    return build_comparison(tmp_path_factory.mktemp("pristine"))


@pytest.fixture
def runs(_pristine, tmp_path) -> list[Path]:
    """fast-0..2 (measured, c=8 invalid), emu-0 (emulated), slow-0 (meets no SLO step);
    a fresh copy per test, so reports written into one never leak into another."""
    out = []
    for src in _pristine:
        dst = tmp_path / "runs" / src.name
        shutil.copytree(src, dst)
        out.append(dst)
    return out
