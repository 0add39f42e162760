"""The wheel installs one import name, `servingbench`, and carries the named queries.

A wheel built from this tree (setuptools' PEP 517 backend, in-process, from a copy so the tree
gets no build/ or egg-info) holds the design card's folders under `servingbench/` and every
`sql/*.sql`. Installed by a real installer into a fresh virtualenv beside a user's own package
named `assets` (most Dagster projects have one), both import, and the installed copy (never the
source tree) loads a query and reads its parameters."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("pipelines", "assets", "resources", "emulator", "sql")
UV = REPO / ".tools" / "bin" / "uv"


def _build_wheel(tmp: Path) -> Path:
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    for folder in FOLDERS:
        shutil.copytree(REPO / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp / "dist"
    code = ("import sys; from setuptools import build_meta; "
            "print(build_meta.build_wheel(sys.argv[1]))")
    proc = subprocess.run([sys.executable, "-c", code, str(out)], cwd=src, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out / proc.stdout.strip().splitlines()[-1]


def _fresh_venv(tmp: Path) -> tuple[Path, Path]:
    """A new virtualenv whose only extra path is this environment's third-party packages
    (a plain path line, so this tree's editable finder is not installed there)."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python, site


def test_the_wheel_installs_one_name_beside_a_users_assets_package(tmp_path):
    wheel = _build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names}
    assert top == {"servingbench", "servingbench-0.1.0.dist-info"}, sorted(top)
    shipped = {n for n in names if n.endswith(".sql")}
    in_tree = {f"servingbench/sql/{p.name}" for p in (REPO / "sql").glob("*.sql")}
    assert shipped == in_tree and "servingbench/sql/step_metrics.sql" in shipped

    python, site = _fresh_venv(tmp_path)
    if UV.exists():  # what `make` sets up: a real installer
        proc = subprocess.run([str(UV), "pip", "install", "--quiet", "--no-deps", "--offline",
                               "--python", str(python), str(wheel)],
                              capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-2000:]
    else:  # what an installer does with a pure-Python wheel
        zipfile.ZipFile(wheel).extractall(site)
    users = site / "assets"
    users.mkdir()
    (users / "__init__.py").write_text("WHOSE = 'the user'\n")

    probe = ("import assets, servingbench.assets, servingbench.pipelines.definitions; "
             "from servingbench.resources.analysis import sqlfiles; "
             "print(assets.WHOSE); print(sqlfiles.__file__); "
             "print(sqlfiles.load('step_metrics').splitlines()[0]); "
             "print(sqlfiles.params_of('cost_per_1m') >= {'node_count'})")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # -P: not the working directory first; cwd elsewhere: the source tree is not on the path
    proc = subprocess.run([str(python), "-P", "-c", probe], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)
    lines = proc.stdout.splitlines()
    installed = site / "servingbench" / "resources" / "analysis" / "sqlfiles.py"
    assert lines[:4] == ["the user", str(installed), "-- name: step_metrics", "True"], (
        proc.stdout + proc.stderr[-2000:])
