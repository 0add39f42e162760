"""Sweeps: a base candidate and a matrix over candidate keys, expanded into one candidate per
combination (contract §1 "sweep").

    sweeps:
      scout-p5:
        base: p5-scout-bf16-tp8            # a name from `candidates`, or a mapping of keys
        matrix:
          tensor_parallel: [4, 8]
          precision: [bf16, fp8]
          engine_args.max_num_seqs: [64, 256]
          scenario: [1k/1k, 1k/8k, 8k/1k]   # input/output shapes (1k = 1024 tokens)

A matrix key is a candidate key (`tensor_parallel`, `precision`, `engine`, ...) or one key of
a mapping-valued one (`engine_args.kv_cache_dtype`, `scenario.output_tokens`,
`llamacpp.threads`). Settings that only go together form a group: a key of your own whose
values are mappings of such keys, each with an `as` naming it:

          weights:
            - {as: q4, precision: q4_k_m, llamacpp.model_file: gemma-3-270m-q4_k_m.gguf}
            - {as: q8, precision: q8_0, llamacpp.model_file: gemma-3-270m-q8_0.gguf}
 Each combination gets a name derived from its settings alone
(`scout-p5-tp4-fp8-seqs64-1k8k`), so the same settings keep their name and their Dagster
partition from one run of the file to the next. Before anything is provisioned, every
combination goes through the pre-flight fit check (resources/cluster/fit.py) and the
engine's own settings: one that cannot run is listed as skipped with its reason, never
dropped in silence.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from servingbench.pipelines import config as cfgmod
from servingbench.pipelines import config_checks as checks
from servingbench.pipelines.config_checks import NAME, ConfigError
from servingbench.resources.contract.candidate import Candidate, field_default

SWEEP_KEYS = {"base", "matrix"}
# mappings whose keys are swept one by one (`scenario.input_tokens`); an autoscaled
# episode's settings among them (`autoscaling.target`, `replicas.min`): a sweep over them
# draws the cost-per-1M against SLO-attainment curve of the comparison
NESTED = ("engine_args", "scenario", "llamacpp", "load", "quality", "autoscaling", "replicas")
NOT_SWEPT = {"name", "pool"}
MAX_VALUES, MAX_COMBINATIONS = 64, 4096
# Across the whole file (its candidates and every sweep's combinations, runnable or skipped):
# each is a Dagster partition, built when the code location starts, and the number of
# sweeps is otherwise unbounded.
MAX_FILE_CANDIDATES = 8192
SHAPE = re.compile(r"(\d+)([kK]?)/(\d+)([kK]?)")  # 1k/8k: input/output tokens, k = 1024
# the order of the parts of a derived name, whatever the order of the matrix keys
ORDER = ("instance_type", "node_count", "engine", "tensor_parallel", "expert_parallel",
         "precision", "engine_args.max_num_seqs", "engine_args.max_num_batched_tokens",
         "engine_args.kv_cache_dtype", "engine_args.speculative", "max_model_len", "scenario",
         "scenario.input_tokens", "scenario.output_tokens", "llamacpp.model_file",
         "llamacpp.threads", "capacity", "replicas.min", "replicas.max", "autoscaling.metric",
         "autoscaling.target", "autoscaling.scale_up_cooldown_s",
         "autoscaling.scale_down_cooldown_s")


@dataclass(frozen=True)
class Skipped:
    name: str
    settings: dict
    reason: str


@dataclass(frozen=True)
class Sweep:
    name: str
    keys: tuple[str, ...]
    members: tuple[Candidate, ...]       # the combinations that can run, in matrix order
    skipped: tuple[Skipped, ...]
    fits: dict                           # member name -> the fit check's verdict text


def shape(value, where: str) -> dict:
    """`1k/8k` -> {input_tokens: 1024, output_tokens: 8192}."""
    m = SHAPE.fullmatch(value.strip()) if isinstance(value, str) else None
    if m is None:
        raise ConfigError(f"{where}: {checks.short(value)} is not a shape like 1k/1k or a "
                          "scenario mapping")
    size = [int(m[1]) * (1024 if m[2] else 1), int(m[3]) * (1024 if m[4] else 1)]
    return {"input_tokens": size[0], "output_tokens": size[1]}


def _part(key: str, value) -> str:
    """One piece of a derived name."""
    short = {"tensor_parallel": "tp", "node_count": "n", "max_model_len": "ctx",
             "engine_args.max_num_seqs": "seqs", "engine_args.max_num_batched_tokens": "mbt",
             "engine_args.kv_cache_dtype": "kv", "scenario.input_tokens": "in",
             "scenario.output_tokens": "out", "llamacpp.threads": "t",
             "llamacpp.parallel": "np", "replicas.min": "min", "replicas.max": "max",
             "autoscaling.target": "target", "autoscaling.scale_up_cooldown_s": "upcd",
             "autoscaling.scale_down_cooldown_s": "downcd"}
    if key == "expert_parallel":
        return "ep" if value else "noep"
    if key == "capacity":
        return str(value).replace("_", "-")
    if key == "engine_args.speculative":
        if not value:
            return "nospec"
        if isinstance(value, dict):  # the engine's own mapping: its method and draft length
            method = value.get("method") or value.get("algorithm") or ""
            n = value.get("num_speculative_tokens") or value.get("num_steps") or ""
            return f"spec-{str(method).lower()}{n}"
        return f"spec{value}"
    if key == "scenario":
        if isinstance(value, str):
            return value.replace("/", "").lower()
        return f"in{value.get('input_tokens')}-out{value.get('output_tokens')}"
    if key == "llamacpp.model_file":
        return Path(str(value)).name.removesuffix(".gguf")
    if key in short:
        return f"{short[key]}{value}"
    if isinstance(value, bool):
        return key.rsplit(".", 1)[-1] + ("" if value else "-off")
    if key in ("precision", "engine", "instance_type"):
        return str(value)
    return f"{key.rsplit('.', 1)[-1]}{value}"


def _is_group(values) -> bool:
    return isinstance(values, list) and bool(values) and all(isinstance(v, dict) for v in values)


def derived_name(sweep: str, settings: dict) -> str:
    """The sweep's name and one short part per setting, in a fixed key order; past 64
    characters cut and suffixed with a hash of the settings, so it stays unique and stable."""
    def group(k: str) -> bool:
        return k not in ORDER and isinstance(settings[k], dict) and "as" in settings[k]

    # a group first (it names what the combination is), then the keys in ORDER, then others
    keys = sorted(settings, key=lambda k: (-1 if group(k) else ORDER.index(k) if k in ORDER
                                           else len(ORDER), k))
    parts = [str(settings[k]["as"]) if group(k) else _part(k, settings[k]) for k in keys]
    text = "-".join([sweep] + parts)
    text = re.sub(r"[^A-Za-z0-9._-]+", "_", text)
    if len(text) <= 64:
        return text
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
    return f"{text[:55].rstrip('-_.')}-{digest}"


def _check_key(key, where: str) -> None:
    from servingbench.resources.model_server.engine_args import KEYS as ENGINE_ARGS

    allowed = [k for k in cfgmod._TYPES if k not in NOT_SWEPT]
    top, dot, sub = str(key).partition(".")
    if top not in allowed:
        raise checks.unknown(where, key, allowed + [f"engine_args.{k}" for k in ENGINE_ARGS])
    if dot and top not in NESTED:
        raise ConfigError(f"{where}.{key}: {top} is not a mapping; sweep it as `{top}`")
    if dot and top == "engine_args" and sub not in ENGINE_ARGS:
        raise checks.unknown(f"{where}.engine_args", sub, ENGINE_ARGS)


def _check_group(key: str, values: list, where: str) -> None:
    """A group: every value a mapping of matrix keys, with a distinct `as` for its name."""
    labels = []
    for i, value in enumerate(values):
        if not isinstance(value.get("as"), str) or not NAME.fullmatch(value["as"]):
            raise ConfigError(f"{where}.{key}[{i}].as: each value of a group needs a short "
                              "name (letters, digits, '.', '_' or '-')")
        labels.append(value["as"])
        for inner in value:
            if inner != "as":
                _check_key(inner, f"{where}.{key}[{i}]")
    if len(set(labels)) != len(labels):
        raise ConfigError(f"{where}.{key}: two values have the same `as`")


def _check_matrix(matrix, where: str) -> dict:
    if not isinstance(matrix, dict) or not matrix:
        raise ConfigError(f"{where}: expected a mapping of candidate keys to lists of values")
    allowed = {k for k in cfgmod._TYPES if k not in NOT_SWEPT}
    total = 1
    for key, values in matrix.items():
        if str(key).partition(".")[0] not in allowed and _is_group(values):
            if not isinstance(key, str) or not NAME.fullmatch(key):
                raise ConfigError(f"{where}.{str(key)[:80]}: a group's name is letters, digits, "
                                  "'.', '_' or '-'")
            _check_group(key, values, where)
        else:
            _check_key(key, where)
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}.{key}: expected a non-empty list of values, got "
                              f"{checks.short(values)}")
        if len(values) > MAX_VALUES:
            raise ConfigError(f"{where}.{key}: {len(values)} values, at most {MAX_VALUES}")
        seen = [json.dumps(v, sort_keys=True, default=str) for v in values]
        if len(set(seen)) != len(seen):
            raise ConfigError(f"{where}.{key}: a value appears twice")
        total *= len(values)
    if total > MAX_COMBINATIONS:
        raise ConfigError(f"{where}: {total:,} combinations, at most {MAX_COMBINATIONS:,}")
    return matrix


def _apply(raw: dict, defaults: dict, key: str, value, where: str) -> None:
    top, dot, sub = key.partition(".")
    if top == "scenario" and not dot and isinstance(value, str):
        value = {**copy.deepcopy(raw.get("scenario", defaults.get("scenario", {}))),
                 **shape(value, f"{where}.scenario")}
    if not dot:
        raw[top] = copy.deepcopy(value)
        return
    nested = copy.deepcopy(raw.get(top, defaults.get(top, {})))
    if not isinstance(nested, dict):
        raise ConfigError(f"{where}.{key}: the base's {top} is not a mapping")
    nested[sub] = copy.deepcopy(value)
    raw[top] = nested


def _cannot_run(raw: dict, defaults: dict) -> str | None:
    """What rules a combination out before it is even a candidate: an engine argument the
    engine has no setting for, a shape longer than the context. Malformed values pass here
    and are refused by the candidate's own validation."""
    from servingbench.resources.model_server import engine_args

    merged = {**defaults, **raw}
    engine = merged.get("engine", field_default(Candidate, "engine"))
    args = merged.get("engine_args") or {}
    if isinstance(args, dict) and isinstance(engine, str):
        missing = engine_args.unsupported(engine, args)
        if missing:
            return f"engine {engine} has no {missing[0]} setting"
    scenario = merged.get("scenario") or {}
    ctx = merged.get("max_model_len", field_default(Candidate, "max_model_len"))
    sizes = [scenario.get("input_tokens"), scenario.get("output_tokens")] if isinstance(
        scenario, dict) else []
    if len(sizes) == 2 and all(checks.is_int(v) for v in sizes) and checks.is_int(ctx):
        if sum(sizes) > ctx:
            return (f"input_tokens + output_tokens = {sum(sizes):,} does not fit "
                    f"max_model_len {ctx:,}")
    return None


