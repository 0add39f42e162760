"""The run manifest (contract §2.1): strict JSON, unknown keys rejected, unknowns null.

Timestamps are RFC 3339 strings with nanoseconds and `Z` (resources/contract/timestamps.py).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from servingbench.resources.contract import durable
from servingbench.resources.contract.accelerators import ACCELERATORS
from servingbench.resources.contract.deployment import (
    Autoscaling,
    ModelSlot,
    PlanError,
    Replicas,
    Replicated,
    capacity_of,
)
from servingbench.resources.contract.schemas import PRICE_BASES, PRICE_SOURCES
from servingbench.resources.contract.timestamps import format_ts, parse_ts

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
# Keys a manifest may leave out (an older manifest without them reads as null): `workers`,
# written only by runs whose load came from several workers; the accelerator and its count
# per node; `sweep`, when the candidate is one combination of a sweep; the what-if
# `price_bases`; `import`, for a run imported from another tool.
OPTIONAL_KEYS = {"workers": "list", "accelerator": STR, "accelerators_per_node": INT,
                 "sweep": DICT, "price_bases": "list", "import": DICT,
                 # contract §2.1: several replicas and how their number changes (episodes),
                 # how the nodes were bought, several models on one node
                 "replicas": DICT, "autoscaling": DICT, "capacity": STR, "models": "list"}
SWEEP_KEYS = {"name": STR, "settings": DICT}
WORKER_KEYS = {"name": STR, "status": STR, "reason": STR}
WORKER_STATUSES = ("ok", "failed")
# contract §2.1/§4.1: the what-if prices looked up when the run was made
PRICE_BASIS_KEYS = {"basis": STR, "hourly_usd_per_node": FLOAT, "price_source": STR,
                    "retrieved_on": STR, "region": STR}
# A run imported from another benchmark tool's result (docs/import.md): which tool and
# version, the files read, whether the chunk times are the tool's own or rebuilt from its
# inter-token latencies, where its token counts came from, and what the import noticed.
IMPORT_KEYS = {"peer": STR, "peer_version": STR, "files": LIST_STR, "files_sha256": LIST_STR,
               "chunk_times": STR, "output_tokens": STR, "notes": LIST_STR}
IMPORT_CHUNK_TIMES = ("recorded", "reconstructed_from_itl", "first_and_last")
# contract §2.1: episodes (replicas, autoscaling, an arrival schedule), spot capacity and
# several models on one node; each checked when present, absent reads as null. The keys'
# types here; their rules (bounds, sets, defaults) are the deployment plan's
# (contract/deployment.py), read by the same `of` the candidates file is.
REPLICA_KEYS = dict.fromkeys(Replicas.KEYS, INT)
AUTOSCALING_KEYS = {k: STR if k in ("policy", "metric") else FLOAT for k in Autoscaling.KEYS}
MODEL_KEYS = {k: FLOAT if k.endswith("_share") else STR for k in ModelSlot.MANIFEST_KEYS}
SEGMENT_KEYS = {"duration_s": FLOAT, "rate": FLOAT}


class ManifestError(ValueError):
    """The manifest is missing, not JSON, or does not match contract §2.1."""


def _short(value: Any) -> str:
    """The offending value for a message, cut short (a hostile manifest can be large)."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = repr(type(value))
    return text if len(text) <= 80 else text[:77] + "..."


def _check(value: Any, kind: str, where: str) -> None:
    ok = {
        STR: lambda v: isinstance(v, str),
        INT: lambda v: isinstance(v, int) and not isinstance(v, bool),
        FLOAT: lambda v: isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v),
        BOOL: lambda v: isinstance(v, bool),
        LIST_STR: lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        DICT: lambda v: isinstance(v, dict),
        "list": lambda v: isinstance(v, list),
        TS: lambda v: isinstance(v, str),
    }[kind]
    if not ok(value):
        raise ManifestError(f"{where}: expected {kind}, got {_short(value)}")
    if kind == TS:
        try:
            parse_ts(value)
        except ValueError as exc:
            raise ManifestError(f"{where}: {exc}") from None


