"""What the benchmark measures, as every room sees it: a candidate (an instance type, a model,
its precision and engine), the load plan it is driven with and the price basis its cost is
read against. `pipelines/config.py` builds them from candidates.yaml and the price sheet,
validated; every resource that takes a candidate takes this type."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields

from servingbench.resources.contract.deployment import DeploymentPlan, Single

# The token targets (prompt and output lengths) a load run asks for when neither its scenario
# nor its flags set them: the candidate's default scenario, the load config's defaults and the
# CLI's all read these.
DEFAULT_TARGETS = {"input_tokens": 512, "output_tokens": 128}


def field_default(cls, name: str):
    """The default of dataclass `cls`'s field `name` (a factory's fresh value): where a
    default is needed outside the class, it is read from the class, never typed again."""
    for f in fields(cls):
        if f.name == name:
            if f.default is not MISSING:
                return f.default
            if f.default_factory is not MISSING:
                return f.default_factory()
            raise KeyError(f"{cls.__name__}.{name} has no default")
    raise KeyError(f"{cls.__name__} has no field {name!r}")


@dataclass(frozen=True)
class LoadPlan:
    concurrency: tuple[int, ...] = (1, 4, 8, 16, 32)
    rates: tuple[float, ...] = ()
    requests_per_step: int = 64
    warmup_requests: int = 8
    workers: int = 1  # load worker processes sharing each step (resources/loadgen/workers/)
    # raise the load until output throughput stops rising (resources/loadgen/ladder.py):
    # {over, start, factor, max, min_gain}; it replaces concurrency and rates
    ladder: dict | None = None
    # a request cut by a spot interruption is sent again, its `retry_of` the cut one's id
    retry_interrupted: bool = False


@dataclass(frozen=True)
class PriceBasis:
    region: str
    purchase_option: str
    retrieved_on: str
    source: str
    hourly_usd_per_node: float | None
    # the sheet's what-if bases for this instance type (contract §4.1, price_source
    # price_sheet): manifest `price_bases` entries
    bases: tuple[dict, ...] = ()

    def as_manifest(self) -> dict:
        return {"region": self.region, "purchase_option": self.purchase_option,
                "retrieved_on": self.retrieved_on, "source": self.source,
                "hourly_usd_per_node": self.hourly_usd_per_node}


@dataclass(frozen=True)
class LlamaCppPlan:
    """How the local llama.cpp server runs a candidate. `model_file` is a GGUF file name in
    the model cache (~/.cache/servingbench/models) or a path; `requantize_from` names the
    GGUF it is derived from by llama.cpp's own quantize API (built on first use)."""
    model_file: str
    threads: int | None = None          # None: every core of this host
    parallel: int = 1                   # llama-cpp-python's server serves one request at a time
    requantize_from: str | None = None


@dataclass(frozen=True)
class QualityPlan:
    """Quality parity: the evaluation set and the candidate this one must match."""
    reference: str | None = None        # candidate name; None: no parity check
    margin: float = 0.05                # accuracy may trail the reference by at most this
    items: int = 60                     # items of the default (generated) set
    seed: int = 0
    dataset: str | None = None          # extra JSONL of {"prompt", "answer"}
    max_tokens: int = 16


@dataclass(frozen=True)
class SpeculativePlan:
    """Speculative decoding, in servingbench's words; each engine file spells it its own way
    (`engines/<engine>.py`, the `speculative` setting). `acceptance` is for the emulator
    only (its modelled per-position acceptance probability): a real engine measures it."""
    method: str                         # eagle3 | eagle | ngram | mtp
    draft_tokens: int                   # tokens drafted (and verified) per decode step
    draft_model: str | None = None      # the drafter's checkpoint (eagle, eagle3)
    acceptance: float = 0.7

    def as_setting(self) -> dict:
        """The engine-neutral `speculative` setting value the engine files translate."""
        out = {"method": self.method, "draft_tokens": self.draft_tokens}
        if self.draft_model is not None:
            out["draft_model"] = self.draft_model
        return out


@dataclass(frozen=True)
class ReasoningPlan:
    """A reasoning model: the engine's reasoning parser splits its thinking into reasoning
    deltas. `emulated_tokens` (LO, HI) is for the emulator only: reasoning tokens per answer."""
    parser: str                         # the engine's --reasoning-parser (deepseek_r1, qwen3, ...)
    emulated_tokens: tuple[int, int] = (256, 1024)


@dataclass(frozen=True)
class Candidate:
    name: str
    instance_type: str
    model: str
    precision: str
    tensor_parallel: int
    node_count: int = 1
    model_revision: str | None = None
    expert_parallel: bool = False
    engine: str = "vllm"
    image_digest: str | None = None
    max_model_len: int = 8192
    scenario: dict = field(default_factory=lambda: {**DEFAULT_TARGETS, "dataset": None})
    load: LoadPlan = LoadPlan()
    price: PriceBasis | None = None
    pool: str | None = None         # the Dagster concurrency pool its runs draw from (quota)
    pool_limit: int | None = None   # that pool's limit, from the file's `pools`
    llamacpp: LlamaCppPlan | None = None
    quality: QualityPlan | None = None
    speculative: SpeculativePlan | None = None
    reasoning: ReasoningPlan | None = None
    # engine settings by their common name (max_num_seqs, max_num_batched_tokens,
    # kv_cache_dtype, speculative); each engine spells them (model_server/engines/<engine>.py)
    engine_args: dict = field(default_factory=dict)
    # {name, settings} when the candidate is one combination of a sweep (pipelines/sweeps.py)
    sweep: dict | None = None
    # how it is deployed (resources/contract/deployment.py): one server, several replicas
    # behind one endpoint (and how their number changes, a spot run's interruptions), or
    # several models on one node
    deployment: DeploymentPlan = Single()
    # how the nodes are bought (contract §1 `capacity`): on_demand | spot; None: not said
    # (on-demand, and the manifest has no `capacity`)
    capacity: str | None = None

    @property
    def model_key(self) -> str:
        """The emulator's name for the model family (scout | maverick)."""
        low = self.model.lower()
        for key in ("scout", "maverick"):
            if key in low:
                return key
        return low.rsplit("/", 1)[-1]
