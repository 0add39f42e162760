"""Rendered manifests against golden files (regenerate: SERVINGBENCH_UPDATE_GOLDEN=1)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from servingbench.resources.contract import settings
from servingbench.resources.model_server.kube.render import (
    API_KEY_ENV,
    LOADGEN_LABELS,
    EngineSpec,
    api_key_secret,
    render,
    to_yaml,
)

from tests.support.eks.specs import DIGEST, GOLDEN, SGLANG_GPU, VLLM_GPU, VLLM_NEURON

GOLDEN_DIR = Path(__file__).parent / "golden"


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_manifest_matches_golden(name):
    text = to_yaml(render(GOLDEN[name]))
    path = GOLDEN_DIR / f"{name}.yaml"
    if settings.get("SERVINGBENCH_UPDATE_GOLDEN") == "1":
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
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
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


K8S_VERSION = "1.33"  # the EKS version the tests' cluster runs (tests/support/eks/aws.py)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_rendered_manifests_are_valid_kubernetes_objects(name):
    import kubernetes_validate

    spec = GOLDEN[name]
    for obj in [*render(spec), api_key_secret(spec, "not-a-real-key")]:
        # strict: a misspelt field (unknown to the schema) fails, not only a wrong type
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_schema_validation_can_fail():
    import kubernetes_validate

    deployment = render(VLLM_GPU)[0]
    deployment["spec"]["template"]["spec"]["automountServiceAccountTokn"] = False
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


@pytest.mark.parametrize("spec", [VLLM_GPU, SGLANG_GPU, VLLM_NEURON], ids=["vllm", "sglang", "neuron"])
def test_engine_pods_are_locked_down(spec):
    deployment, service, policy = render(spec)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = pod["containers"][0]["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    if spec.run_as_user is None:  # the stock engine images run as root
        assert "runAsNonRoot" not in sc
    else:
        assert sc["runAsNonRoot"] is True and sc["runAsUser"] == spec.run_as_user
    # the API key: from the per-run Secret, never a literal and never an argument (some
    # engine versions print their arguments at start, and /proc shows them to every process
    # of the node): vLLM reads VLLM_API_KEY, SGLang its `--config` file, mounted read-only
    # from the Secret
    c = pod["containers"][0]
    env_name = spec.runtime.api_key_env or API_KEY_ENV
    key_env = next(e for e in c["env"] if e["name"] == env_name)
    assert key_env["valueFrom"]["secretKeyRef"] == {"name": spec.api_key_secret, "key": "key"}
    assert "--api-key" not in c["args"]
    assert not any("API_KEY" in a or "$(" in a for a in c["args"])
    if spec.runtime.api_key_env:
        assert spec.engine.startswith("vllm") and env_name == "VLLM_API_KEY"
    else:
        assert spec.engine == "sglang"
        path = c["args"][c["args"].index("--config") + 1]
        mount = next(m for m in c["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
        assert mount["readOnly"] is True
        volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
        assert volume["secret"]["secretName"] == spec.api_key_secret
        item = volume["secret"]["items"][0]
        assert path == f"{mount['mountPath']}/{item['path']}" and path.endswith(".yaml")
        key = "k3y-with:colon #and 'quotes\""  # whatever the key, YAML reads it back whole
        secret = api_key_secret(spec, key)
        assert yaml.safe_load(secret["stringData"][item["key"]]) == {"api-key": key}
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"  # a probe cannot send the key
    # ingress to the engine only from the load generator
    assert policy["kind"] == "NetworkPolicy" and policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/instance": spec.name}
    peers = policy["spec"]["ingress"][0]["from"]
    if spec.expose == "load_balancer":
        assert [p["ipBlock"]["cidr"] for p in peers] == list(spec.source_ranges)
        tags = service["metadata"]["annotations"][
            "service.beta.kubernetes.io/aws-load-balancer-additional-resource-tags"]
        assert f"servingbench:owner={spec.owner}" in tags
    else:
        assert peers == [{"podSelector": {"matchLabels": LOADGEN_LABELS}}]


@pytest.mark.parametrize("change, message", [
    ({"expose": "load_balancer", "source_ranges": ("0.0.0.0/0",)}, "not a private range"),
    ({"expose": "load_balancer", "source_ranges": ("::/0",)}, "not a private range"),
    ({"expose": "load_balancer", "source_ranges": ("10.0.0.0/8", "128.0.0.0/1")},
     "128.0.0.0/1 is not a private range"),
    ({"expose": "load_balancer", "source_ranges": ("10.0.0.0/8",), "lb_scheme": "internet-facing"},
     "SERVINGBENCH_EKS_ALLOW_PUBLIC"),
    ({"expose": "load_balancer", "source_ranges": ("not-a-cidr",)}, "not a CIDR"),
    ({"run_as_user": 0}, "non-root uid"),
])
def test_public_exposure_needs_consent(change, message):
    with pytest.raises(ValueError, match=message):
        EngineSpec(**{**VLLM_GPU.__dict__, **change})
    if "source_ranges" in change and "CIDR" not in message:  # with consent it renders
        EngineSpec(**{**VLLM_GPU.__dict__, **change, "allow_public": True})


def test_the_api_key_secret_is_built_but_never_in_the_rendered_files():
    secret = api_key_secret(VLLM_GPU, "k-123")
    assert secret["stringData"] == {"key": "k-123"}
    assert all(o["kind"] != "Secret" for o in render(VLLM_GPU))
