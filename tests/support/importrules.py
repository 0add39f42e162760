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
