"""The named queries ship in the wheel: a wheel built from this tree (setuptools' PEP 517
backend, in-process) holds every `resources/analysis/sql/*.sql`, and a fresh interpreter that
imports `resources` from the unpacked wheel only (never the source tree) loads a query and
reads its parameters."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("pipelines", "assets", "resources", "emulator")


def _build_wheel(tmp: Path) -> Path:
    """Build from a copy of what the wheel is made of, so the tree gets no build/ or egg-info."""
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp / "dist"
    code = ("import sys; from setuptools import build_meta; "
            "print(build_meta.build_wheel(sys.argv[1]))")
    proc = subprocess.run([sys.executable, "-c", code, str(out)], cwd=src, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out / proc.stdout.strip().splitlines()[-1]


def test_the_wheel_carries_the_sql_and_an_installed_copy_reads_it(tmp_path):
    wheel = _build_wheel(tmp_path)
    shipped = {n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".sql")}
    in_tree = {f"resources/analysis/sql/{p.name}" for p in (REPO / "resources/analysis/sql").glob("*.sql")}
    assert shipped == in_tree and "resources/analysis/sql/step_metrics.sql" in shipped

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)  # what an installer puts in site-packages
    probe = ("import resources; from resources.analysis import sqlfiles; "
             "print(resources.__file__); print(sqlfiles.load('step_metrics').splitlines()[0]); "
             "print(sqlfiles.params_of('cost_per_1m') >= {'node_count'})")
    env = {**os.environ, "PYTHONPATH": str(site)}
    # -P: not the working directory first; cwd elsewhere: the source tree is not on the path
    proc = subprocess.run([sys.executable, "-P", "-c", probe], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    lines = proc.stdout.splitlines()
    assert lines[:3] == [str(site / "resources" / "__init__.py"), "-- name: step_metrics", "True"], (
        proc.stdout + proc.stderr[-2000:])
