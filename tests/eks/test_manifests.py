"""Rendered manifests against golden files (regenerate: SERVINGBENCH_UPDATE_GOLDEN=1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from resources.model_server.kube.render import EngineSpec, render, to_yaml
from tests.support.eks.specs import DIGEST, GOLDEN, SGLANG_GPU, VLLM_GPU, VLLM_NEURON

GOLDEN_DIR = Path(__file__).parent / "golden"


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_manifest_matches_golden(name):
    text = to_yaml(render(GOLDEN[name]))
    path = GOLDEN_DIR / f"{name}.yaml"
    if os.environ.get("SERVINGBENCH_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs; review, then regenerate"
    assert "&id" not in text and "*id" not in text  # no YAML aliases


def container(spec):
    return render(spec)[0]["spec"]["template"]["spec"]["containers"][0]


def test_gpu_flags_resources_and_probes():
    c = container(VLLM_GPU)
    assert c["args"][c["args"].index("--tensor-parallel-size") + 1] == "8"
    assert c["args"][c["args"].index("--max-model-len") + 1] == "131072"
    assert c["args"][c["args"].index("--kv-cache-dtype") + 1] == "fp8"
    assert "--enable-expert-parallel" not in c["args"] and "--quantization" not in c["args"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert c["startupProbe"]["httpGet"]["path"] == "/health"
    assert c["readinessProbe"]["httpGet"]["path"] == "/v1/models"
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    s = container(SGLANG_GPU)
    assert s["command"] == ["python3", "-m", "sglang.launch_server"]
    assert s["args"][s["args"].index("--ep-size") + 1] == "8"
    assert s["args"][s["args"].index("--quantization") + 1] == "fp8"


def test_neuron_uses_neuron_devices_and_config():
    c = container(VLLM_NEURON)
    assert c["resources"]["limits"]["aws.amazon.com/neuron"] == "16"
    assert "nvidia.com/gpu" not in c["resources"]["limits"]
    cfg = c["args"][c["args"].index("--override-neuron-config") + 1]
    assert yaml.safe_load(cfg)["logical_nc_config"] == 2
    pod = render(VLLM_NEURON)[0]["spec"]["template"]["spec"]
    assert pod["tolerations"][0]["key"] == "aws.amazon.com/neuron"
    assert pod["nodeSelector"] == {"eks.amazonaws.com/nodegroup": VLLM_NEURON.nodegroup}


def test_no_secret_is_rendered_only_referenced():
    env = container(VLLM_GPU)["env"]
    hf = next(e for e in env if e["name"] == "HF_TOKEN")
    assert "value" not in hf and hf["valueFrom"]["secretKeyRef"]["name"] == "hf-token"


@pytest.mark.parametrize("change, message", [
    ({"image": "vllm/vllm-openai:latest"}, "pinned by digest"),
    ({"engine": "sglang", "accelerator": "neuron"}, "unsupported engine/accelerator"),
    ({"tensor_parallel": 0}, ">= 1"),
])
def test_bad_specs_are_refused(change, message):
    fields = {**VLLM_GPU.__dict__, **change}
    with pytest.raises(ValueError, match=message):
        EngineSpec(**fields)
    assert DIGEST.startswith("sha256:")
