"""The project as it was at a git ref, importable beside this tree: what `--baseline REF`
of the analyzer benchmarks runs.

Since the folders install as `servingbench.<folder>` (setup.py's package-dir mapping), an
extracted tree put on PYTHONPATH as it is would still import the installed one (this
checkout). So the folders are extracted under `<dest>/tree/` and linked as
`<dest>/pkg/servingbench/<folder>`: with `<dest>/pkg` first on the path, `servingbench.*`
is the tree at REF (a plain entry of sys.path is searched before the editable install's
finder). A ref from before the one import name (its modules imported as `resources.*`,
`pipelines.*`) is run with `<dest>/tree` on the path and the prefix "".
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("pipelines", "assets", "resources", "emulator", "sql")


@dataclass(frozen=True)
class Tree:
    path: Path        # the folder holding pipelines/, resources/, ... (cwd for its commands)
    pythonpath: str   # what PYTHONPATH must be for `prefix + "resources..."` to be this tree
    prefix: str       # "servingbench." or "" (a ref before the one import name)

    def module(self, name: str) -> str:
        """`name` ("pipelines.cli") as this tree imports it."""
        return self.prefix + name


THIS = Tree(ROOT, str(ROOT), "servingbench.")


def extract(ref: str, dest: Path) -> Tree:
    """The project's folders at `ref` in `dest`, importable as described above."""
    found = subprocess.run(["git", "ls-tree", "--name-only", ref, *FOLDERS, "setup.py"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    tree = dest / "tree"
    tree.mkdir(parents=True)
    tar = subprocess.run(["git", "archive", ref, *[f for f in FOLDERS if f in found]], cwd=ROOT,
                         capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=tar, check=True)
    if "setup.py" not in found:  # before the one import name
        return Tree(tree, str(tree), "")
    pkg = dest / "pkg" / "servingbench"
    pkg.mkdir(parents=True)
    for folder in FOLDERS:
        if (tree / folder).is_dir():
            (pkg / folder).symlink_to(tree / folder, target_is_directory=True)
    return Tree(tree, str(dest / "pkg"), "servingbench.")