def _check_object(obj: dict, keys: dict[str, str], where: str, required: set[str],
                  optional: dict[str, str] | None = None) -> None:
    optional = optional or {}
    for key in obj:
        if key not in keys and key not in optional:
            raise ManifestError(f"{where}: unknown key {str(key)[:80]!r}")
    for key, kind in (keys | optional).items():
        if key not in obj and key in optional:
            continue
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
    _check_object(m, TOP_KEYS, where, NOT_NULL, OPTIONAL_KEYS)
    if not RUN_ID.fullmatch(m["run_id"]):
        raise ManifestError(f"{where}.run_id: {m['run_id']!r} does not match [A-Za-z0-9._-]{{1,128}}")
    if m["source"] not in SOURCES:
        raise ManifestError(f"{where}.source: {m['source']!r} is not one of {SOURCES}")
    if m["node_count"] is not None and m["node_count"] < 1:
        raise ManifestError(f"{where}.node_count: must be >= 1")
    if m["price_basis"] is not None:
        _check_object(m["price_basis"], PRICE_KEYS, f"{where}.price_basis", set())
    _check_accelerators(m, where)
    for name, span in m["phases"].items():
        if name not in PHASE_NAMES:
            raise ManifestError(f"{where}.phases: unknown phase {name[:80]!r}")
        _check(span, DICT, f"{where}.phases.{name}")
        _check_object(span, {"started_at": TS, "ended_at": TS}, f"{where}.phases.{name}", set())
    for i, step in enumerate(m["steps"]):
        _check(step, DICT, f"{where}.steps[{i}]")
        _check_object(step, STEP_KEYS, f"{where}.steps[{i}]", {"step", "client_limited"})
    for i, worker in enumerate(m.get("workers") or []):
        _check(worker, DICT, f"{where}.workers[{i}]")
        _check_object(worker, WORKER_KEYS, f"{where}.workers[{i}]", {"name", "status"})
        if worker["status"] not in WORKER_STATUSES:
            raise ManifestError(f"{where}.workers[{i}].status: {_short(worker['status'])} is not "
                                f"one of {WORKER_STATUSES}")
    _check_price_bases(m.get("price_bases") or [], f"{where}.price_bases")
    _check_episode(m, where)
    if m.get("import") is not None:
        imp = m["import"]
        _check_object(imp, IMPORT_KEYS, f"{where}.import",
                      {"peer", "files", "chunk_times", "output_tokens", "notes"})
        if imp["chunk_times"] not in IMPORT_CHUNK_TIMES:
            raise ManifestError(f"{where}.import.chunk_times: {_short(imp['chunk_times'])} is "
                                f"not one of {IMPORT_CHUNK_TIMES}")
    return m


def _check_accelerators(m: dict, where: str) -> None:
    if m.get("accelerator") is not None and m["accelerator"] not in ACCELERATORS:
        raise ManifestError(f"{where}.accelerator: {_short(m['accelerator'])} is not one of "
                            f"{', '.join(ACCELERATORS)}")
    if m.get("accelerators_per_node") is not None and m["accelerators_per_node"] < 1:
        raise ManifestError(f"{where}.accelerators_per_node: must be >= 1")
    if m.get("sweep") is not None:
        _check_object(m["sweep"], SWEEP_KEYS, f"{where}.sweep", {"name", "settings"})


