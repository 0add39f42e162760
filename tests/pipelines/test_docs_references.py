"""What the docs name exists: every `from servingbench... import ...` in docs/ and the README
imports, every repository path they spell is a file of the tree, and the architecture map's
command list is `servingbench --help`'s. Renames and moves otherwise leave the docs behind."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest
from servingbench.pipelines.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
IMPORT = re.compile(r"^\s*from (servingbench[\w.]*) import ([\w, ]+)$", re.M)
PATH = re.compile(r"\b((?:tests|resources|pipelines|assets|emulator|sql|benchmarks|deploy|scripts)"
                  r"/[\w./-]+\.(?:py|sql|yaml|md))\b")


def _imports() -> list[tuple[str, str, str]]:
    return [(doc.name, module, name.strip()) for doc in DOCS
            for module, names in IMPORT.findall(doc.read_text())
            for name in names.split(",") if name.strip()]


def test_the_docs_hold_imports_to_check():
    assert {doc for doc, _, _ in _imports()} >= {"eks.md", "report.md"}


@pytest.mark.parametrize(("doc", "module", "name"), _imports())
def test_every_import_in_the_docs_resolves(doc, module, name):
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(f"{doc}: `from {module} import {name}`: {exc}")
    assert hasattr(mod, name) or importlib.util.find_spec(f"{module}.{name}"), (
        f"{doc}: {module} has no {name}")


def test_every_path_the_docs_spell_exists():
    missing = sorted({f"{doc.name}: {p}" for doc in DOCS for p in PATH.findall(doc.read_text())
                      if not (ROOT / p).exists()})
    assert not missing, "paths the docs name that are not in the tree:\n" + "\n".join(missing)


def test_the_architecture_map_lists_every_command():
    text = (ROOT / "docs/architecture.md").read_text()
    listed = re.search(r"cli/__init__\.py COMMANDS \(([^)]*)\)", text)
    assert listed, "docs/architecture.md: the cli/ line names no command list"
    names = [n.strip().strip("`") for n in listed.group(1).split(";")[0].split(",")]
    assert names == list(COMMANDS)
