"""A package of dropped-in files, made in a test's tmp_path, for the one-file discoveries
(workload kinds, report sections, bill sources): the discovery is pointed at it, so no test
writes into the source tree that the parallel tests import."""

from __future__ import annotations

import importlib
import uuid
from pathlib import Path


def package(tmp_path: Path, monkeypatch, files: dict[str, str]):
    """An imported package holding `files` ({"burst.py": source, ...}); its name is unique,
    so the module cache never serves another test's package (and what it leaves there is
never asked for again)."""
    name = f"droppedin_{uuid.uuid4().hex[:12]}"
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    for file, text in files.items():
        (root / file).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    return importlib.import_module(name)
