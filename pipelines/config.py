"""The candidates file (pipelines/candidates.yaml) and the price sheet, validated strictly.

Unknown keys and bad values raise ConfigError naming the file and the key, e.g.
`candidates.yaml: candidates[2].precison: unknown key (did you mean 'precision'?)`.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from servingbench.pipelines import candidate_plans as plans
from servingbench.pipelines.config_checks import (  # ConfigError: every caller imports it here
    MAXIMA,
    NAME,
    ConfigError,
    at_most,
    check_keys,
    is_int,
    is_number,
    short,
)
from servingbench.resources.billing.price_bases import sheet_bases
from servingbench.resources.contract import yamltext
from servingbench.resources.contract.candidate import (
    Candidate,
    PriceBasis,
    field_default,
)
from servingbench.resources.contract.deployment import PlanError, capacity_of, plan_of
from servingbench.resources.contract.precisions import PRECISIONS
from servingbench.resources.contract.schemas import PRICE_BASES
from servingbench.resources.model_server import engines

REPO = Path(__file__).resolve().parents[1]
DEFAULT_FILE = REPO / "pipelines" / "candidates.yaml"
# An EC2 instance type (family.size, e.g. p5.48xlarge, u-6tb1.metal): it becomes a node
# group's instance type, a bill filter and part of a folder name, so never a `/` or a space.
INSTANCE_TYPE = re.compile(r"[a-z][a-z0-9-]{0,30}\.[a-z0-9-]{1,30}")
# A model id, revision or dataset id: it is handed to an engine as an argument, so it may
# not start with `-` (it would become a flag) nor hold spaces or control characters.
ARGUMENT = re.compile(r"[A-Za-z0-9_.:@+][A-Za-z0-9_.:@+/-]{0,255}")
DATASET = re.compile(r"[A-Za-z0-9_.:@+/][A-Za-z0-9_.:@+/-]{0,1023}")  # an id or a file path
# The longest a benchmark run may take (its Dagster job's `dagster/max_runtime`, schedules.py):
# a schedule that cannot end inside it, with an hour left for provisioning, rollout,
# warm-up and teardown, would hold its nodes until it is stopped.
BENCHMARK_MAX_RUNTIME_S = 6 * 3600
MAX_SCHEDULE_IN_A_RUN_S = BENCHMARK_MAX_RUNTIME_S - 3600
REAL_FILE = REPO / "pipelines" / "candidates_real.yaml"
# Every engine has its file in resources/model_server/engines/ (llama.cpp: the real local
# engine, llama-cpp-python's server on this host, `make engine`).
ENGINES = engines.names()


class _ScenarioKinds:
    """What `scenario` must be, naming the workload kinds their files declare
    (scenarios/spec.KINDS), read when a message needs them: no list of kinds is kept here."""

    def __str__(self) -> str:
        from servingbench.resources.loadgen.scenarios.spec import KINDS

        return f"a mapping: kind ({', '.join(KINDS)}) and its keys"


# key -> (type check, description)
_TYPES: dict[str, tuple[Any, object]] = {
    "name": (str, "a name of letters, digits, '.', '_' or '-'"),
    "instance_type": (str, "an EC2 instance type, e.g. p5.48xlarge"),
    "model": (str, "a model id, e.g. meta-llama/Llama-4-Scout-17B-16E-Instruct"),
    "precision": (str, f"one of {', '.join(PRECISIONS)}"),
    "tensor_parallel": (int, "a positive integer"),
    "node_count": (int, "a positive integer"),
    "model_revision": ((str, type(None)), "a revision string or null"),
    "expert_parallel": (bool, "true or false"),
    "engine": (str, f"one of {', '.join(ENGINES)}"),
    "image_digest": ((str, type(None)), "an image reference pinned by digest, or null"),
    "max_model_len": (int, "a positive integer"),
    "scenario": (dict, _ScenarioKinds()),
    "load": (dict, "a mapping with concurrency, rates, requests_per_step, warmup_requests, workers"),
    "price": (dict, "a mapping with region, purchase_option, sheet"),
    "pool": ((str, type(None)), "a name from `pools` (default: the instance family, e.g. p5)"),
    "llamacpp": (dict, "a mapping with model_file, threads, parallel, requantize_from"),
    "quality": (dict, "a mapping with reference, margin, items, seed, dataset, max_tokens"),
    "speculative": (dict, "a mapping with method (eagle3, eagle, ngram, mtp), draft_tokens, "
                    "draft_model, acceptance"),
    "reasoning": (dict, "a mapping with parser (the engine's reasoning parser) and "
                  "emulated_tokens (N or [LO, HI])"),
    "engine_args": (dict, "a mapping with max_num_seqs, max_num_batched_tokens, kv_cache_dtype, "
                          "speculative"),
    "replicas": (dict, "a mapping with min, max, initial"),
    "autoscaling": (dict, "a mapping with policy, metric, target, activation_target, "
                    "scale_up_cooldown_s, scale_down_cooldown_s"),
    "capacity": (str, "on_demand or spot"),
    "interruptions": ((dict, type(None)), "a mapping {at: [s, ...]} or {rate_per_hour, seed}, "
                      "and notice_s"),
    "models": (list, "a list of {name, model, precision, placement, memory_share, "
                     "request_share, sleep_level}"),
    "model_bursts": ((int, type(None)), "a positive integer (requests per burst) or null"),
}
# the keys resources/contract/deployment.py reads into the candidate's deployment plan
_PLAN_KEYS = ("replicas", "autoscaling", "interruptions", "models", "model_bursts")
_PRICE_KEYS = {"region", "purchase_option", "sheet"}


def _check_scenario(scenario, base: Path, where: str) -> None:
    """Any workload of docs/workloads.md, checked by the load generator's own rules; a trace
    path is relative to the candidates file."""
    from servingbench.resources.loadgen.errors import LoadConfigError
    from servingbench.resources.loadgen.scenarios.spec import from_mapping

    if isinstance(scenario, dict) and isinstance(scenario.get("trace"), str):
        scenario["trace"] = str(base / scenario["trace"])
    if isinstance(scenario, dict) and isinstance(scenario.get("day_csv"), str):
        scenario["day_csv"] = str(base / scenario["day_csv"])
    try:
        parsed, _ = from_mapping(scenario, where)
    except LoadConfigError as exc:
        raise ConfigError(str(exc)) from None
    if parsed.kind == "schedule":
        length = sum(g["duration_s"] for g in parsed.segments)
        if length > MAX_SCHEDULE_IN_A_RUN_S:
            key = ("segments" if scenario.get("segments") is not None
                   else "compress" if scenario.get("shape") == "day" else "length_s")
            raise ConfigError(f"{where}.{key}: the schedule lasts {length:,.0f} s; a benchmark run "
                              f"stops at its max runtime ({BENCHMARK_MAX_RUNTIME_S:,} s), "
                              f"so at most {MAX_SCHEDULE_IN_A_RUN_S:,} s of it may be load")


def _one_worker(kind) -> bool:
    from servingbench.resources.loadgen.scenarios.spec import one_worker

    return isinstance(kind, str) and one_worker(kind)


MAX_YAML_BYTES = 1 << 20  # a candidates file or price sheet is a few KiB


def _read_yaml(path: Path, missing: str):
    """Parse a YAML file; every way it can be unreadable is a ConfigError naming it."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_YAML_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(missing) from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, expected a YAML file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: unreadable ({exc.strerror or exc})") from None
    if len(data) > MAX_YAML_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_YAML_BYTES:,} bytes; not a config file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:  # no anchors or aliases: a few hundred bytes of them expand to gigabytes
        return yamltext.load(text)
    except yamltext.YamlError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _check_prices(prices, path: Path, key: str) -> None:
    if not isinstance(prices, dict) or not all(
            isinstance(k, str) and INSTANCE_TYPE.fullmatch(k) and is_number(v) and 0 < v
            <= MAXIMA["hourly_usd_per_node"] for k, v in prices.items()):
        raise ConfigError(f"{path}: {key} must map instance types to finite "
                          f"positive prices (at most {MAXIMA['hourly_usd_per_node']:,})")


