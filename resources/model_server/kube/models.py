"""Manifests for several models on one node (a candidate's `models`, contract/deployment.py SeveralModels):
one vLLM Deployment (and its Service and NetworkPolicy, render.py) per model, all pinned to
the same node.

* Each model's engine gets `--served-model-name NAME` (the name requests address) and
  `--gpu-memory-utilization` = its memory_share × vLLM's default 0.9 of every accelerator,
  so the engines share the accelerators' memory as the fit check divided it.
* Resident: loaded for the whole run. Swapped: started in the engine's sleep mode
  (engines/<engine>.py `sleep_mode`: vLLM's flag and its development mode, which alone
  serves the sleep and wake-up calls); the swap driver (model_server/swap/driver.py) puts
  all but one to sleep and swaps them as requests arrive. Development mode also serves
  `/collective_rpc`, `/server_info`, the cache resets, …, and the API key guards none of
  them (they are not under `/v1`): a swapped model's Service is in-cluster only (never a
  load balancer) and its NetworkPolicy admits the swap driver alone, the run's pod
  (`servingbench/role: swap-driver` in the runs' namespace), never the load pods nor the
  load balancers' source ranges. A resident model's engine is exposed as a single one is.
* Same node: the node group's nodeSelector (one node) and a required podAffinity on
  `kubernetes.io/hostname` to the run's other engines (label `servingbench/model-set`).
  Every pod asks for all the node's accelerators, so the node group's NVIDIA device plugin
  must share them (time-slicing, `replicas` ≥ the number of models: docs/models.md); the
  memory limit of each engine is its own `--gpu-memory-utilization`, not the plugin's.
Only vLLM on GPUs: vLLM on Neuron and SGLang have no sleep mode, and several Neuron engines
cannot share the NeuronCores of one device.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

from servingbench.resources.model_server.kube.render import (
    SWAP_DRIVER_LABELS,
    EngineSpec,
    render,
)

MODEL_SET_LABEL = "servingbench/model-set"
VLLM_MEMORY_UTILIZATION = 0.9   # vLLM's default --gpu-memory-utilization


def _dns(text: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", text.lower()).strip("-")


def model_name(base: EngineSpec, model: str) -> str:
    """The Deployment and Service name of one model: the engine's name and the model's,
    a DNS-1035 label of at most 63 characters."""
    tail = _dns(model)[:20]
    return f"{base.name[:62 - len(tail)].rstrip('-')}-{tail}"


def render_models(base: EngineSpec, models, quantization: dict | None = None,
                  driver_namespace: str = "dagster") -> list[dict]:
    """[Deployment, Service, NetworkPolicy] per model, in the order listed. `quantization`:
    precision -> the engine's --quantization value (engines/<engine>.py), None for none.
    `driver_namespace`: where the run's pod, the swap driver's, runs (the Dagster runs')."""
    sleep = base.runtime.sleep_mode
    if sleep is None or base.accelerator != "nvidia":
        raise ValueError(f"several models on one node run on vLLM on GPUs only (sleep mode, "
                         f"shared accelerators), not {base.engine} on {base.accelerator}")
    names = [m["name"] for m in models]
    if len(set(names)) != len(names) or len(names) < 2:
        raise ValueError("models: at least two, each name once")
    out: list[dict] = []
    for m in models:
        swapped = m["placement"] == "swapped"
        util = round(m["memory_share"] * VLLM_MEMORY_UTILIZATION, 4)
        spec = replace(base, model=m["model"],
                       quantization=(quantization or {}).get(m["precision"]))
        if swapped:  # in-cluster only: its dev-mode endpoints reach no load balancer
            spec = replace(spec, expose="cluster_ip", source_ranges=(), lb_scheme="internal",
                           allow_public=False)
        objects = _renamed(render(spec), spec.name, model_name(base, m["name"]))
        deployment = objects[0]
        pod = deployment["spec"]["template"]
        engine = pod["spec"]["containers"][0]
        engine["args"] = [*_without(engine["args"], ("--served-model-name",
                                                     "--gpu-memory-utilization")),
                          "--served-model-name", m["name"],
                          "--gpu-memory-utilization", f"{util:g}",
                          *(sleep.args if swapped else ())]
        for meta in (deployment["metadata"], pod["metadata"]):
            meta["labels"][MODEL_SET_LABEL] = base.name
            meta["annotations"]["servingbench/model"] = m["name"]
            meta["annotations"]["servingbench/placement"] = m["placement"]
        pod["spec"]["affinity"] = {"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {MODEL_SET_LABEL: base.name}},
                "topologyKey": "kubernetes.io/hostname"}]}}
        if swapped:
            engine["env"] += [{"name": k, "value": v} for k, v in sleep.env.items()]
            objects[2]["spec"]["ingress"][0]["from"] = [driver_peer(driver_namespace)]
        out += objects
    return out


def driver_peer(namespace: str) -> dict:
    """The one source a swapped model's NetworkPolicy admits: the swap driver, in the run's
    pod (labelled `servingbench/role: swap-driver`, deploy/values.yaml) in the runs'
    namespace."""
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "podSelector": {"matchLabels": dict(SWAP_DRIVER_LABELS)}}


def _without(args: list[str], options: tuple[str, ...]) -> list[str]:
    """The arguments less each of `options` and its value (set again per model)."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in options:
            skip = True
        elif not any(a.startswith(o + "=") for o in options):
            out.append(a)
    return out


def _renamed(objects: list[dict], old: str, new: str) -> list[dict]:
    """Every string value that is exactly the engine's name becomes the model's (names,
    the instance label, selectors); the API key Secret's name, which only starts with it,
    stays: the run's engines share one key."""
    text = json.dumps(objects)
    return json.loads(text.replace(json.dumps(old), json.dumps(new)))
