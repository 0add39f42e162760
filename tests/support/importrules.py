"""An import-linter contract type that import-linter's wildcards cannot express: no test
module (`test_*`) or conftest imports another one, anywhere under `tests`. Shared helpers
belong in `tests/support`, so a test file can move or go without breaking another."""

from __future__ import annotations

from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


def _is_test_module(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last.startswith("test_") or last == "conftest"


class TestModulesIndependent(Contract):
    root = fields.StringField()

    def check(self, graph, verbose: bool) -> ContractCheck:
        broken = []
        for module in sorted(graph.modules):
            if not (module.startswith(self.root + ".") and _is_test_module(module)):
                continue
            for imported in sorted(graph.find_modules_directly_imported_by(module)):
                if _is_test_module(imported) and imported.startswith(self.root + "."):
                    broken.append((module, imported))
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        from importlinter.application import output

        for module, imported in check.metadata["broken"]:
            output.print_error(f"{module} imports {imported}; move what they share to "
                               f"{self.root}.support")


def _matches(module: str, pattern: str) -> bool:
    """`pkg.*` matches pkg's direct children; anything else matches itself only."""
    if pattern.endswith(".*"):
        parent = pattern[:-2]
        return module.startswith(parent + ".") and "." not in module[len(parent) + 1:]
    return module == pattern


class OnlyThrough(Contract):
    """The modules matching `modules` (e.g. `pkg.*`, each engine's file) are imported only by
    `through` and the modules under it: every other module asks `through`, so what those
    modules know stays in one place. `exempt`: modules matching `modules` that are not
    covered (a package's own helpers beside its one-file entries); `allowed`: importers (and
    the modules under them) that may still import a covered module directly (the tests
    unit-testing one entry's own functions)."""

    modules = fields.StringField()
    through = fields.StringField()
    exempt = fields.ListField(subfield=fields.StringField(), required=False, default=[])
    allowed = fields.ListField(subfield=fields.StringField(), required=False, default=[])

    def check(self, graph, verbose: bool) -> ContractCheck:
        broken = []
        inside = self.through + "."
        allowed = tuple(self.allowed)
        for module in sorted(graph.modules):
            if not _matches(module, self.modules) or module in self.exempt:
                continue
            for importer in sorted(graph.find_modules_that_directly_import(module)):
                if (importer != self.through and not importer.startswith(inside)
                        and not any(importer == a or importer.startswith(a + ".") for a in allowed)):
                    broken.append((importer, module))
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        from importlinter.application import output

        for importer, module in check.metadata["broken"]:
            output.print_error(f"{importer} imports {module}; ask {self.through} instead")


class NoCycles(Contract):
    """No import cycle among the modules of `packages`: every import, at module level or
    inside a function, goes one way. A cycle is reported as its modules, to be untied by
    moving what both need below both."""

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph, verbose: bool) -> ContractCheck:
        roots = tuple(self.packages)
        mods = sorted(m for m in graph.modules if m in roots or m.startswith(tuple(r + "." for r in roots)))
        cycles = _strongly_connected(mods, lambda m: [
            i for i in graph.find_modules_directly_imported_by(m) if i in set(mods)])
        return ContractCheck(kept=not cycles, metadata={"cycles": cycles})

    def render_broken_contract(self, check: ContractCheck) -> None:
        from importlinter.application import output

        for cycle in check.metadata["cycles"]:
            output.print_error("import cycle: " + " <-> ".join(cycle))


def _strongly_connected(nodes: list[str], edges) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module, iteratively (the
    graph is deeper than Python's recursion limit allows on a big tree)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges(child)))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)
