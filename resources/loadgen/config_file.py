"""A LoadConfig as a JSON file, and back: how a load run's configuration travels to a
process that did not build it (a load pod reads the file the pipeline wrote to the run's
S3 prefix), instead of being turned into flags and parsed again.

Every field of LoadConfig is written, so the file says all a run was asked for; reading
it is strict (an unknown key is an error naming the file and the key) and ends in
LoadConfig's own validation. A scenario is written as the mapping a candidate's
`scenario:` would be and read back through `scenarios/spec.py`, so any kind (and any key a
kind adds) passes through without this module knowing it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from servingbench.resources.contract import durable
from servingbench.resources.loadgen.config import LoadConfig
from servingbench.resources.loadgen.errors import LoadConfigError
from servingbench.resources.loadgen.ladder import Ladder
from servingbench.resources.loadgen.scenarios.spec import COMMON, KEYS, from_mapping, suggest

CONFIG_FILE = "load_config.json"  # its name in a run folder and under a run's S3 prefix
_FIELDS = tuple(f.name for f in dataclasses.fields(LoadConfig))


def _plain(value):
    """JSON's view of a field value: paths as text, tuples as lists."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def scenario_mapping(scenario) -> dict:
    """The scenario as a candidate's `scenario:` mapping: its kind and the keys its kind takes
    (the token targets are the config's own fields)."""
    keys = [k for k in KEYS[scenario.kind] if k not in COMMON]
    return {"kind": scenario.kind, **{k: _plain(getattr(scenario, k)) for k in keys}}


def to_dict(cfg: LoadConfig) -> dict:
    out = {}
    for name in _FIELDS:
        value = getattr(cfg, name)
        if name == "scenario" and value is not None:
            value = scenario_mapping(value)
        elif name == "ladder" and value is not None:
            value = dataclasses.asdict(value)
        out[name] = _plain(value)
    return out


def from_dict(data: dict, where: str = CONFIG_FILE) -> LoadConfig:
    """LoadConfigError names `where` and the key for anything that is not a load config."""
    if not isinstance(data, dict):
        raise LoadConfigError(f"{where}: expected a JSON object, got {type(data).__name__}")
    for key in data:
        if key not in _FIELDS:
            raise LoadConfigError(f"{where}.{key}: unknown key" + suggest(key, _FIELDS))
    kw = dict(data)
    if kw.get("scenario") is not None:
        kw["scenario"], _ = from_mapping(kw["scenario"], f"{where}.scenario")
    if kw.get("ladder") is not None:
        try:
            kw["ladder"] = Ladder(**kw["ladder"])
        except TypeError as exc:
            raise LoadConfigError(f"{where}.ladder: {exc}") from None
    if kw.get("dataset") is not None:
        kw["dataset"] = Path(kw["dataset"])
    try:
        if "image_size" in kw:
            kw["image_size"] = tuple(kw["image_size"])
        return LoadConfig(**kw)
    except LoadConfigError as exc:
        raise LoadConfigError(f"{where}: {exc}") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise LoadConfigError(f"{where}: not a load config ({exc})") from None


def write(cfg: LoadConfig, path: Path) -> Path:
    return durable.write_json(path, to_dict(cfg), indent=1)


def read(path: Path) -> LoadConfig:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise LoadConfigError(f"{path}: cannot read the load config ({exc.strerror or exc})") from None
    except ValueError:
        raise LoadConfigError(f"{path}: not JSON") from None
    return from_dict(data, str(path))
