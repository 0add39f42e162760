"""What a load run asks for: one strict, validated configuration object."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from servingbench.resources.contract.candidate import DEFAULT_TARGETS, LoadPlan
from servingbench.resources.loadgen.errors import LoadConfigError
from servingbench.resources.loadgen.schedule import MAX_RATE, MAX_REQUESTS, size_problem

if TYPE_CHECKING:
    from servingbench.resources.loadgen.ladder import Ladder
    from servingbench.resources.loadgen.scenarios.spec import Scenario

# The largest prompt or output a config may ask for (10 Mi tokens, Llama 4 Scout's context):
# prompts are built in memory, so an absurd value is refused instead of exhausting it.
MAX_TOKENS = 10 * 1024 * 1024


def jsonl(path: Path) -> Iterator[tuple[int, object]]:
    """(line number, value) for every non-blank line of a JSON-lines file (a dataset, a
    trace); a line that is not JSON is a LoadConfigError naming the file and the line."""
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError:
                raise LoadConfigError(f"{path}:{n}: not a JSON line") from None
            yield n, value


@dataclass(frozen=True)
class LoadConfig:
    """Every road to a load run ends here: the chain and the load pods build it from a
    candidate (generator.py `LoadGenerator.config`; the pods get it as a JSON file,
    config_file.py), `servingbench load` from its flags. The defaults are the candidate's
    (contract/candidate.py): read from there, never typed again."""

    endpoint: str
    model: str
    api: str = "completions"  # "completions" | "chat"
    concurrency: list[int] = field(default_factory=lambda: list(LoadPlan.concurrency))
    rates: list[float] = field(default_factory=list)
    arrival: str = "poisson"  # "poisson" | "constant"
    requests_per_step: int | None = LoadPlan.requests_per_step
    duration_s: float | None = None
    warmup_requests: int = LoadPlan.warmup_requests
    warmup_duration_s: float | None = None
    warmup_concurrency: int = 4
    input_tokens: int = DEFAULT_TARGETS["input_tokens"]
    output_tokens: int = DEFAULT_TARGETS["output_tokens"]
    seed: int = 0
    api_key_env: str | None = None
    connect_timeout_s: float = 10
    first_token_timeout_s: float = 60
    total_timeout_s: float = 600
    drain_timeout_s: float = 30
    # Workload shape.
    prefix: str = "unique"  # "unique" (random prefix per prompt) | "shared"
    shared_prefix_tokens: int = 0
    dataset: Path | None = None  # JSONL of {"prompt"[, "output_tokens"]} or {"input_tokens", "output_tokens"}
    use_tokenize: bool = True
    ignore_eos: bool = True  # also sends min_tokens = max_tokens (vLLM extensions)
    continuous_usage: bool = True
    headers: dict[str, str] = field(default_factory=dict)  # extra request headers (e.g. fault injection)
    run_id: str | None = None
    # multi-turn, trace replay, batch or SLO search (scenarios/spec.py); None: the steps above
    scenario: Scenario | None = None
    # load worker processes (or pods) sharing the load; workers/share.py says how it is split
    workers: int = 1
    # multimodal prompts (chat API): this many generated images of image_size (width,
    # height) in every prompt; a dataset row's own `images` list wins over them
    images: int = 0
    image_size: tuple[int, int] = (1024, 768)
    # raise the load until output throughput stops rising (ladder.py), instead of the
    # fixed concurrency / rate steps
    ladder: Ladder | None = None
    # a request a spot interruption cut is sent again (interrupted.py; contract §2.2 retry_of)
    retry_interrupted: bool = False
    # several models behind the endpoint (model_mix.py): [[name, request_share], ...], and
    # requests in bursts of this many per model instead of drawn by share; empty: cfg.model
    model_mix: list = field(default_factory=list)
    model_bursts: int | None = None

    def __post_init__(self) -> None:
        validate(self)

    @property
    def base_url(self) -> str:
        return self.endpoint.rstrip("/").removesuffix("/v1")


def _positive(name: str, value: float | None, allow_none: bool = True) -> None:
    if value is None:
        if not allow_none:
            raise LoadConfigError(f"{name}: required")
        return
    if (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            or value <= 0):
        raise LoadConfigError(f"{name}: must be a finite positive number, got {value!r}")


def validate(cfg: LoadConfig) -> None:
    from servingbench.resources.loadgen.model_mix import check as check_mix

    mix_problem = check_mix(cfg.model_mix, cfg.model_bursts)
    if mix_problem is not None:
        raise LoadConfigError(mix_problem)
    parts = urlsplit(cfg.endpoint)
    if "@" in parts.netloc:
        # A password in the URL would travel into records, logs and server_metrics.json;
        # the message never repeats the URL.
        raise LoadConfigError("endpoint: a URL with credentials (user:password@host) is refused; "
                          "pass the key through api_key_env (--api-key-env) instead")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LoadConfigError(
            f"endpoint: {cfg.endpoint!r} is not an http(s) URL (e.g. http://127.0.0.1:8000)"
        )
    try:
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise LoadConfigError(f"endpoint: {cfg.endpoint!r} has an invalid port") from None
    if not cfg.model:
        raise LoadConfigError("model: required")
    if cfg.model.startswith("-") or not cfg.model.isprintable():
        raise LoadConfigError(f"model: {cfg.model[:80]!r} must not start with '-' (an engine would "
                          "read it as a flag) nor hold control characters")
    if cfg.api not in ("completions", "chat"):
        raise LoadConfigError(f"api: {cfg.api!r} is not 'completions' or 'chat'")
    if cfg.arrival not in ("poisson", "constant"):
        raise LoadConfigError(f"arrival: {cfg.arrival!r} is not 'poisson' or 'constant'")
    for c in cfg.concurrency:
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise LoadConfigError(f"concurrency: {c!r} is not a positive integer")
    for r in cfg.rates:
        _positive("rates", r, allow_none=False)
    for r in cfg.rates:
        if r > MAX_RATE:
            raise LoadConfigError(f"rates: {r!r} is above the maximum {MAX_RATE:,.0f}")
        if cfg.requests_per_step is None and cfg.duration_s is not None and (
                size_problem([(cfg.duration_s, r)]) is not None):
            raise LoadConfigError(f"duration_s: rate={r:g} for {cfg.duration_s:g} s: "
                                  f"{size_problem([(cfg.duration_s, r)])}")
    own_steps = (cfg.scenario is not None and cfg.scenario.own_steps
                 or cfg.ladder is not None)
    if cfg.ladder is not None:
        if cfg.scenario is not None and cfg.scenario.kind != "fixed":
            raise LoadConfigError(f"ladder: goes with the fixed scenario, not "
                                  f"{cfg.scenario.kind}")
        if cfg.concurrency or cfg.rates:
            raise LoadConfigError("ladder: replaces the concurrency / rates steps; "
                                  "give one or the other")
        if cfg.workers > 1:
            raise LoadConfigError(f"workers: a ladder decides each step from the last one's "
                                  f"records and runs with one worker only (got {cfg.workers})")
    if not (cfg.concurrency or cfg.rates or own_steps):
        raise LoadConfigError("no steps: give concurrency, rates or a scenario with its own "
                              "steps (a schedule, ...)")
    if cfg.requests_per_step is None and cfg.duration_s is None and (
            cfg.concurrency or cfg.rates or cfg.ladder):
        raise LoadConfigError("a step needs a bound: requests_per_step and/or duration_s")
    if cfg.requests_per_step is not None and (
        isinstance(cfg.requests_per_step, bool) or cfg.requests_per_step < 1
    ):
        raise LoadConfigError(f"requests_per_step: must be >= 1, got {cfg.requests_per_step!r}")
    if cfg.requests_per_step is not None and cfg.requests_per_step > MAX_REQUESTS:
        raise LoadConfigError(f"requests_per_step: {cfg.requests_per_step:,} is above the "
                              f"maximum {MAX_REQUESTS:,}")
    _positive("duration_s", cfg.duration_s)
    _positive("warmup_duration_s", cfg.warmup_duration_s)
    if cfg.warmup_requests < 0:
        raise LoadConfigError("warmup_requests: must be >= 0")
    _positive("warmup_concurrency", cfg.warmup_concurrency, allow_none=False)
    for name in ("input_tokens", "output_tokens"):
        value = getattr(cfg, name)
        _positive(name, value, allow_none=False)
        if value > MAX_TOKENS:
            raise LoadConfigError(f"{name}: {value:,} is above the maximum {MAX_TOKENS:,}")
    for name in ("connect_timeout_s", "first_token_timeout_s", "total_timeout_s", "drain_timeout_s"):
        _positive(name, getattr(cfg, name), allow_none=False)
    if cfg.prefix not in ("unique", "shared"):
        raise LoadConfigError(f"prefix: {cfg.prefix!r} is not 'unique' or 'shared'")
    if cfg.prefix == "shared" and not 0 < cfg.shared_prefix_tokens < cfg.input_tokens:
        raise LoadConfigError("shared_prefix_tokens: must be between 1 and input_tokens - 1")
    if isinstance(cfg.workers, bool) or not isinstance(cfg.workers, int) or cfg.workers < 1:
        raise LoadConfigError(f"workers: {cfg.workers!r} is not a positive integer")
    if cfg.workers > 1 and cfg.scenario is not None and cfg.scenario.one_worker:
        # its KIND says why (a batch's one queue, an SLO search's probe after probe)
        raise LoadConfigError(f"workers: scenario {cfg.scenario.kind} runs with one worker only "
                              f"(got workers={cfg.workers})")
    if isinstance(cfg.images, bool) or not isinstance(cfg.images, int) or not 0 <= cfg.images <= 64:
        raise LoadConfigError(f"images: {cfg.images!r} is not an integer in 0..64")
    if cfg.images and cfg.api != "chat":
        raise LoadConfigError("images: image prompts need the chat API (api: chat, --api chat)")
    if (len(cfg.image_size) != 2 or not all(isinstance(v, int) and 0 < v <= 8192
                                            for v in cfg.image_size)):
        raise LoadConfigError(f"image_size: {cfg.image_size!r} is not (width, height) in 1..8192")
    if cfg.dataset is not None and not Path(cfg.dataset).is_file():
        raise LoadConfigError(f"dataset: {cfg.dataset} is not a file")


def step_name(load_mode: str, target: float) -> str:
    """`c=8` or `rate=4` / `rate=2.5` (no trailing `.0` for integral rates)."""
    if load_mode == "concurrency":
        return f"c={int(target)}"
    return f"rate={int(target)}" if float(target).is_integer() else f"rate={target:g}"
