"""The pre-flight fit check of a candidate serving several models on one node (its `models`),
before anything is provisioned: fit.check calls it for such a candidate.

Accelerator memory (the TP group's: tp × memory per accelerator × gpu_memory_utilization, the
emulator's spec data, emulator/fit.py):
1. each model gets its `memory_share` of it (vLLM's --gpu-memory-utilization of its own
   engine is share × utilization), and its weights + runtime overhead + a KV cache of one
   max_model_len sequence must fit that share;
2. the resident models' shares plus the largest swapped model's share (one swapped model
   awake at a time; a sleeping one frees its accelerator memory) add to at most 1.
Host memory (sleep level 1 keeps a sleeping model's weights in CPU memory): the weights of
every level-1 model but the largest (the one that may be awake) fit the instance's memory
(HOST_MEMORY_GB, from the EC2 instance pages); level 2 discards them and needs none.
A model, precision or instance the data does not know is "not checked", never refused.
"""

from __future__ import annotations

from dataclasses import dataclass

# EC2 instance memory (GiB): https://aws.amazon.com/ec2/instance-types/ (accelerated computing)
HOST_MEMORY_GB = {"p5.48xlarge": 2048, "p5en.48xlarge": 2048, "p4d.24xlarge": 1152,
                  "g6e.48xlarge": 1536, "trn2.48xlarge": 2048, "inf2.48xlarge": 768}


@dataclass(frozen=True)
class ModelsFit:
    fits: bool | None        # None: not checked (unknown to the spec data)
    message: str
    weights_gb: float | None = None      # all models' weights together
    capacity_gb: float | None = None     # the TP group's usable accelerator memory


def model_key(model: str) -> str:
    """The emulator's name for a model id (as Candidate.model_key)."""
    low = model.lower()
    for key in ("scout", "maverick"):
        if key in low:
            return key
    if "gemma-3-270m" in low or "gemma3-270m" in low:
        return "gemma3-270m"
    return low.rsplit("/", 1)[-1]


def check_models(candidate) -> ModelsFit:
    from servingbench.emulator.fit import fit_check
    from servingbench.emulator.specs import SpecError

    kv_fp8 = (candidate.engine_args or {}).get("kv_cache_dtype") == "fp8"
    models = [m.as_dict() for m in candidate.deployment.models]
    lines, needs = [], {}
    capacity = None
    try:
        for m in models:
            f = fit_check(candidate.instance_type, model_key(m["model"]), m["precision"],
                          candidate.tensor_parallel, kv_tokens=candidate.max_model_len,
                          kv_bytes_per_value=1.0 if kv_fp8 else 2.0)
            capacity = f.capacity_gb
            needs[m["name"]] = (f.weights_gb, f.weights_gb + f.overhead_gb + f.kv_min_gb)
    except SpecError as exc:
        return ModelsFit(None, f"not checked: {exc}")
    bad = []
    for m in models:
        weights, need = needs[m["name"]]
        share_gb = m["memory_share"] * capacity
        ok = need <= share_gb
        lines.append(f"{m['name']} ({m['placement']}) needs {need:.1f} GB (weights "
                     f"{weights:.1f} GB) of its share {m['memory_share']:g} × {capacity:.1f} GB "
                     f"= {share_gb:.1f} GB{'' if ok else ': DOES NOT FIT'}")
        if not ok:
            bad.append(m["name"])
    resident = sum(m["memory_share"] for m in models if m["placement"] == "resident")
    swapped = [m for m in models if m["placement"] == "swapped"]
    awake = max((m["memory_share"] for m in swapped), default=0.0)
    total = resident + awake
    shares_ok = total <= 1 + 1e-9
    lines.append(f"shares: resident {resident:g} + largest swapped {awake:g} = {total:g} of the "
                 f"node{'' if shares_ok else ': MORE THAN 1'}")
    host_ok = True
    level1 = sorted((needs[m["name"]][0] for m in swapped if m["sleep_level"] == 1),
                    reverse=True)
    if level1[1:]:
        host = HOST_MEMORY_GB.get(candidate.instance_type)
        asleep = sum(level1[1:])
        if host is None:
            lines.append(f"host memory not checked: {candidate.instance_type} unknown "
                         f"(sleeping level-1 weights {asleep:.1f} GB)")
        else:
            host_ok = asleep <= host
            lines.append(f"host memory: sleeping level-1 weights {asleep:.1f} GB of "
                         f"{host} GB{'' if host_ok else ': DOES NOT FIT'}")
    fits = not bad and shares_ok and host_ok
    verdict = "fits" if fits else "DOES NOT FIT"
    return ModelsFit(fits, f"{verdict} ({len(models)} models on one "
                           f"{candidate.instance_type} TP={candidate.tensor_parallel}): "
                           + "; ".join(lines),
                     sum(w for w, _ in needs.values()), capacity)
