"""docs/architecture.md's map against the tree: every package of pipelines/, assets/ and
resources/ has its line, every module is named in its folder's entry (`name.py`; a folder of
one file per engine, kind, peer or source may name them by their plain names), and every
file the map names exists where it says. The emulator is one line (it is self-contained and
documented in docs/emulator.md)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
CHECKED = ("pipelines", "assets", "resources")
DESCRIPTION_COLUMN = 22
PY = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.py)\b")


def _block(text: str) -> list[str]:
    start = text.index("```\n") + 4
    return text[start:text.index("```", start)].splitlines()


def entries(lines: list[str]) -> dict[str, str]:
    """Each entry of the map as {path: its text}: a folder `a/b/` or a file `a/b.py`, its text
    the description beside it and the lines below it until the next entry."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []  # (indent, folder path) of the enclosing folders
    current = None
    for line in lines:
        indent = len(line) - len(line.lstrip(" "))
        if line.strip() and indent < DESCRIPTION_COLUMN:
            name, _, rest = line.strip().partition(" ")
            while stack and stack[-1][0] >= indent:
                stack.pop()
            parent = stack[-1][1] if stack else ""
            current = parent + name
            if name.endswith("/"):
                stack.append((indent, current))
            out[current] = rest.strip()
        elif current is not None:
            out[current] += " " + line.strip()
    return out


def problems(text: str, root: Path = ROOT) -> list[str]:
    found = entries(_block(text))
    out = []
    for top in CHECKED:
        for init in sorted((root / top).rglob("__init__.py")):
            folder = init.parent
            if "__pycache__" in folder.parts:
                continue
            key = str(folder.relative_to(root)) + "/"
            if key not in found:
                out.append(f"{key}: no line in the map")
                continue
            words = found[key]
            plugins = "one file per" in words
            for module in sorted(folder.glob("*.py")):
                if module.name == "__init__.py" or key + module.name in found:
                    continue
                named = re.search(rf"(?<![\w.-]){re.escape(module.name)}\b", words) or (
                    plugins and re.search(rf"\b{re.escape(module.stem)}\b", words))
                if not named:
                    out.append(f"{key}{module.name}: not named in its folder's entry")
    for key, words in found.items():
        base = key if key.endswith("/") else key.rsplit("/", 1)[0] + "/"
        if key.endswith("/") and not (root / key).is_dir():
            out.append(f"{key}: in the map, not in the tree")
        elif not key.endswith("/") and not (root / key).is_file():
            out.append(f"{key}: in the map, not in the tree")
        for name in PY.findall(words):
            if not _exists(root, base, name):
                out.append(f"{key}: names {name}, which is not there")
    return out


def _exists(root: Path, base: str, name: str) -> bool:
    """`name` (a file, or a path ending in one) is in the folder `base` or below it, or is
    a path from the repository's root or from a folder above `base`."""
    top = root / base.split("/", 1)[0]
    if "/" not in name:
        return any(p.is_file() for p in (root / base).rglob(name))
    return (root / name).is_file() or any(
        str(p.relative_to(root)).endswith(name) for p in top.rglob(Path(name).name))


def test_the_map_matches_the_tree():
    assert problems(DOC.read_text()) == []


def test_the_check_can_fail(tmp_path):
    text = DOC.read_text()
    # a file the map names that is not there (and the one there, now unnamed)
    fake = problems(text.replace("(interface.py:", "(interfaces.py:"))
    assert "resources/model_server/: names interfaces.py, which is not there" in fake
    assert "resources/model_server/interface.py: not named in its folder's entry" in fake
    # a module of the tree the map does not name, a package without a line
    tree = _skeleton(tmp_path / "tree")
    (tree / "resources" / "model_server" / "helper.py").write_text("")
    (tree / "resources" / "new_room").mkdir()
    (tree / "resources" / "new_room" / "__init__.py").write_text("")
    got = problems(text, tree)
    assert "resources/model_server/helper.py: not named in its folder's entry" in got
    assert "resources/new_room/: no line in the map" in got


def _skeleton(root: Path) -> Path:
    """The repository's folders and file names (empty files): the tree the map describes."""
    for top in ("pipelines", "assets", "resources", "emulator", "sql", "tests/support",
                "benchmarks"):
        for p in (ROOT / top).rglob("*"):
            if "__pycache__" in p.parts:
                continue
            dest = root / p.relative_to(ROOT)
            if p.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text("")
    assert problems(DOC.read_text(), root) == []  # the copy is the tree, as the map has it
    return root
