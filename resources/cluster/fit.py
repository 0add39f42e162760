"""The pre-flight fit check of one candidate, before anything is provisioned: the rule the
chain's provisioned_cluster applies to a run and a sweep applies to each combination.

1. TP stays within one node: tensor_parallel ≤ the instance's accelerators per node
   (contract §1's table).
2. Weights + runtime overhead + a KV cache that holds one sequence of max_model_len (at
   least the emulator's minimal KV cache; an FP8 KV cache halves it) fit the TP group's
   memory, by the emulator's spec data (emulator/fit.py, where each figure has a source).
An instance, model or precision the spec data does not know is "not checked", never refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from servingbench.resources.contract import accelerators
from servingbench.resources.contract.deployment import SeveralModels


@dataclass(frozen=True)
class Fit:
    fits: bool | None        # None: not checked (unknown to the spec data)
    message: str
    weights_gb: float | None = None
    capacity_gb: float | None = None


def check(candidate) -> Fit:
    from servingbench.emulator.fit import fit_check
    from servingbench.emulator.specs import SpecError

    per_node = accelerators.per_node_of(candidate.instance_type)
    tp = candidate.tensor_parallel
    if per_node is not None and tp > per_node:
        return Fit(False, f"tensor_parallel {tp} > {per_node} accelerators per "
                          f"{candidate.instance_type} node (TP stays within one node)")
    if isinstance(candidate.deployment, SeveralModels):
        # several models on the node: every one's share, and host memory for level-1 sleep
        from servingbench.resources.cluster.fit_models import check_models

        many = check_models(candidate)
        return Fit(many.fits, many.message, many.weights_gb, many.capacity_gb)
    kv_fp8 = (candidate.engine_args or {}).get("kv_cache_dtype") == "fp8"
    try:
        fit = fit_check(candidate.instance_type, candidate.model_key, candidate.precision, tp,
                        kv_tokens=candidate.max_model_len, kv_bytes_per_value=1.0 if kv_fp8 else 2.0)
    except SpecError as exc:
        return Fit(None, f"not checked: {exc}")
    return Fit(fit.fits, fit.message, fit.weights_gb, fit.capacity_gb)
