"""Engine profiles (engines.yaml): how an engine schedules on a platform, and the fitted
figures of the performance model for one accelerator × engine (calibration.yaml, written by
`servingbench calibrate`).

The performance model's free figures are composed, never looked up per row:

  memory_bandwidth = accelerator.memory × engine.memory    (fraction of datasheet bandwidth)
  compute          = accelerator.compute × engine.compute  (fraction of datasheet FLOP/s)
  step_overhead_ms, layer_overhead_us, seq_overhead_us,
  frontend_ms, context_* (Neuron's context encoding)        the engine stack's
  allreduce_us                                              the interconnect's
  gemm_half_tokens, gemm_half_width, dequant_compute        the platform's

so an accelerator's figures hold for every engine and an engine's for every accelerator,
and a figure that only one row could pin down does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servingbench.emulator.specdata import SpecError, load, resolve

# Before any fit (and for what a fit never saw): the model's priors. Each says what it is.
PRIORS: dict[str, float] = {
    "memory_bandwidth": 0.75,   # assumption: fraction of HBM bandwidth reached by decode reads
    "compute": 0.55,            # assumption: fraction of dense peak reached by large GEMMs
    "gemm_half_tokens": 0.0,    # tokens at which a GEMM reaches half its efficiency (0: none)
    "step_overhead_ms": 1.5,    # assumption: scheduler + launch per step (CUDA graphs)
    "layer_overhead_us": 0.0,   # per layer and step, beyond the kernels (Neuron's graphs)
    "seq_overhead_us": 0.0,     # per running sequence and step (sampling, bookkeeping)
    "allreduce_us": 10.0,       # assumption: one small all-reduce over the TP group
    "interconnect": 0.7,        # assumption: fraction of link bandwidth an all-reduce reaches
    "request_overhead_ms": 0.0, # per admitted request (a Python server's request handling)
    "context_compute": 0.55,    # Neuron: fraction of peak in the context-encoding graph
    "context_layer_ms": 0.0,    # Neuron: per layer of one context-encoding pass
    "seq_layer_overhead_us": 0.0,  # per batch row, layer and step (Neuron: the compiled batch's rows)
    "moe_layer_overhead_us": 0.0,  # per MoE layer and step, beyond the kernels (eager routing)
    "masked_attention": 1.0,    # share of the compute rate a masked attention over the packed
                                # batch reaches (a general-mask kernel, not a flash kernel)
    "gemm_half_width": 0.0,     # a GEMM's output columns per rank at which it reaches half
                                # its efficiency (0: none)
    "dequant_compute": 1.0,     # share of the 16-bit rate a GEMM reaches that dequantizes
                                # its weights (a format the matrix units lack) as it goes
    "frontend_ms": 0.0,         # the API server before and after the engine (HTTP, tokenizing)
    "expert_half_rows": 64.0,   # rows per expert at which the experts' grouped GEMM reaches
                                # half its peak (gathered, padded and scattered per expert)
}


MAX_MEMORY = 0.95  # the best sustained share of datasheet bandwidth any kernel reaches


@dataclass(frozen=True)
class EngineProfile:
    name: str
    platform: str
    scheduler: str  # mixed | prefill_first | context_encoding | static
    kv_reserve_output: float
    block_tokens: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int | None
    buckets: tuple[int, ...]
    kernels: str = ""  # whose fitted kernel figures it uses (engines sharing a stack share them)
    speculative_max_num_seqs: int | None = None  # the batch limit with speculative decoding
    kv_cache_dtype: tuple[tuple[str, str], ...] = ()  # weight precision -> default KV dtype
    efficiency: dict[str, float] = field(default_factory=dict)
    # the KV cache's share of the memory the weights and the runtime leave free (TensorRT-LLM's
    # free_gpu_memory_fraction); None: a share of the whole memory (vLLM's, SGLang's)
    kv_free_fraction: float | None = None
    frontend: str = ""  # whose API-server time per request it pays (default: its kernels')
    # how a step's attention runs: `per_sequence` (paged kernels: each query reads its own
    # sequence's keys) or `masked_batch` (one attention over the packed batch, every query
    # against every key of the batch under a mask, the KV heads expanded to every head first)
    attention: str = "per_sequence"
    # `graphs` (the step replays captured CUDA graphs: its launch cost is one figure) or
    # `eager` (every layer's kernels launched from Python each step: a cost per layer, per MoE
    # layer and per sequence and layer)
    launch: str = "graphs"
    # whose time per request stands in for `frontend`'s while no fitted figure has it: an API
    # server of the same build (trtllm-serve's FastAPI server tokenizes in Python as vLLM's
    # does; Triton's C++ server, its kernels' own, does not)
    frontend_like: str = ""

    def figures(self, acc, cal: dict[str, Any] | None) -> dict[str, float]:
        """The performance model's figures for this profile on `acc` under the calibration
        `cal` (a fit's trial figures): its kernels' and its API server's."""
        return efficiency_of(self.kernels, acc, cal, frontend=self.frontend,
                             frontend_like=self.frontend_like)

    def default_kv_dtype(self, precision: str, arch=None) -> str:
        """The KV-cache format the engine picks for weights of `precision`: its own rule, or
        (`checkpoint`) what the model's quantized checkpoint carries."""
        kv = dict(self.kv_cache_dtype).get(precision, "auto")
        if kv == "checkpoint":
            kv = dict(arch.checkpoint_kv).get(precision, "auto") if arch is not None else "auto"
        return kv

    @property
    def serving(self) -> dict[str, float]:
        """The profile's limits as the serving defaults a config carries."""
        out: dict[str, float] = {"max_num_seqs": self.max_num_seqs,
                                 "max_num_batched_tokens": self.max_num_batched_tokens}
        if self.max_model_len:
            out["default_max_model_len"] = self.max_model_len
        return out

    def bucket(self, tokens: int) -> int:
        """The compiled length a prompt of `tokens` is padded to (itself without buckets)."""
        for b in self.buckets:
            if b >= tokens:
                return b
        return tokens


def _table() -> dict[str, Any]:
    return load("engines.yaml")


def engines() -> list[str]:
    return list(_table()["profiles"])


def engine_name(name: str) -> str | None:
    profiles = _table()["profiles"]
    return resolve(name, {k: [k, *v.get("aliases", [])] for k, v in profiles.items()})


def _tiered(value, acc, d: dict) -> int:
    """A limit that depends on the accelerator's memory (vLLM's and SGLang's defaults)."""
    if not isinstance(value, dict):
        return int(value)
    if "large" in value:
        large = acc.memory_gb >= d.get("large_gpu_gb", 70) and acc.name not in d.get("small_gpus", [])
        return int(value["large" if large else "small"])
    mem = acc.memory_gb
    return int(value["under_35"] if mem < 35 else value["under_160"] if mem < 160 else value["above"])


def engine_profile(name: str, acc) -> EngineProfile:
    """The profile of engine `name` on accelerator `acc` (a specs.Accelerator), with the
    fitted efficiency figures for that pair."""
    key = engine_name(name)
    if key is None:
        raise SpecError(f"unknown engine {name!r}; known: {', '.join(engines())}")
    spec = _table()["profiles"][key]
    d = spec.get(acc.platform)
    if d is None:
        have = ", ".join(p for p in spec if p not in ("aliases",))
        raise SpecError(f"engine {key} does not run on {acc.platform} ({acc.name}); it runs on {have}")
    kernels = d.get("kernels", key)
    frontend = d.get("frontend", kernels)
    frontend_like = d.get("frontend_like", "")
    return EngineProfile(
        key, acc.platform, d["scheduler"], float(d["kv_reserve_output"]), int(d["block_tokens"]),
        _tiered(d["max_num_seqs"], acc, d), _tiered(d["max_num_batched_tokens"], acc, d),
        d.get("max_model_len"), tuple(d.get("buckets") or ()), kernels,
        d.get("speculative_max_num_seqs"),
        tuple((d.get("kv_cache_dtype") or {}).items()),
        efficiency_of(kernels, acc, frontend=frontend, frontend_like=frontend_like),
        d.get("kv_free_fraction"), frontend, d.get("attention", "per_sequence"),
        d.get("launch", "graphs"), frontend_like)


def calibration_file() -> dict[str, Any]:
    """calibration.yaml, written by `servingbench calibrate` ({} before any fit)."""
    from servingbench.emulator.specdata import HERE
    if not (HERE / "calibration.yaml").exists():
        return {}
    return load("calibration.yaml") or {}


def calibration() -> dict[str, Any]:
    return calibration_file().get("figures") or {}


def efficiency_of(engine: str, acc, cal: dict[str, Any] | None = None,
                  frontend: str | None = None, frontend_like: str | None = None) -> dict[str, float]:
    """The performance model's figures for this engine's kernels on this accelerator: the
    fitted ones where the fit (`cal`, default engines.yaml's) has them, the priors elsewhere;
    the API server's time per request is `frontend`'s (default: the kernels' own), or
    `frontend_like`'s while the fit has none of `frontend`'s own."""
    cal = calibration() if cal is None else cal
    a = (cal.get("accelerators") or {}).get(getattr(acc, "calibration_name", acc.name), {})
    e = (cal.get("engines") or {}).get(engine, {})
    i = (cal.get("interconnects") or {}).get(acc.interconnect, {})
    p = (cal.get("platforms") or {}).get(acc.platform, {})
    out = dict(PRIORS)
    # no engine reads memory faster than the datasheet's bandwidth, nor computes past its peak
    out["memory_bandwidth"] = min(MAX_MEMORY, a.get("memory", PRIORS["memory_bandwidth"])
                                  * e.get("memory", 1.0))
    out["compute"] = min(1.0, a.get("compute", PRIORS["compute"]) * e.get("compute", 1.0))
    for k in ("step_overhead_ms", "layer_overhead_us", "seq_overhead_us", "seq_layer_overhead_us",
              "moe_layer_overhead_us", "masked_attention", "frontend_ms", "context_compute", "context_layer_ms",
              "expert_half_rows"):
        out[k] = e.get(k, PRIORS[k])
    if frontend and frontend != engine:
        fitted = cal.get("engines") or {}
        like = fitted.get(frontend_like or "", {}).get("frontend_ms", out["frontend_ms"])
        out["frontend_ms"] = fitted.get(frontend, {}).get("frontend_ms", like)
    out["allreduce_us"] = i.get("allreduce_us", PRIORS["allreduce_us"])
    for k in ("gemm_half_tokens", "gemm_half_width", "dequant_compute"):
        out[k] = p.get(k, PRIORS[k])
    # a dequantizing GEMM's share is its tensor cores' (a calibration from before it was
    # fitted per generation holds one for the whole platform)
    g = (cal.get("tensor_cores") or {}).get(getattr(acc, "tensor_cores", ""), {})
    out["dequant_compute"] = g.get("dequant_compute", out["dequant_compute"])
    return out


def is_calibrated() -> bool:
    return bool(calibration().get("accelerators"))
