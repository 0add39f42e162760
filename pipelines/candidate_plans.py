"""A candidate's plans as the candidates file writes them, checked (the keys named on any
mistake): its load plan (`load`, with a `ladder`), its engine settings (`engine_args`), the
real local engine's (`llamacpp`), speculative decoding, a reasoning model and quality parity.
pipelines/config.py reads a candidate with them."""

from __future__ import annotations

from pathlib import Path

from servingbench.pipelines.config_checks import (
    NAME,
    ConfigError,
    at_most,
    check_keys,
    is_int,
    is_number,
    positive_ints,
    short,
)
from servingbench.resources.contract.candidate import (
    Candidate,
    LlamaCppPlan,
    LoadPlan,
    QualityPlan,
    ReasoningPlan,
    SpeculativePlan,
    field_default,
)

_LLAMACPP_KEYS = {"model_file", "threads", "parallel", "requantize_from"}
_QUALITY_KEYS = {"reference", "margin", "items", "seed", "dataset", "max_tokens"}
_SPECULATIVE_KEYS = {"method", "draft_tokens", "draft_model", "acceptance"}
_REASONING_KEYS = {"parser", "emulated_tokens"}
SPECULATIVE_METHODS = ("eagle3", "eagle", "ngram", "mtp")
_LOAD_KEYS = {"concurrency", "rates", "requests_per_step", "warmup_requests", "workers", "ladder",
              "retry_interrupted"}


def ladder_of(raw, where: str) -> dict:
    from servingbench.resources.loadgen.errors import LoadConfigError
    from servingbench.resources.loadgen.ladder import KEYS, Ladder

    check_keys(raw, KEYS, where)
    try:
        Ladder(**raw)
    except LoadConfigError as exc:
        raise ConfigError(f"{where}{str(exc).removeprefix('ladder')}") from None
    except TypeError:  # a value of the wrong kind where a number was compared
        raise ConfigError(f"{where}: expected numbers for start, factor, max, min_gain") from None
    at_most(raw.get("max", 256), "rates" if raw.get("over") == "rate" else "concurrency",
             f"{where}.max")
    return dict(raw)


def load_plan(raw: dict, where: str) -> LoadPlan:
    check_keys(raw, _LOAD_KEYS, where)
    if raw.get("ladder") is not None:
        ladder = ladder_of(raw["ladder"], f"{where}.ladder")
        for key in ("concurrency", "rates"):
            if raw.get(key):
                raise ConfigError(f"{where}.{key}: a ladder replaces the fixed steps; give "
                                  f"{key} or ladder, not both")
        raw = {**raw, "concurrency": [], "rates": []}
    else:
        ladder = None
    rates = raw.get("rates", [])
    if not isinstance(rates, list) or not all(is_number(r) and r > 0 for r in rates):
        raise ConfigError(f"{where}.rates: expected a list of finite positive numbers, "
                          f"got {short(rates)}")
    for r in rates:
        at_most(r, "rates", f"{where}.rates")
    def given(key: str):  # LoadPlan's own default where the file sets none (a tuple as a list)
        value = field_default(LoadPlan, key)
        return raw.get(key, list(value) if isinstance(value, tuple) else value)

    plan = LoadPlan(
        concurrency=positive_ints(given("concurrency"), f"{where}.concurrency",
                                   "concurrency"),
        rates=tuple(float(r) for r in rates),
        requests_per_step=positive_ints([given("requests_per_step")],
                                         f"{where}.requests_per_step", "requests_per_step")[0],
        warmup_requests=given("warmup_requests"),
        workers=given("workers"), ladder=ladder, retry_interrupted=given("retry_interrupted"))
    if not isinstance(plan.retry_interrupted, bool):
        raise ConfigError(f"{where}.retry_interrupted: expected true or false, "
                          f"got {short(plan.retry_interrupted)}")
    if not is_int(plan.workers) or plan.workers < 1:
        raise ConfigError(f"{where}.workers: expected an integer >= 1, got {short(plan.workers)}")
    at_most(plan.workers, "workers", f"{where}.workers")
    if not is_int(plan.warmup_requests) or plan.warmup_requests < 0:
        raise ConfigError(f"{where}.warmup_requests: expected an integer >= 0, "
                          f"got {short(plan.warmup_requests)}")
    at_most(plan.warmup_requests, "warmup_requests", f"{where}.warmup_requests")
    if not plan.concurrency and not plan.rates and plan.ladder is None:
        raise ConfigError(f"{where}: no step: give concurrency and/or rates, or a ladder")
    if plan.ladder is not None and plan.workers > 1:
        raise ConfigError(f"{where}.workers: a ladder runs with one worker only "
                          f"(got {plan.workers})")
    return plan


def engine_args(raw: dict, merged: dict, where: str) -> dict:
    """Checked values; an argument the candidate's engine has no setting for is an error
    here (a sweep lists such a combination as skipped before it gets this far)."""
    from servingbench.resources.model_server import engine_args

    try:
        args = engine_args.check(raw, where)
    except engine_args.EngineArgsError as exc:
        raise ConfigError(str(exc)) from None
    engine = merged.get("engine", field_default(Candidate, "engine"))
    missing = engine_args.unsupported(engine, args)
    if missing:
        raise ConfigError(f"{where}.{missing[0]}: engine {engine} has no such setting")
    return args


