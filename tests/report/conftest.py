from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.runbuilder import build_comparison


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


@pytest.fixture(scope="session")
def reports(_pristine, tmp_path_factory) -> dict[str, Path]:
    """Reports written once for the read-only tests: the run reports of fast-0 (measured)
    and emu-0 (emulated), and the comparison across all five runs."""
    from servingbench.resources.report import write_comparison_report, write_run_report

    root = tmp_path_factory.mktemp("reports")
    dirs = []
    for src in _pristine:
        shutil.copytree(src, root / src.name)
        dirs.append(root / src.name)
    return {
        "measured": write_run_report(dirs[0]),
        "emulated": write_run_report(dirs[3]),
        "comparison": write_comparison_report(dirs, root / "out" / "comparison.html"),
    }
