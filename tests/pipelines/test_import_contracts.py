"""The import contracts (.importlinter) guard something: every module pattern a contract names
(its containers and layers, source and forbidden modules, the modules an `only_through`
covers and the room they go through, its exemptions and allowances, the ignored imports,
the packages of `no_cycles`) matches at least one module of the tree. A contract whose
patterns match nothing passes vacuously, as the `only_through` contracts did when they named
modules without the `servingbench.` prefix. And the contract that keeps test modules apart
(shared helpers in tests/support) is shown to catch one test module importing another."""

from __future__ import annotations

import configparser
import re
from functools import cache
from pathlib import Path

import grimp
import pytest

from tests.support.importrules import TestModulesIndependent

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / ".importlinter"
# the options that name modules, by contract type (`containers` prefix the layers)
MODULE_OPTIONS = {"layers": ("containers", "layers", "ignore_imports"),
                  "forbidden": ("source_modules", "forbidden_modules", "ignore_imports"),
                  "only_through": ("modules", "through", "exempt", "allowed"),
                  "test_modules_independent": ("root",),
                  "no_cycles": ("packages",)}


def _config() -> configparser.ConfigParser:
    cp = configparser.ConfigParser()
    cp.read(CONFIG)
    return cp


@cache
def _modules() -> frozenset[str]:
    roots = _config()["importlinter"]["root_packages"].split()
    return frozenset(grimp.build_graph(*roots, include_external_packages=False).modules)


def _values(section, option: str) -> list[str]:
    return [v.strip() for v in section.get(option, "").splitlines() if v.strip()]


def _matches(pattern: str, modules) -> bool:
    """import-linter's wildcards: `*` one part, `**` any number of parts."""
    rx = re.escape(pattern).replace(r"\*\*", ".+").replace(r"\*", "[^.]+")
    return any(re.fullmatch(rx, m) for m in modules)


def patterns(section) -> list[str]:
    """Every module pattern a contract section names."""
    kind = section["type"]
    if kind not in MODULE_OPTIONS:
        raise AssertionError(f"{section.name}: contract type {kind!r}: teach this test its "
                             "options, so that it is checked too")
    out = []
    containers = _values(section, "containers")
    for option in MODULE_OPTIONS[kind]:
        for value in _values(section, option):
            if option == "layers":
                for part in re.split(r"[|:]", value):
                    name = part.strip()
                    if name.startswith("("):  # an optional layer may be absent
                        continue
                    out += [f"{c}.{name}" for c in containers] if containers else [name]
            elif option == "ignore_imports":
                out += [side.strip() for side in value.split("->")]
            else:
                out.append(value)
    return out


def unmatched(config: configparser.ConfigParser, modules) -> list[str]:
    return [f"{name}: {p}" for name in config.sections() if name.startswith(
        "importlinter:contract:") for p in patterns(config[name]) if not _matches(p, modules)]


def test_every_contract_names_modules_that_exist():
    cp = _config()
    contracts = [s for s in cp.sections() if s.startswith("importlinter:contract:")]
    assert len(contracts) >= 15
    assert unmatched(cp, _modules()) == []


def test_a_pattern_that_matches_nothing_is_caught():
    # the four `only_through` contracts before the fix: no `servingbench.` prefix
    cp = configparser.ConfigParser()
    cp.read_string("[importlinter:contract:x]\ntype = only_through\n"
                   "modules = resources.model_server.engines.*\n"
                   "through = servingbench.resources.model_server.engines\n")
    assert unmatched(cp, _modules()) == ["importlinter:contract:x: "
                                         "resources.model_server.engines.*"]
    assert _matches("servingbench.resources.model_server.engines.*", _modules())
    assert _matches("servingbench.resources.**", _modules())


@pytest.mark.parametrize("importer, imported, kept", [
    ("tests.a.test_x", "tests.b.test_y", False),       # a test module imports another
    ("tests.a.conftest", "tests.b.test_y", False),     # so does a conftest
    ("tests.a.test_x", "tests.support.helpers", True),  # shared helpers are where they go
])
def test_test_modules_import_shared_helpers_only_from_support(importer, imported, kept):
    graph = grimp.ImportGraph()
    graph.add_import(importer=importer, imported=imported)
    contract = TestModulesIndependent(name="tests", session_options={},
                                      contract_options={"root": "tests"})
    assert contract.check(graph, verbose=False).kept is kept
