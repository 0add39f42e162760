"""Finding what a package's files declare: an engine, a telemetry source, a bill source, a
workload kind, a peer's reader, a report's sections is one file in its package, and the
package finds it.

The convention is the same in every package: the file ends with `PLUGIN = ...`, what the
file adds (an `Engine`, a `Kind`, a `Peer`, a `BillSource` class, ...). `plugins` walks the
package and hands each declaration back with the file's path; a file without `PLUGIN`, or
with one of the wrong type, is an ImportError naming the file, so a broken file stops its
package's import instead of vanishing from the list. Helpers beside the declarations are
named in `skip`. What a package checks beyond the type (a name taken twice, ...) it raises
the same way, naming the file by `where`.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Iterable, Iterator
from types import ModuleType

ATTRIBUTE = "PLUGIN"


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


def plugins(path: Iterable[str], package: str, is_one, what: str,
            skip: frozenset[str] = frozenset()) -> Iterator[tuple[object, ModuleType, str]]:
    """Each file's `PLUGIN` with its module and path, in name order. `is_one(value)` says
    whether a value is a declaration of this package; `what` says what one is, for the
    error (e.g. "Engine(...)")."""
    for module, where in package_files(path, package, skip):
        value = getattr(module, ATTRIBUTE, None)
        if value is None or not is_one(value):
            got = "nothing" if value is None else type(value).__name__
            raise ImportError(f"{where}: a file of {package} must end with "
                              f"{ATTRIBUTE} = {what} (got {got})")
        yield value, module, where