def load_price_sheet(path: Path, where: str) -> dict:
    sheet = _read_yaml(path, f"{where}: price sheet {path} not found")
    check_keys(sheet, {"region", "purchase_option", "retrieved_on", "hourly_usd_per_node",
                        "price_bases"}, str(Path(path).name))
    _check_prices(sheet.get("hourly_usd_per_node"), path, "hourly_usd_per_node")
    bases = sheet.get("price_bases") or {}
    check_keys(bases, PRICE_BASES, f"{Path(path).name}: price_bases")
    for basis, prices in bases.items():
        _check_prices(prices, path, f"price_bases.{basis}")
    for key in ("region", "purchase_option"):
        if key in sheet and not isinstance(sheet[key], str):
            raise ConfigError(f"{path}: {key}: expected a string, got {short(sheet[key])}")
    return sheet


def _check_sizes(scenario: dict, max_model_len: int, where: str) -> None:
    """The token targets in range: positive, below the maxima, and a prompt plus its output
    that fits the context (the keys and kinds are _check_scenario's business)."""
    for key in ("input_tokens", "output_tokens"):
        if key not in scenario:
            continue
        value = scenario.get(key)
        if value is None:
            continue  # not set: a dataset or trace brings its own lengths
        if not is_int(value) or value < 1:
            raise ConfigError(f"{where}.{key}: expected a positive integer, got {short(value)}")
        at_most(value, key, f"{where}.{key}")
    if is_int(scenario.get("input_tokens")) and is_int(scenario.get("output_tokens")):
        total = scenario["input_tokens"] + scenario["output_tokens"]
        if total > max_model_len:
            raise ConfigError(f"{where}: input_tokens + output_tokens = {total:,} does not fit "
                              f"max_model_len {max_model_len:,}")
    if scenario.get("kind") == "agentic":
        from servingbench.resources.loadgen.scenarios.spec import default

        context = scenario.get("max_context_tokens", default("agentic", "max_context_tokens"))
        if is_int(context) and context > max_model_len:
            raise ConfigError(f"{where}.max_context_tokens: {context:,} does not fit "
                              f"max_model_len {max_model_len:,} (a session would be refused "
                              "before it ends)")
    dataset = scenario.get("dataset")
    if dataset is not None and not (isinstance(dataset, str) and DATASET.fullmatch(dataset)):
        raise ConfigError(f"{where}.dataset: expected null or a dataset id, got {short(dataset)}")