def _check_episode(m: dict, where: str) -> None:
    """contract §2.1's episode keys: `replicas`, `autoscaling`, `capacity`, `models` and a
    schedule scenario's `segments` / `bucket_s` (the scenario's other keys are its kind's own)."""
    reps, scaling = m.get("replicas"), m.get("autoscaling")
    if reps is not None:
        _check_object(reps, REPLICA_KEYS, f"{where}.replicas", set(REPLICA_KEYS))
    if scaling is not None:
        _check_object(scaling, AUTOSCALING_KEYS, f"{where}.autoscaling", {"policy"})
    models = m.get("models")
    for i, model in enumerate(models or []):
        _check(model, DICT, f"{where}.models[{i}]")
        _check_object(model, MODEL_KEYS, f"{where}.models[{i}]", {"name", "placement"})
    try:
        capacity_of(m.get("capacity"), f"{where}.capacity")
        if reps is not None or scaling is not None:
            Replicated.of(reps, scaling, where=where, node_count=m["node_count"] or 1)
        if models:
            # each slot as the plan checks it; how many, and their request shares, are the
            # candidate's business (a record keeps what ran)
            ModelSlot.list_of(models, f"{where}.models")
    except PlanError as exc:
        raise ManifestError(str(exc)) from None
    scenario = m.get("scenario") or {}
    if scenario.get("segments") is not None:
        _check(scenario["segments"], "list", f"{where}.scenario.segments")
        for i, seg in enumerate(scenario["segments"]):
            at = f"{where}.scenario.segments[{i}]"
            _check(seg, DICT, at)
            _check_object(seg, SEGMENT_KEYS, at, set(SEGMENT_KEYS))
            if seg["duration_s"] < 0 or seg["rate"] < 0:
                raise ManifestError(f"{at}: duration_s and rate must be >= 0")
    if scenario.get("bucket_s") is not None:
        _check(scenario["bucket_s"], FLOAT, f"{where}.scenario.bucket_s")
        if scenario["bucket_s"] <= 0:
            raise ManifestError(f"{where}.scenario.bucket_s: must be > 0")


def _check_price_bases(bases: list, where: str) -> None:
    """Each entry a known basis from a known source at a positive hourly price; one entry per
    basis, so a what-if row is named by its step and basis."""
    seen: set[str] = set()
    for i, entry in enumerate(bases):
        at = f"{where}[{i}]"
        _check(entry, DICT, at)
        _check_object(entry, PRICE_BASIS_KEYS, at, {"basis", "hourly_usd_per_node", "price_source"})
        for key, allowed in (("basis", PRICE_BASES), ("price_source", PRICE_SOURCES)):
            if entry[key] not in allowed:
                raise ManifestError(f"{at}.{key}: {_short(entry[key])} is not one of {allowed}")
        if entry["hourly_usd_per_node"] <= 0:
            raise ManifestError(f"{at}.hourly_usd_per_node: must be > 0")
        if entry["basis"] in seen:
            raise ManifestError(f"{at}.basis: {entry['basis']!r} given twice")
        seen.add(entry["basis"])


MAX_BYTES = 16 << 20  # a manifest is a few KiB; a bigger file is not one
MAX_DEPTH = 32        # the deepest manifest nests 4 levels (phases.steady.started_at)


def _no_constant(name: str):
    raise ValueError(f"{name} is not strict JSON")


def _depth(text: str) -> int:
    """How deeply `text` nests arrays and objects, counted without recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def parse(data: bytes, where: str = "manifest") -> dict:
    """Decode and validate manifest bytes; any defect is a ManifestError naming `where`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{where}: not UTF-8 text (byte {exc.start})") from None
    if _depth(text) > MAX_DEPTH:
        raise ManifestError(f"{where}: nested more than {MAX_DEPTH} levels deep; not a manifest")
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, an integer too long to convert
        raise ManifestError(f"{where}: not valid JSON ({exc})") from None
    try:
        return validate(doc)
    except ManifestError as exc:
        raise ManifestError(f"{where}: {exc}") from None


def load(path: Path) -> dict:
    """Read and validate a manifest file; errors name the file and the key."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ManifestError(f"{path}: missing (every run folder has a manifest.json)") from None
    except IsADirectoryError:
        raise ManifestError(f"{path}: is a folder, expected the run's manifest file") from None
    except OSError as exc:
        raise ManifestError(f"{path}: unreadable ({exc.strerror or exc})") from None
    if len(data) > MAX_BYTES:
        raise ManifestError(f"{path}: larger than {MAX_BYTES:,} bytes; not a manifest")
    return parse(data, str(path))


def dump(m: dict, path: Path) -> None:
    """Validate, then write atomically and durably (resources/contract/durable.py)."""
    validate(m)
    durable.write_json(path, m)


def empty(run_id: str, source: str, created_at_ns: int) -> dict:
    """A manifest with every key present and every unknown value null."""
    m: dict[str, Any] = {key: None for key in TOP_KEYS}
    m.update(run_id=run_id, source=source, created_at=format_ts(created_at_ns),
             instance_ids=[], phases={}, steps=[])
    return m
