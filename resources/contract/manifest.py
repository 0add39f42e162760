"""The run manifest (contract §2.1): strict JSON, unknown keys rejected, unknowns null.

Timestamps are RFC 3339 strings with nanoseconds and `Z` (resources/contract/timestamps.py).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from resources.contract.timestamps import format_ts, parse_ts

RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")
SOURCES = ("measured", "emulated")
PHASE_NAMES = (
    "provision", "deploy", "image_pull", "weights_load", "compile", "ready", "warmup", "steady",
)

STR, INT, FLOAT, BOOL, TS, LIST_STR, DICT = "string", "integer", "number", "boolean", "timestamp", "list of strings", "object"

TOP_KEYS: dict[str, str] = {
    "run_id": STR, "source": STR, "candidate": STR, "created_at": TS, "model": STR,
    "model_revision": STR, "precision": STR, "tensor_parallel": INT, "expert_parallel": BOOL,
    "max_model_len": INT, "engine": STR, "engine_version": STR, "image_digest": STR,
    "account_id": STR, "region": STR, "availability_zone": STR, "cluster_name": STR,
    "k8s_version": STR, "nodegroup": STR, "instance_type": STR, "node_count": INT,
    "instance_ids": LIST_STR, "driver_version": STR, "scenario": DICT, "price_basis": DICT,
    "phases": DICT, "steps": "list",
}
PRICE_KEYS = {"region": STR, "purchase_option": STR, "retrieved_on": STR, "source": STR,
              "hourly_usd_per_node": FLOAT}
STEP_KEYS = {"step": STR, "load_mode": STR, "target": FLOAT, "client_limited": BOOL,
             "client_cpu_share": FLOAT, "loop_lag_p99_s": FLOAT}
NOT_NULL = {"run_id", "source", "created_at", "instance_ids", "phases", "steps"}


class ManifestError(ValueError):
    """The manifest is missing, not JSON, or does not match contract §2.1."""


def _check(value: Any, kind: str, where: str) -> None:
    ok = {
        STR: lambda v: isinstance(v, str),
        INT: lambda v: isinstance(v, int) and not isinstance(v, bool),
        FLOAT: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        BOOL: lambda v: isinstance(v, bool),
        LIST_STR: lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        DICT: lambda v: isinstance(v, dict),
        "list": lambda v: isinstance(v, list),
        TS: lambda v: isinstance(v, str),
    }[kind]
    if not ok(value):
        raise ManifestError(f"{where}: expected {kind}, got {json.dumps(value)}")
    if kind == TS:
        try:
            parse_ts(value)
        except ValueError as exc:
            raise ManifestError(f"{where}: {exc}") from None


def _check_object(obj: dict, keys: dict[str, str], where: str, required: set[str]) -> None:
    for key in obj:
        if key not in keys:
            raise ManifestError(f"{where}: unknown key {key!r}")
    for key, kind in keys.items():
        if key not in obj:
            raise ManifestError(f"{where}: missing key {key!r} (use null when unknown)")
        if obj[key] is None:
            if key in required:
                raise ManifestError(f"{where}.{key}: must not be null")
            continue
        _check(obj[key], kind, f"{where}.{key}")


def validate(m: Any, where: str = "manifest") -> dict:
    """Raise ManifestError naming the key unless `m` is a valid contract §2.1 manifest."""
    if not isinstance(m, dict):
        raise ManifestError(f"{where}: expected a JSON object")
    _check_object(m, TOP_KEYS, where, NOT_NULL)
    if not RUN_ID.fullmatch(m["run_id"]):
        raise ManifestError(f"{where}.run_id: {m['run_id']!r} does not match [A-Za-z0-9._-]{{1,128}}")
    if m["source"] not in SOURCES:
        raise ManifestError(f"{where}.source: {m['source']!r} is not one of {SOURCES}")
    if m["node_count"] is not None and m["node_count"] < 1:
        raise ManifestError(f"{where}.node_count: must be >= 1")
    if m["price_basis"] is not None:
        _check_object(m["price_basis"], PRICE_KEYS, f"{where}.price_basis", set())
    for name, span in m["phases"].items():
        if name not in PHASE_NAMES:
            raise ManifestError(f"{where}.phases: unknown phase {name!r}")
        _check(span, DICT, f"{where}.phases.{name}")
        _check_object(span, {"started_at": TS, "ended_at": TS}, f"{where}.phases.{name}", set())
    for i, step in enumerate(m["steps"]):
        _check(step, DICT, f"{where}.steps[{i}]")
        _check_object(step, STEP_KEYS, f"{where}.steps[{i}]", {"step", "client_limited"})
    return m


def load(path: Path) -> dict:
    """Read and validate a manifest file; errors name the file and the key."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ManifestError(f"{path}: missing (every run folder has a manifest.json)") from None
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{path}: not valid JSON ({exc})") from None
    try:
        return validate(data)
    except ManifestError as exc:
        raise ManifestError(f"{path}: {exc}") from None


def dump(m: dict, path: Path) -> None:
    """Validate, then write atomically (write a temp file, fsync, rename)."""
    validate(m)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(m, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def empty(run_id: str, source: str, created_at_ns: int) -> dict:
    """A manifest with every key present and every unknown value null."""
    m: dict[str, Any] = {key: None for key in TOP_KEYS}
    m.update(run_id=run_id, source=source, created_at=format_ts(created_at_ns),
             instance_ids=[], phases={}, steps=[])
    return m