def expand(name: str, body, candidates_raw: dict, defaults: dict, where: str,
           base_path: Path) -> Sweep:
    """One sweep of the file; raises ConfigError naming the key for bad YAML."""
    from servingbench.resources.cluster.fit import check

    where = f"{where}: sweeps.{name}"
    if not isinstance(name, str) or not NAME.fullmatch(name) or len(name) > 40:
        raise ConfigError(f"{where}: a sweep name is letters, digits, '.', '_' or '-' "
                          "(at most 40, leaving room for its settings)")
    checks.check_keys(body, SWEEP_KEYS, where)
    for key in sorted(SWEEP_KEYS - set(body)):
        raise ConfigError(f"{where}: missing key {key!r}")
    base = body["base"]
    if isinstance(base, str):
        if base not in candidates_raw:
            raise ConfigError(f"{where}.base: no candidate named {base!r}")
        base = candidates_raw[base]
    if not isinstance(base, dict):
        raise ConfigError(f"{where}.base: expected a candidate name or a mapping of its keys")
    base = {k: v for k, v in base.items() if k != "name"}
    matrix = _check_matrix(body["matrix"], f"{where}.matrix")
    # a sweep over capacity runs the base on-demand and on spot: its interruptions belong to
    # the spot members alone
    by_capacity = "capacity" in matrix and "interruptions" in {**defaults, **base}
    cfgmod._candidate({**base, "name": name, **({"capacity": "spot"} if by_capacity else {})},
                      defaults, f"{where}.base", base_path)
    allowed = {k for k in cfgmod._TYPES if k not in NOT_SWEPT}
    groups = {k for k in matrix if str(k).partition(".")[0] not in allowed}
    members, skipped, fits, names = [], [], {}, {}
    for combo in itertools.product(*matrix.values()):
        settings = dict(zip(matrix, combo, strict=True))
        raw = copy.deepcopy(base)
        for key, value in settings.items():
            if key in groups:
                for inner, v in value.items():
                    if inner != "as":
                        _apply(raw, defaults, inner, v, f"{where}.matrix.{key}")
            else:
                _apply(raw, defaults, key, value, f"{where}.matrix")
        member = derived_name(name, settings)
        if member in names:
            raise ConfigError(f"{where}.matrix: {names[member]} and {settings} get the same "
                              f"name {member!r}; give the values distinct names")
        names[member] = settings
        raw["name"] = member
        if by_capacity and settings["capacity"] != "spot":
            raw["interruptions"] = None
        why = _cannot_run(raw, defaults)
        if why is not None:
            skipped.append(Skipped(member, settings, why))
            continue
        cand = cfgmod._candidate(raw, defaults, f"{where}.matrix", base_path)
        fit = check(cand)
        if fit.fits is False:
            skipped.append(Skipped(member, settings, f"pre-flight fit check: {fit.message}"))
            continue
        fits[member] = fit.message
        members.append(replace(cand, sweep={"name": name, "settings": settings}))
    return Sweep(name, tuple(matrix), tuple(members), tuple(skipped), fits)
