"""Fit check: do the weights plus a minimal KV cache fit the TP group's memory?

capacity  = tp × memory_per_accelerator × gpu_memory_utilization (vLLM, SGLang: a share of
            the whole memory), or tp × memory_per_accelerator where the engine sizes its KV
            cache as a share of what the weights and the runtime leave free (TensorRT-LLM's
            free_gpu_memory_fraction, 0.9 by default)
needed    = weights (total params × bytes/param) + tp × runtime overhead + KV for kv_tokens
kv_tokens = min_kv_tokens, or more when asked (an engine refuses to start when one sequence
            of its max_model_len does not fit its KV cache); an FP8 KV cache stores 1 byte
            per value instead of 2
A configuration that fails refuses to start (like an out-of-memory at load); the
pipeline calls the same function as a pre-flight check before provisioning anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from servingbench.emulator import specs


@dataclass(frozen=True)
class FitResult:
    fits: bool
    message: str
    weights_gb: float
    kv_min_gb: float
    overhead_gb: float
    capacity_gb: float
    kv_capacity_gb: float  # what is left for the KV cache (negative when it does not fit)
    candidate: str
    model: str
    precision: str
    tp: int


def fit_check(instance_type: str, model: str, precision: str, tp: int | None = None,
              kv_tokens: int | None = None, kv_bytes_per_value: float = 2.0,
              engine: str | None = None) -> FitResult:
    """Raises specs.SpecError for unknown names or an impossible TP degree. `kv_tokens`:
    the KV cache that must fit besides the weights (at least min_kv_tokens)."""
    cfg = specs.config(instance_type, model, precision, tp, engine)
    return fit_of(cfg, kv_tokens, kv_bytes_per_value)


def _kv_free_fraction(cfg: specs.Config) -> float | None:
    try:
        return cfg.profile().kv_free_fraction
    except specs.SpecError:  # no profile for this engine on this platform: the whole-memory rule
        return None


def fit_of(cfg: specs.Config, kv_tokens: int | None = None,
           kv_bytes_per_value: float = 2.0) -> FitResult:
    acc = cfg.instance.accelerator
    free_share = _kv_free_fraction(cfg)
    util = 1.0 if free_share else cfg.serving["gpu_memory_utilization"]
    capacity = cfg.tp * acc.memory_gb * util
    weights = cfg.weights_bytes / specs.GB
    overhead = cfg.tp * cfg.serving["runtime_overhead_gb_per_accelerator"]
    kv_capacity = capacity - weights - overhead
    if free_share:
        kv_capacity *= free_share
    kv_tokens = max(int(cfg.serving["min_kv_tokens"]), kv_tokens or 0)
    # each token's KV as often as the TP group holds it (KV heads copied past tp = kv_heads)
    per_token = cfg.model.kv_bytes_per_token(kv_bytes_per_value) * cfg.model.kv_replication(cfg.tp)
    kv_min = per_token * kv_tokens / specs.GB
    needed = weights + overhead + kv_min
    fits = kv_min <= kv_capacity
    arithmetic = (
        f"{cfg.model.name} {cfg.precision.name}: weights {cfg.model.total_params_b:.1f}B params × "
        f"{cfg.precision.bytes_per_param:g} B = {weights:.1f} GB, + runtime overhead "
        f"{cfg.tp} × {cfg.serving['runtime_overhead_gb_per_accelerator']:g} GB = {overhead:.1f} GB, "
        f"+ minimal KV cache {kv_tokens} tokens × {per_token / 1024:.0f} KiB = "
        f"{kv_min:.1f} GB → needs {needed:.1f} GB; {cfg.instance.name} TP={cfg.tp}: "
        f"{cfg.tp} × {acc.memory_gb:g} GB × {util:g} usable = {capacity:.1f} GB"
        + (f", the KV cache {free_share:g} of what is left = {kv_capacity:.1f} GB" if free_share else "")
    )
    verdict = "fits" if fits else "DOES NOT FIT (out of memory at load)"
    return FitResult(
        fits=fits, message=f"{verdict}: {arithmetic}", weights_gb=weights, kv_min_gb=kv_min,
        overhead_gb=overhead, capacity_gb=capacity, kv_capacity_gb=kv_capacity,
        candidate=cfg.instance.name, model=cfg.model.name, precision=cfg.precision.name, tp=cfg.tp,
    )
