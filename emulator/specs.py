"""Spec data as frozen records: hardware (hardware.yaml), model architectures
(architectures.yaml), engine profiles and their fitted figures (engines.yaml), precisions,
serving defaults, cold start and fitted one-machine specs (specs.yaml).

Every number comes from a YAML file where it carries its source. Nothing here invents a
constant; `Config` joins one instance × architecture × precision × TP × engine choice, and
the architecture derives its parameter counts from its published shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from servingbench.emulator.architecture import Architecture
from servingbench.emulator.engines import EngineProfile, engine_profile
from servingbench.emulator.specdata import HERE, SpecError, load, resolve

SPEC_PATH = HERE / "specs.yaml"
GB = 1e9
DEFAULT_ENGINE = "vllm"
# the engine a configuration names none runs on its platform: vLLM, through its Neuron plugin
# on Neuron
PLATFORM_ENGINES = {"cuda": "vllm", "neuron": "vllm-neuron", "cpu": "vllm"}
__all__ = ["SpecError", "Architecture", "EngineProfile", "Config"]


def raw() -> dict[str, Any]:
    return load("specs.yaml")


# --- hardware ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Accelerator:
    name: str
    platform: str  # cuda | neuron | cpu
    memory_gb: float
    hbm_gbps: float
    tflops: tuple[tuple[str, float], ...]  # (number format, dense TFLOP/s)
    link_gbps: float
    interconnect: str  # nvlink | pcie | neuronlink | none
    cores_per_chip: int
    calibrated_as: str = ""  # whose fitted figures it uses (the same chip, other memory)
    tensor_cores: str = ""  # a GPU's tensor-core generation (dequantizing GEMMs' share)

    @property
    def calibration_name(self) -> str:
        return self.calibrated_as or self.name

    def rate(self, fmt: str) -> tuple[str, float]:
        """The format a matrix unit runs for `fmt` and its dense TFLOP/s: the format itself
        where the chip has a unit for it, else bf16 (dequantized weights)."""
        table = dict(self.tflops)
        if fmt in table:
            return fmt, table[fmt]
        return "bf16", table["bf16"]

    @property
    def bf16_tflops(self) -> float:
        return dict(self.tflops)["bf16"]

    @property
    def fp8_tflops(self) -> float | None:
        return dict(self.tflops).get("fp8")


@dataclass(frozen=True)
class Instance:
    name: str
    accelerator: Accelerator
    count: int

    @property
    def platform(self) -> str:
        return self.accelerator.platform


def _hardware() -> dict[str, Any]:
    return load("hardware.yaml")


@cache
def accelerator(name: str) -> Accelerator:
    table = _hardware()["accelerators"]
    key = resolve(name, {k: [k, *v.get("aliases", [])] for k, v in table.items()})
    if key is None:
        raise SpecError(f"unknown accelerator {name!r}; known: {', '.join(table)}")
    d = table[key]
    return Accelerator(key, d["platform"], float(d["memory_gb"]), float(d["hbm_gbps"]),
                       tuple((k, float(v)) for k, v in d["tflops"].items()),
                       float(d["link_gbps"]), d["interconnect"], int(d["cores_per_chip"]),
                       d.get("calibrated_as", ""), d.get("tensor_cores", ""))


def accelerators() -> list[str]:
    return list(_hardware()["accelerators"])


def candidates() -> list[str]:
    return list(_hardware()["instances"])


def instance(name: str) -> Instance:
    table = _hardware()["instances"]
    if name not in table:
        raise SpecError(f"unknown candidate {name!r}; known: {', '.join(candidates())}")
    d = table[name]
    return Instance(name, accelerator(d["accelerator"]), int(d["count"]))


def instance_of(acc: str, chips: int) -> Instance:
    """The smallest instance of this accelerator holding `chips` chips, or a bare group of
    them when none does (published rows name GPUs, not instances)."""
    a = accelerator(acc)
    fits = [(d["count"], n) for n, d in _hardware()["instances"].items()
            if accelerator(d["accelerator"]).name == a.name and d["count"] >= chips]
    if fits:
        return instance(min(fits)[1])
    return Instance(f"{chips}x{a.name}", a, chips)


# --- models ---------------------------------------------------------------------------------
def _architectures() -> dict[str, Any]:
    return load("architectures.yaml")


def models() -> list[str]:
    return list(_architectures())


def model_key(name: str) -> str | None:
    """The architecture a name means (its key, an HF id or a table's name), or None."""
    table = _architectures()
    if name in table:
        return name
    spellings = {k: [k, v["hf_id"], *v.get("names", [])] for k, v in table.items()}
    key = resolve(name, spellings)
    if key is None and "/" not in name:  # a repository name without its organisation
        key = resolve(name, {k: [s.rsplit("/", 1)[-1] for s in v] for k, v in spellings.items()})
    return key


@cache
def model(name: str) -> Architecture:
    key = model_key(name)
    if key is None:
        raise SpecError(f"unknown model {name!r}; known: {', '.join(models())}")
    return Architecture.of(key, _architectures()[key])


# --- precisions -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Precision:
    name: str
    bytes_per_param: float
    compute: str  # the number format the matrix units run when the chip has it
    quantizes_head: bool = False  # the LM head and embedding at bytes_per_param too

    @property
    def head_bytes(self) -> float:
        return self.bytes_per_param if self.quantizes_head else max(self.bytes_per_param, 2.0)


def precisions() -> list[str]:
    return list(raw()["precisions"])


def precision(name: str) -> Precision:
    if name not in raw()["precisions"]:
        raise SpecError(f"unknown precision {name!r}; known: {', '.join(precisions())}")
    d = raw()["precisions"][name]
    return Precision(name, float(d["bytes_per_param"]), d["compute"], bool(d.get("quantizes_head")))


# --- one configuration --------------------------------------------------------------------------
@dataclass(frozen=True)
class Config:
    """One servable configuration: instance, architecture, precision, TP degree, engine."""

    instance: Instance
    model: Architecture
    precision: Precision
    tp: int
    efficiency: dict[str, float]
    serving: dict[str, float]
    cold_start: dict[str, float]
    fitted: str | None = None  # the name of the fitted spec this config comes from, if any
    engine: str = DEFAULT_ENGINE

    @property
    def peak_flops(self) -> float:
        """Dense FLOP/s of the TP group at the format its matrix units run."""
        return self.instance.accelerator.rate(self.precision.compute)[1] * 1e12 * self.tp

    @property
    def ranks(self) -> int:
        """Tensor-parallel ranks: GPUs, or NeuronCores (cores_per_chip a chip)."""
        return self.tp * self.instance.accelerator.cores_per_chip

    @property
    def compute_format(self) -> str:
        return self.instance.accelerator.rate(self.precision.compute)[0]

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.instance.accelerator.hbm_gbps * GB * self.tp

    @property
    def weights_bytes(self) -> float:
        return self.model.weight_bytes(self.precision)

    def profile(self) -> EngineProfile:
        return engine_profile(self.engine, self.instance.accelerator)

    def describe(self) -> dict[str, Any]:
        return {
            "candidate": self.instance.name, "accelerator": self.instance.accelerator.name,
            "model": self.model.name, "hf_id": self.model.hf_id,
            "precision": self.precision.name, "tensor_parallel": self.tp,
            "engine_profile": self.engine, "fitted_spec": self.fitted,
        }


def config(candidate: str, model_name: str, precision_name: str, tp: int | None = None,
           engine: str | None = None) -> Config:
    inst = instance(candidate)
    return config_of(inst, model_name, precision_name, tp, engine)


def config_of(inst: Instance, model_name: str, precision_name: str, tp: int | None = None,
              engine: str | None = None) -> Config:
    """`engine` None: the platform's (PLATFORM_ENGINES); vLLM on Neuron is its Neuron plugin."""
    tp = inst.count if tp is None else tp
    if engine is None or (engine == "vllm" and inst.platform == "neuron"):
        engine = PLATFORM_ENGINES[inst.platform]
    if not isinstance(tp, int) or tp < 1 or tp > inst.count:
        raise SpecError(f"--tp {tp} is impossible on {inst.name}: it has {inst.count} accelerators")
    r = raw()
    prof = engine_profile(engine, inst.accelerator)  # raises SpecError for an unknown engine
    return Config(inst, model(model_name), precision(precision_name), tp,
                  dict(prof.efficiency), {**r["serving"], **prof.serving},
                  dict(r["cold_start"]), engine=prof.name)


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
    base = config(d["candidate"], d["model"], d["precision"], d.get("tp"), d.get("engine", "llamacpp"))
    return Config(base.instance, base.model, base.precision, base.tp,
                  {**base.efficiency, **d.get("efficiency", {})},
                  {**base.serving, **d.get("serving", {})},
                  {**base.cold_start, **d.get("cold_start", {})}, fitted=name, engine=base.engine)
