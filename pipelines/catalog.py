"""The candidates file as the pipeline reads it: the file's own candidates (pipelines/config.py
validates each) and the combinations of its sweeps (pipelines/sweeps.py expands them), one
list whose names are unique, each candidate in its concurrency pool.

Everything that runs candidates asks here: the Dagster definitions (a sweep's combinations
are partitions too), the demo, `servingbench sweep`, `servingbench engine prepare`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from servingbench.pipelines import sweeps as sw
from servingbench.pipelines.config import (
    _TYPES,
    DEFAULT_FILE,
    ConfigError,
    assign_pools,
)
from servingbench.pipelines.config import _candidate as candidate
from servingbench.pipelines.config import _read_yaml as read_yaml
from servingbench.pipelines.config_checks import check_keys
from servingbench.pipelines.sweeps import Sweep, expand
from servingbench.resources.contract import yamltext
from servingbench.resources.contract.candidate import Candidate


def duplicates(names: list[str]) -> list[str]:
    """The names given more than once, sorted; one pass (a count per name was quadratic)."""
    seen: set[str] = set()
    dupes: set[str] = set()
    for n in names:
        (dupes if n in seen else seen).add(n)
    return sorted(dupes)


def load_candidates(path: Path | str = DEFAULT_FILE) -> list[Candidate]:
    """Read and validate a candidates file; raise ConfigError naming the key on any problem.
    The file's candidates first, then every sweep's combinations that can run. A relative
    path in the file (a price sheet, a trace, a quality dataset) is from the file's folder,
    wherever the file is."""
    candidates, sweeps = load_file(path)
    return candidates + [m for s in sweeps for m in s.members]


def load_sweeps(path: Path | str = DEFAULT_FILE) -> list[Sweep]:
    """The file's sweeps (pipelines/sweeps.py), each with its members and its skips."""
    return load_file(path)[1]


def load_file(path: Path | str = DEFAULT_FILE) -> tuple[list[Candidate], list[Sweep]]:
    path = Path(path)
    doc = read_yaml(path, f"{path}: not found")
    where = path.name
    check_keys(doc, {"defaults", "candidates", "pools", "sweeps"}, where)
    defaults = doc.get("defaults") or {}
    check_keys(defaults, _TYPES, f"{where}: defaults")
    raw = doc.get("candidates")
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}.candidates: expected a non-empty list")
    base = path.resolve().parent  # every relative path in the file is from its own folder
    out = [candidate(c, defaults, f"{where}: candidates[{i}]", base) for i, c in enumerate(raw)]
    raw_sweeps = doc.get("sweeps") or {}
    if not isinstance(raw_sweeps, dict):
        raise ConfigError(f"{where}.sweeps: expected a mapping of sweep name to {{base, matrix}}")
    by_name = {c.get("name"): c for c in raw if isinstance(c, dict)}
    sweeps, total = [], len(out)
    for name, body in raw_sweeps.items():  # expanded one at a time: the cap stops it early
        sweep = expand(name, body, by_name, defaults, where, base)
        total += len(sweep.members) + len(sweep.skipped)
        if total > sw.MAX_FILE_CANDIDATES:
            raise ConfigError(f"{where}: more than {sw.MAX_FILE_CANDIDATES:,} candidates across "
                              f"the file and its sweeps (reached at sweep "
                              f"{yamltext.short(str(name))!r}); each is a partition")
        sweeps.append(sweep)
    every = out + [m for s in sweeps for m in s.members]
    dupes = duplicates([c.name for c in every] + [k.name for s in sweeps for k in s.skipped])
    if dupes:
        raise ConfigError(f"{where}.candidates: duplicate name {dupes[0]!r}")
    runnable = {c.name for c in every}
    for i, c in enumerate(every):
        ref = c.quality.reference if c.quality else None
        if ref is not None and ref not in runnable:
            where_c = f"candidates[{i}]" if i < len(out) else f"sweeps.{c.sweep['name']}"
            raise ConfigError(f"{where}: {where_c}.quality.reference: no candidate "
                              f"named {ref!r}")
    pooled = assign_pools(every, doc.get("pools"), where)
    by = {c.name: c for c in pooled}
    sweeps = [replace(s, members=tuple(by[m.name] for m in s.members)) for s in sweeps]
    return pooled[:len(out)], sweeps
