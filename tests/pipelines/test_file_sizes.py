"""One role per file, and files a reader can hold in mind: no product module (pipelines/,
assets/, resources/, emulator/) is over 450 lines, and the candidates file's reader
(pipelines/config.py), once 606 lines of every check there is, stays under 400."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 450
LIMITS = {"pipelines/config.py": 400}


def sizes(root: Path = ROOT) -> dict[str, int]:
    return {str(p.relative_to(root)): len(p.read_text().splitlines())
            for top in ("pipelines", "assets", "resources", "emulator")
            for p in sorted((root / top).rglob("*.py")) if "__pycache__" not in p.parts}


def too_long(found: dict[str, int]) -> list[str]:
    return [f"{name}: {n} lines (at most {LIMITS.get(name, MAX_LINES)})"
            for name, n in found.items() if n > LIMITS.get(name, MAX_LINES)]


def test_no_product_file_is_too_long():
    found = sizes()
    assert len(found) > 200 and "pipelines/config.py" in found  # it reads the tree
    assert too_long(found) == []


def test_the_check_can_fail():
    assert too_long({"resources/x.py": 451, "pipelines/config.py": 401}) == [
        "resources/x.py: 451 lines (at most 450)", "pipelines/config.py: 401 lines (at most 400)"]
