"""Finding what a package's files declare: an engine, a telemetry source, a bill source, a
workload kind, a report section is one file in its package, and the package finds it.

This is the walk they share; what a file must declare, and the error when it does not, stays
with each package (its own message names the file by `where`).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Iterable, Iterator
from types import ModuleType


def package_files(path: Iterable[str], package: str,
                  skip: frozenset[str] = frozenset()) -> Iterator[tuple[ModuleType, str]]:
    """Each module of the package at `path` (its `__path__`) named `package`, in name order
    (so a name taken twice is always blamed on the same file), imported, with the file's path
    relative to the working directory as error messages name it; `skip` names modules that are
    not declarations (helpers beside them)."""
    for mod in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        if mod.name in skip:
            continue
        where = os.path.relpath(os.path.join(mod.module_finder.path, f"{mod.name}.py"))
        yield importlib.import_module(f"{package}.{mod.name}"), where
