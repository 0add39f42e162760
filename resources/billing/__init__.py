"""Bills of a run: Cost Explorer (the measured bill) and the Price List (a cross-check).

A bill source is one file here: a `BillSource` subclass (interface.py) whose `source` is its
name (the bill rows' `source` value, what a profile names it by) and whose
`from_aws(aws)` builds it; the file ends with `PLUGIN = <the class>`. The package finds the
classes (`names`, `build`), so a profile names its source by a string and adding a source is
adding one file (the helpers beside them are listed in `HELPERS`). Discovery runs on the
first call, so importing one helper of the package (normalize, price_bases) imports no other.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from servingbench.resources.contract.discovery import plugins

# the package's modules that are not a bill source's file
HELPERS = frozenset({"interface", "normalize", "price_bases", "price_list", "refresh"})


@dataclass(frozen=True)
class Aws:
    """What a source that reads AWS is built from (the eks profile's session, its endpoint
    override for the local AWS stand-in, and the run's one request counter); a source that
    reads none ignores it, and the local profile passes None."""

    session: Any
    endpoint_url: str | None = None
    caller: Any = None


def discover(package: ModuleType) -> dict[str, type]:
    """Every bill source class `package`'s files declare (`PLUGIN`), by its `source` name. A
    file without one, a class without a name, or a name taken twice, is an ImportError
    naming the file."""
    from servingbench.resources.billing.interface import BillSource

    def is_source(v) -> bool:
        return inspect.isclass(v) and issubclass(v, BillSource) and not inspect.isabstract(v)

    found: dict[str, tuple[type, str]] = {}
    for cls, _, where in plugins(package.__path__, package.__name__, is_source,
                                 "a BillSource subclass", HELPERS):
        name = getattr(cls, "source", None)
        if not isinstance(name, str) or not name:
            raise ImportError(f"{where}: {cls.__name__} must name its source "
                              "(source = \"...\", the bill rows' source value)")
        if name in found:
            raise ImportError(f"{where}: {cls.__name__}: source {name!r} is already "
                              f"{found[name][0].__name__}'s in {found[name][1]}")
        found[name] = (cls, where)
    return {name: cls for name, (cls, _) in sorted(found.items())}


_FOUND: dict[str, type] | None = None


def _sources() -> dict[str, type]:
    global _FOUND
    if _FOUND is None:
        _FOUND = discover(importlib.import_module(__name__))
    return _FOUND


def names() -> tuple[str, ...]:
    return tuple(_sources())


def build(name: str, aws: Aws | None = None):
    """The bill source a profile names (`price_sheet`, `cost_explorer`, ...), built for the
    profile's AWS (None: the local profile); ValueError naming it if no file defines it."""
    cls = _sources().get(name)
    if cls is None:
        raise ValueError(f"bill source {name!r}: expected one of {', '.join(names())}")
    return cls.from_aws(aws)