def _candidate(raw: dict, defaults: dict, where: str, base: Path) -> Candidate:
    check_keys(raw, _TYPES, where)
    merged = {**defaults, **raw}
    for key, (kind, what) in _TYPES.items():
        if key in merged and not isinstance(merged[key], kind) or (
                kind is int and isinstance(merged.get(key), bool)):
            raise ConfigError(f"{where}.{key}: expected {what}, got {short(merged[key])}")
    for key in ("name", "instance_type", "model", "precision", "tensor_parallel"):
        if key not in merged:
            raise ConfigError(f"{where}: missing key {key!r}")
    if not NAME.fullmatch(merged["name"]):
        raise ConfigError(f"{where}.name: {short(merged['name'])} is not {_TYPES['name'][1]}")
    if not INSTANCE_TYPE.fullmatch(merged["instance_type"]):
        raise ConfigError(f"{where}.instance_type: {short(merged['instance_type'])} is not "
                          f"{_TYPES['instance_type'][1]}")
    for key in ("model", "model_revision"):
        if merged.get(key) is not None and not ARGUMENT.fullmatch(merged[key]):
            raise ConfigError(f"{where}.{key}: {short(merged[key])} is not a model id (letters, "
                              "digits, '._:@+/-', not starting with '-' or '/')")
    if merged.get("image_digest") is not None and not re.fullmatch(r"\S{1,512}",
                                                                    merged["image_digest"]):
        raise ConfigError(f"{where}.image_digest: {short(merged['image_digest'])} is not an "
                          "image reference")
    if merged["precision"] not in PRECISIONS:
        raise ConfigError(f"{where}.precision: {merged['precision']!r} is not one of {PRECISIONS}")
    if merged.get("engine", field_default(Candidate, "engine")) not in ENGINES:
        raise ConfigError(f"{where}.engine: {merged['engine']!r} is not one of {ENGINES}")
    for key in ("tensor_parallel", "node_count", "max_model_len"):
        if key in merged and merged[key] < 1:
            raise ConfigError(f"{where}.{key}: must be >= 1")
        if key in merged:
            at_most(merged[key], key, f"{where}.{key}")
    scenario = merged.get("scenario", field_default(Candidate, "scenario"))
    _check_scenario(scenario, base, f"{where}.scenario")
    _check_sizes(scenario, merged.get("max_model_len", field_default(Candidate, "max_model_len")),
                 f"{where}.scenario")
    price = merged.pop("price", None)
    basis = None
    if price is not None:
        check_keys(price, _PRICE_KEYS, f"{where}.price")
        for key in _PRICE_KEYS:
            if key in price and not isinstance(price[key], str):
                raise ConfigError(f"{where}.price.{key}: expected a string, got {short(price[key])}")
        sheet = load_price_sheet(base / price["sheet"], f"{where}.price.sheet") if "sheet" in price else {}
        hourly = (sheet.get("hourly_usd_per_node") or {}).get(merged["instance_type"])
        option = price.get("purchase_option", sheet.get("purchase_option"))
        if merged.get("capacity") == "spot":
            # a spot run is billed at the sheet's spot price (its what-if spot basis): the
            # sheet's figure, as unverified as its on-demand one
            hourly = ((sheet.get("price_bases") or {}).get("spot") or {}).get(
                merged["instance_type"]) if sheet else None
            option = "spot"
            if sheet and hourly is None:
                raise ConfigError(f"{where}.capacity: spot, but the price sheet "
                                  f"{price['sheet']} has no price_bases.spot price for "
                                  f"{merged['instance_type']}")
        basis = PriceBasis(
            region=price.get("region", sheet.get("region")), purchase_option=option,
            retrieved_on=str(sheet.get("retrieved_on")), source="price_sheet",
            hourly_usd_per_node=hourly, bases=tuple(sheet_bases(sheet, merged["instance_type"])))
    load = plans.load_plan(merged.pop("load", {}), f"{where}.load")
    if load.workers > 1 and isinstance(scenario, dict) and _one_worker(scenario.get("kind")):
        raise ConfigError(f"{where}.load.workers: scenario {scenario['kind']} runs with one worker "
                          f"only (got {load.workers})")
    if load.ladder is not None and isinstance(scenario, dict) and scenario.get("kind", "fixed") != "fixed":
        raise ConfigError(f"{where}.load.ladder: goes with the fixed scenario, not "
                          f"{scenario['kind']}")
    try:
        merged["capacity"] = capacity_of(merged.get("capacity"), f"{where}.capacity")
        deployment = plan_of(merged, where)
    except PlanError as exc:
        raise ConfigError(str(exc)) from None
    for key in _PLAN_KEYS:
        merged.pop(key, None)
    llamacpp = plans.llamacpp(merged.pop("llamacpp", None), merged, f"{where}.llamacpp")
    quality = plans.quality(merged.pop("quality", None), f"{where}.quality", base)
    speculative = plans.speculative(merged.pop("speculative", None), f"{where}.speculative")
    reasoning = plans.reasoning(merged.pop("reasoning", None), f"{where}.reasoning")
    engine_args = plans.engine_args(merged.pop("engine_args", {}), merged, f"{where}.engine_args")
    if speculative is not None and engine_args.get("speculative") not in (None, False):
        raise ConfigError(f"{where}.engine_args.speculative: the candidate's `speculative` "
                          "key already sets it; give one of the two")
    return Candidate(**{**merged, "scenario": dict(scenario), "load": load, "price": basis,
                        "llamacpp": llamacpp, "quality": quality, "engine_args": engine_args,
                        "speculative": speculative, "reasoning": reasoning,
                        "deployment": deployment})


def assign_pools(candidates: list[Candidate], raw, where: str) -> list[Candidate]:
    """Each candidate's concurrency pool and its limit. A pool stands for a quota or a
    capacity reservation: candidates of one instance family (or naming one `pool`) share it.
    A family with no entry in `pools` is not limited; naming an unknown pool is an error
    (a typo would otherwise lift the quota silently)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}.pools: expected a mapping of pool name to limit, e.g. {{p5: 1}}")
    for name, limit in raw.items():
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ConfigError(f"{where}.pools: {name!r} is not {_TYPES['name'][1]}")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ConfigError(f"{where}.pools.{name}: expected a positive integer "
                              f"(concurrent runs allowed), got {limit!r}")
    out = []
    for i, c in enumerate(candidates):
        pool = c.pool or c.instance_type.split(".", 1)[0]
        if c.pool is not None and pool not in raw:
            raise ConfigError(f"{where}: candidates[{i}].pool: {pool!r} is not in pools "
                              f"({', '.join(sorted(raw)) or 'none defined'})")
        out.append(replace(c, pool=pool if pool in raw else None, pool_limit=raw.get(pool)))
    return out