def reasoning(raw: dict | None, where: str) -> ReasoningPlan | None:
    if raw is None:
        return None
    check_keys(raw, _REASONING_KEYS, where)
    parser = raw.get("parser")
    if not (isinstance(parser, str) and NAME.fullmatch(parser)):
        raise ConfigError(f"{where}.parser: expected the engine's reasoning parser name "
                          f"(e.g. deepseek_r1), got {short(parser)}")
    n = raw.get("emulated_tokens", [256, 1024])
    pair = [n, n] if is_int(n) else n
    if (not isinstance(pair, list) or len(pair) != 2 or not all(is_int(v) and v >= 0 for v in pair)
            or pair[0] > pair[1]):
        raise ConfigError(f"{where}.emulated_tokens: expected N or [LO, HI] with 0 <= LO <= HI, "
                          f"got {short(n)}")
    return ReasoningPlan(parser=parser, emulated_tokens=(pair[0], pair[1]))


def speculative(raw: dict | None, where: str) -> SpeculativePlan | None:
    if raw is None:
        return None
    check_keys(raw, _SPECULATIVE_KEYS, where)
    method = raw.get("method")
    if method not in SPECULATIVE_METHODS:
        raise ConfigError(f"{where}.method: {method!r} is not one of {', '.join(SPECULATIVE_METHODS)}")
    k = raw.get("draft_tokens")
    if not is_int(k) or not 1 <= k <= 16:
        raise ConfigError(f"{where}.draft_tokens: expected an integer 1..16, got {short(k)}")
    model = raw.get("draft_model")
    if model is not None and not (isinstance(model, str) and model):
        raise ConfigError(f"{where}.draft_model: expected a model id or null")
    if method in ("eagle", "eagle3") and model is None:
        raise ConfigError(f"{where}.draft_model: method {method} needs the drafter's checkpoint")
    p = raw.get("acceptance", 0.7)
    if not is_number(p) or not 0 <= p <= 1:
        raise ConfigError(f"{where}.acceptance: expected a probability in [0, 1], got {short(p)}")
    return SpeculativePlan(method=method, draft_tokens=k, draft_model=model, acceptance=float(p))


def llamacpp(raw: dict | None, merged: dict, where: str) -> LlamaCppPlan | None:
    if merged.get("engine") != "llama.cpp":
        if raw is not None:
            raise ConfigError(f"{where}: only for engine llama.cpp")
        return None
    if raw is None:
        raise ConfigError(f"{where}: engine llama.cpp needs a llamacpp mapping with model_file")
    check_keys(raw, _LLAMACPP_KEYS, where)
    if not isinstance(raw.get("model_file"), str) or not raw["model_file"]:
        raise ConfigError(f"{where}.model_file: expected a GGUF file name or path")
    for key in ("threads", "parallel"):
        v = raw.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise ConfigError(f"{where}.{key}: expected a positive integer, got {v!r}")
    if raw.get("parallel", 1) != 1:
        # llama-cpp-python's server holds one lock around the model: requests queue, they
        # are never batched. Claiming parallel slots it does not have would mislabel a run.
        raise ConfigError(f"{where}.parallel: llama-cpp-python's server serves one request "
                          "at a time; only 1 is honest")
    src = raw.get("requantize_from")
    if src is not None and not isinstance(src, str):
        raise ConfigError(f"{where}.requantize_from: expected a GGUF file name")
    return LlamaCppPlan(model_file=raw["model_file"], threads=raw.get("threads"),
                        parallel=raw.get("parallel", 1), requantize_from=src)


def quality(raw: dict | None, where: str, base: Path) -> QualityPlan | None:
    """A relative `dataset` is from the candidates file's folder, as every path in it is."""
    if raw is None:
        return None
    check_keys(raw, _QUALITY_KEYS, where)
    ref = raw.get("reference")
    if ref is not None and not (isinstance(ref, str) and NAME.fullmatch(ref)):
        raise ConfigError(f"{where}.reference: expected a candidate name, got {ref!r}")
    margin = raw.get("margin", 0.05)
    if isinstance(margin, bool) or not isinstance(margin, int | float) or not 0 <= margin < 1:
        raise ConfigError(f"{where}.margin: expected a number in [0, 1), got {margin!r}")
    for key, default in (("items", 60), ("seed", 0), ("max_tokens", 16)):
        v = raw.get(key, default)
        if not isinstance(v, int) or isinstance(v, bool) or v < (0 if key == "seed" else 1):
            raise ConfigError(f"{where}.{key}: expected a non-negative integer, got {v!r}")
    ds = raw.get("dataset")
    if ds is not None and not isinstance(ds, str):
        raise ConfigError(f"{where}.dataset: expected a JSONL path or null")
    return QualityPlan(reference=ref, margin=float(margin), items=raw.get("items", 60),
                       seed=raw.get("seed", 0), dataset=None if ds is None else str(base / ds),
                       max_tokens=raw.get("max_tokens", 16))
