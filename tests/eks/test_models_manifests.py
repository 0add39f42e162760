"""Several models on one node on EKS (kube/models.py): one vLLM Deployment per model pinned
to the same node, each with its served name and memory share, the swapped ones in sleep
mode; valid Kubernetes objects (strict schema), refused where no sleep mode exists."""

from __future__ import annotations

import pytest
from servingbench.resources.model_server.kube.models import MODEL_SET_LABEL, render_models
from servingbench.resources.model_server.kube.render import api_key_secret

from tests.support.eks.specs import VLLM_GPU, VLLM_NEURON

K8S_VERSION = "1.33"
SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
MODELS = [
    {"name": "scout-bf16", "model": SCOUT, "precision": "bf16", "placement": "resident",
     "memory_share": 0.55, "request_share": 0.5, "sleep_level": None},
    {"name": "scout-fp8", "model": SCOUT, "precision": "fp8", "placement": "swapped",
     "memory_share": 0.4, "request_share": 0.5, "sleep_level": 1},
]


def _by_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def test_one_deployment_per_model_on_the_same_node():
    objects = render_models(VLLM_GPU, MODELS, {"bf16": None, "fp8": "fp8"})
    deployments = _by_kind(objects, "Deployment")
    services = _by_kind(objects, "Service")
    assert len(deployments) == len(services) == len(_by_kind(objects, "NetworkPolicy")) == 2
    names = [d["metadata"]["name"] for d in deployments]
    assert len(set(names)) == 2 and all(len(n) <= 63 for n in names)
    assert [s["metadata"]["name"] for s in services] == names
    for d in deployments:
        pod = d["spec"]["template"]
        assert pod["spec"]["nodeSelector"] == {"eks.amazonaws.com/nodegroup": VLLM_GPU.nodegroup}
        term = pod["spec"]["affinity"]["podAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        assert term["labelSelector"]["matchLabels"][MODEL_SET_LABEL] \
            == pod["metadata"]["labels"][MODEL_SET_LABEL]
        # each Service selects its own model's pods only
    for d, s in zip(deployments, services, strict=True):
        assert s["spec"]["selector"]["app.kubernetes.io/instance"] \
            == d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/instance"] \
            == d["metadata"]["name"]


def test_served_name_share_and_sleep_mode():
    resident, swapped = _by_kind(render_models(VLLM_GPU, MODELS, {"fp8": "fp8"}), "Deployment")
    r = resident["spec"]["template"]["spec"]["containers"][0]
    s = swapped["spec"]["template"]["spec"]["containers"][0]
    assert r["args"][r["args"].index("--served-model-name") + 1] == "scout-bf16"
    assert r["args"][r["args"].index("--gpu-memory-utilization") + 1] == "0.495"
    assert r["args"].count("--served-model-name") == 1
    assert "--enable-sleep-mode" not in r["args"]
    assert "VLLM_SERVER_DEV_MODE" not in {e["name"] for e in r["env"]}
    assert "--enable-sleep-mode" in s["args"]
    assert {"name": "VLLM_SERVER_DEV_MODE", "value": "1"} in s["env"]
    assert s["args"][s["args"].index("--quantization") + 1] == "fp8"
    assert s["args"][s["args"].index("--gpu-memory-utilization") + 1] == "0.36"


def test_rendered_objects_are_valid_kubernetes_objects():
    import kubernetes_validate

    for obj in [*render_models(VLLM_GPU, MODELS), api_key_secret(VLLM_GPU, "not-a-real-key")]:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_engines_share_the_runs_api_key_secret():
    objects = render_models(VLLM_GPU, MODELS)
    refs = {e["valueFrom"]["secretKeyRef"]["name"]
            for d in _by_kind(objects, "Deployment")
            for e in d["spec"]["template"]["spec"]["containers"][0]["env"]
            if e.get("valueFrom", {}).get("secretKeyRef", {}).get("key") == "key"}
    assert refs == {VLLM_GPU.api_key_secret}


def test_no_sleep_mode_no_several_models():
    with pytest.raises(ValueError, match="vLLM on GPUs only"):
        render_models(VLLM_NEURON, MODELS)
    with pytest.raises(ValueError, match="at least two, each name once"):
        render_models(VLLM_GPU, [MODELS[0], MODELS[0]])
