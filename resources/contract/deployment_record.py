"""`deployment.json` in a run folder: what the model server started, as it started it (the
endpoint, whether it was emulated, the engine's process, arguments and host, the replicas
and their balancer, the models and their swap driver). Descriptive: the analysis reads the
manifest and the records, never this file; a person or a test reads it to see what ran.

Every model server writes it through `write` (the keys below, each of its type, unknown keys
refused, written atomically and durably) and it is read back through `read`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servingbench.resources.contract import durable

FILE = "deployment.json"
_STR, _INT, _BOOL, _DICT, _LIST, _NONE = str, int, bool, dict, list, type(None)
# key -> the types its value may take
KEYS: dict[str, tuple[type, ...]] = {
    "endpoint": (_STR,),                    # the base URL the load generator drove
    "emulated": (_BOOL,),
    "engine": (_STR,),                      # a real engine's name and version
    "engine_version": (_STR, _NONE),
    "pid": (_INT, _NONE),                   # the one server process (a single deployment)
    "port": (_INT, _NONE),
    "host": (_DICT,),                       # this host's facts (the real local engine)
    "config": (_DICT, _NONE),               # the emulator's configuration (per model: by name)
    "engine_args": (_DICT,),                # the swept engine settings, by their common name
    "engine_args_not_modelled": (_LIST,),   # those the emulator runs as if unset
    "args": (_LIST,),                       # the engine launcher's arguments
    "model_file": (_STR,), "model_sha256": (_STR,),
    "model_dir": (_STR,),                   # a model that is a folder (vLLM's tiny Llama)
    "load_format": (_STR,),                 # how its weights were loaded (vLLM's `dummy`)
    "threads": (_STR, _INT), "parallel": (_INT,), "nice": (_INT,),
    "balancer": (_STR,),                    # several replicas: what balances them
    "replicas": (_DICT,), "autoscaling": (_DICT, _NONE), "capacity": (_STR, _NONE),
    "interruptions": (_DICT, _NONE),
    "replica_starts": (_DICT,),             # every replica's start-up markers, by name
    "models": (_LIST,),                     # several models: each slot as planned
    "swap_driver": (_BOOL,),                # whether the swap driver fronted them
}
REQUIRED = ("endpoint", "emulated")
MAX_BYTES = 16 << 20


class DeploymentRecordError(ValueError):
    """deployment.json does not match its keys; the message names the key."""


def check(doc: Any, where: str = FILE) -> dict:
    if not isinstance(doc, dict):
        raise DeploymentRecordError(f"{where}: expected a JSON object")
    for key, value in doc.items():
        if key not in KEYS:
            raise DeploymentRecordError(f"{where}.{str(key)[:80]}: unknown key")
        kinds = KEYS[key]
        if not isinstance(value, kinds) or (isinstance(value, bool) and _BOOL not in kinds):
            raise DeploymentRecordError(f"{where}.{key}: expected "
                                        f"{' or '.join(k.__name__ for k in kinds)}, got "
                                        f"{type(value).__name__}")
    for key in REQUIRED:
        if key not in doc:
            raise DeploymentRecordError(f"{where}: missing key {key!r}")
    return doc


def write(run_dir: Path, doc: dict) -> None:
    """Check, then write atomically and durably (contract/durable.py)."""
    durable.write_json(Path(run_dir) / FILE, check(doc))


def read(run_dir: Path) -> dict | None:
    """The run's deployment.json, checked; None when the run has none (an imported run)."""
    path = Path(run_dir) / FILE
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DeploymentRecordError(f"{path}: unreadable ({exc.strerror or exc})") from None
    if len(data) > MAX_BYTES:
        raise DeploymentRecordError(f"{path}: larger than {MAX_BYTES:,} bytes")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise DeploymentRecordError(f"{path}: not valid JSON ({exc})") from None
    return check(doc, str(path))


def fidelity(run_dir: Path) -> dict | None:
    """The error band the emulator recorded for the run (its status's `fidelity`: the
    cross-validated error of its accelerator and engine against published measurements),
    the widest of its models' for several models; None for a run without one (a measured
    run, an imported one, an unreadable record)."""
    try:
        doc = read(run_dir)
    except DeploymentRecordError:
        return None
    config = (doc or {}).get("config") or {}
    found = [config["fidelity"]] if isinstance(config.get("fidelity"), dict) else [
        v["fidelity"] for v in config.values()
        if isinstance(v, dict) and isinstance(v.get("fidelity"), dict)]
    if not found:
        return None
    # an uncalibrated model's band is the widest: no number to hold its figures to
    return max(found, key=lambda b: band_fraction(b) if band_fraction(b) is not None else 9)


def band_fraction(band: dict | None) -> float | None:
    """A recorded band's relative error (its `mape`); None: no band, or uncalibrated."""
    mape = None if band is None else band.get("mape")
    return float(mape) if isinstance(mape, (int, float)) else None
