"""Only Dagster's public API: a private module (`dagster._core...`) moves between releases
without notice, and the pins would then break on an upgrade nobody could see coming."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRIVATE = re.compile(r"^\s*(?:from|import)\s+dagster(?:_\w+)?\._", re.M)


def test_no_module_imports_a_private_dagster_module():
    found = [str(p.relative_to(REPO)) for room in ("pipelines", "assets", "resources")
             for p in sorted((REPO / room).rglob("*.py")) if PRIVATE.search(p.read_text())]
    assert found == []
    assert PRIVATE.search("from dagster._core.storage.dagster_run import FINISHED_STATUSES")
