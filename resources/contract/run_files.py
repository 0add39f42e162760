"""The run folder's small files as every room reads them: one reader (and where the contract
has one, one writer) per file, with one strictness, and the facts computed from them once.

    gates.json      read_gates / write_gates; `accepted`: every gate passed or not run
    episode.json    read_episode (contract §3.7)
    events.parquet  read_events (contract §2.6), the rows of one run
    deployment.json deployment_record.py

and `latest`, the newest run of each group (by created_at, then run_id), which the frontier's
levels, the spot pairs and the comparison report pick their runs with. A malformed file is a
RunFileError naming the file and the key; the caller says what that means (the report stops,
the analysis gates the run again, a pair leaves the run out). Imports nothing of servingbench
but the contract.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from servingbench.resources.contract import durable
from servingbench.resources.contract.outputs import EPISODE_KEYS, GATE_KEYS
from servingbench.resources.contract.schemas import EVENTS, SchemaError, read_file

GATES, EPISODE, EVENTS_FILE = "gates.json", "episode.json", "events.parquet"
MAX_JSON_BYTES = 16 << 20  # each of these files is a few KiB; more is not one


class RunFileError(ValueError):
    """A run folder's file is not what the contract says; the message names it and the key."""


def _json(path: Path) -> Any:
    """The file's JSON; None when it is absent."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RunFileError(f"{path}: unreadable ({exc.strerror or exc})") from None
    if len(data) > MAX_JSON_BYTES:
        raise RunFileError(f"{path}: larger than {MAX_JSON_BYTES:,} bytes")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise RunFileError(f"{path}: not valid JSON ({exc})") from None


def read_gates(run_dir: Path) -> list[dict] | None:
    """gates.json (contract §5): a list of gates, each with every key, `passed` true, false
    or null, `examples` a list or null; None when the analysis has not gated the run."""
    path = Path(run_dir) / GATES
    gates = _json(path)
    if gates is None:
        return None
    if not isinstance(gates, list) or not all(isinstance(g, dict) for g in gates):
        raise RunFileError(f"{path}: expected a list of gate objects")
    for i, gate in enumerate(gates):
        missing = [k for k in GATE_KEYS if k not in gate]
        if missing:
            raise RunFileError(f"{path}: gate [{i}] lacks key {missing[0]!r}")
        extra = [k for k in gate if k not in GATE_KEYS]
        if extra:
            raise RunFileError(f"{path}: gate [{i}] has an unknown key {str(extra[0])[:80]!r}")
        if gate["passed"] not in (True, False, None) or isinstance(gate["passed"], int) \
                and not isinstance(gate["passed"], bool):
            raise RunFileError(f"{path}: gate [{i}] 'passed' must be true, false or null")
        if not isinstance(gate["examples"], list | type(None)):
            raise RunFileError(f"{path}: gate [{i}] 'examples' must be a list")
    return gates


def write_gates(run_dir: Path, gates: list[dict]) -> None:
    """Write gates.json atomically and durably, in the reader's form."""
    for i, gate in enumerate(gates):
        if set(gate) != set(GATE_KEYS):
            raise ValueError(f"gate [{i}]: keys {sorted(gate)} are not {list(GATE_KEYS)}")
    durable.write_json(Path(run_dir) / GATES, list(gates))


def accepted(gates: list[dict] | None) -> bool | None:
    """Whether a run's gates accept it: at least one gate and none failed (a gate not run,
    passed null, does not reject); None when it was not gated."""
    if gates is None:
        return None
    return bool(gates) and all(g["passed"] is not False for g in gates)


def read_episode(run_dir: Path) -> dict | None:
    """episode.json (contract §3.7): every key of EPISODE_KEYS; None when the run has none."""
    path = Path(run_dir) / EPISODE
    doc = _json(path)
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise RunFileError(f"{path}: expected an object")
    missing = [k for k in EPISODE_KEYS if k not in doc]
    if missing:
        raise RunFileError(f"{path}: lacks key {missing[0]!r}")
    return doc


def read_events(run_dir: Path, run_id: str | None = None) -> pa.Table | None:
    """events.parquet checked against contract §2.6 (SchemaError naming it otherwise), the
    rows of `run_id` only when given (another run's rows fail rule 3 and are never used);
    None when the run has no events."""
    path = Path(run_dir) / EVENTS_FILE
    if not path.exists():
        return None
    if not path.is_file():
        raise SchemaError(f"{path}: expected a file, found a folder or special file")
    table = read_file(path, "events")
    if run_id is not None:
        table = table.filter(pc.equal(table["run_id"], run_id))
    return table.cast(EVENTS) if table.schema != EVENTS else table


R = TypeVar("R")


def latest(runs: Iterable[R], group: Callable[[R], Hashable],
           order: Callable[[R], tuple]) -> dict[Hashable, R]:
    """The newest run of each group: the greatest `order(run)` (created_at, then run_id)."""
    best: dict[Hashable, R] = {}
    for run in runs:
        g = group(run)
        if g not in best or order(run) > order(best[g]):
            best[g] = run
    return best
