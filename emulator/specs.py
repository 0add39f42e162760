"""Spec data (specs.yaml) as frozen records: hardware, models, precisions, named factors.

Every number comes from specs.yaml, where each one carries its source. Nothing here
invents a constant; `Config` joins one candidate × model × precision × TP choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

SPEC_PATH = Path(__file__).with_name("specs.yaml")
GB = 1e9


class SpecError(ValueError):
    """An unknown candidate, model or precision, or an impossible TP degree."""


@dataclass(frozen=True)
class Accelerator:
    name: str
    memory_gb: float
    hbm_gbps: float
    bf16_tflops: float
    fp8_tflops: float | None
    link_gbps: float
    allreduce_latency_us: float


@dataclass(frozen=True)
class Instance:
    name: str
    accelerator: Accelerator
    count: int
    platform: str  # "cuda" | "neuron"


@dataclass(frozen=True)
class Model:
    name: str
    hf_id: str
    total_params_b: float
    active_params_b: float
    routed_experts: int
    moe_layers: int
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    attention_chunk_size: int
    global_attention_every: int
    max_context: int

    @property
    def expert_params_b(self) -> float:
        """Parameters of one routed expert over all MoE layers: (total − active) / (E − 1)."""
        if self.routed_experts <= 1:  # a dense model: no routed-expert term
            return 0.0
        return (self.total_params_b - self.active_params_b) / (self.routed_experts - 1)

    @property
    def dense_params_b(self) -> float:
        """Always-read parameters (attention, shared expert, dense layers, LM head)."""
        return self.active_params_b - self.expert_params_b

    def kv_bytes_per_token(self, bytes_per_value: float = 2.0) -> float:
        """K and V for every layer: layers × 2 × kv_heads × head_dim × bytes."""
        return self.layers * 2 * self.kv_heads * self.head_dim * bytes_per_value


@dataclass(frozen=True)
class Precision:
    name: str
    bytes_per_param: float
    compute: str  # "bf16" | "fp8"


@dataclass(frozen=True)
class Config:
    """One servable configuration: the instance, the model, the precision and the TP degree."""

    instance: Instance
    model: Model
    precision: Precision
    tp: int
    efficiency: dict[str, float]
    serving: dict[str, float]
    cold_start: dict[str, float]
    fitted: str | None = None  # the name of the fitted spec this config comes from, if any

    @property
    def peak_flops(self) -> float:
        """Dense FLOP/s of the TP group at the precision's compute type."""
        acc = self.instance.accelerator
        per = acc.fp8_tflops if self.precision.compute == "fp8" and acc.fp8_tflops else acc.bf16_tflops
        return per * 1e12 * self.tp

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.instance.accelerator.hbm_gbps * GB * self.tp

    @property
    def weights_bytes(self) -> float:
        return self.model.total_params_b * 1e9 * self.precision.bytes_per_param

    def describe(self) -> dict[str, Any]:
        return {
            "candidate": self.instance.name, "accelerator": self.instance.accelerator.name,
            "model": self.model.name, "hf_id": self.model.hf_id,
            "precision": self.precision.name, "tensor_parallel": self.tp,
            "fitted_spec": self.fitted,
        }


@cache
def raw() -> dict[str, Any]:
    with SPEC_PATH.open() as fh:
        return yaml.safe_load(fh)


def _accelerator(name: str) -> Accelerator:
    d = raw()["accelerators"][name]
    return Accelerator(name, d["memory_gb"], d["hbm_gbps"], d["bf16_tflops"], d["fp8_tflops"],
                       d["link_gbps"], d["allreduce_latency_us"])


def candidates() -> list[str]:
    return list(raw()["instances"])


def models() -> list[str]:
    return list(raw()["models"])


def precisions() -> list[str]:
    return list(raw()["precisions"])


def instance(name: str) -> Instance:
    if name not in raw()["instances"]:
        raise SpecError(f"unknown candidate {name!r}; known: {', '.join(candidates())}")
    d = raw()["instances"][name]
    return Instance(name, _accelerator(d["accelerator"]), d["count"], d["platform"])


def model(name: str) -> Model:
    if name not in raw()["models"]:
        raise SpecError(f"unknown model {name!r}; known: {', '.join(models())}")
    d = raw()["models"][name]
    keys = ("hf_id", "total_params_b", "active_params_b", "routed_experts", "moe_layers", "layers",
            "hidden_size", "attention_heads", "kv_heads", "head_dim", "attention_chunk_size",
            "global_attention_every", "max_context")
    return Model(name, *(d[k] for k in keys))


def precision(name: str) -> Precision:
    if name not in raw()["precisions"]:
        raise SpecError(f"unknown precision {name!r}; known: {', '.join(precisions())}")
    d = raw()["precisions"][name]
    return Precision(name, d["bytes_per_param"], d["compute"])


def config(candidate: str, model_name: str, precision_name: str, tp: int | None = None) -> Config:
    inst = instance(candidate)
    tp = inst.count if tp is None else tp
    if not isinstance(tp, int) or tp < 1 or tp > inst.count:
        raise SpecError(f"--tp {tp} is impossible on {candidate}: it has {inst.count} accelerators")
    r = raw()
    return Config(inst, model(model_name), precision(precision_name), tp,
                  dict(r["efficiency"]), dict(r["serving"]), dict(r["cold_start"]))


def fitted_specs() -> list[str]:
    """Named specs fitted to measurements on one machine (specs.yaml `fitted:`)."""
    return list(raw().get("fitted") or {})


def fitted_config(name: str) -> Config:
    """The configuration of a fitted spec: its candidate × model × precision × TP, with the
    fitted efficiency / serving / cold-start figures over the defaults."""
    table = raw().get("fitted") or {}
    if name not in table:
        raise SpecError(f"unknown fitted spec {name!r}; known: {', '.join(fitted_specs()) or 'none'}")
    d = table[name]
    base = config(d["candidate"], d["model"], d["precision"], d.get("tp"))
    return Config(base.instance, base.model, base.precision, base.tp,
                  {**base.efficiency, **d.get("efficiency", {})},
                  {**base.serving, **d.get("serving", {})},
                  {**base.cold_start, **d.get("cold_start", {})}, fitted=name)
