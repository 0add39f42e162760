"""A swapped model runs its engine's sleep mode, and vLLM serves sleep mode's calls only in
its development mode, which also serves `/collective_rpc`, `/server_info`, the cache resets,
…, none under `/v1`, so the API key guards none of them. What turns it on, and what it opens,
is the engine's declaration (engines/vllm.py `SLEEP_MODE`); kube rendering, the swap driver
and the eks deployment read it there. A swapped model's pod is reachable from the swap driver
alone (the run's pod): its Service is never a load balancer, its NetworkPolicy admits neither
the load pods nor the load balancers' source ranges; a swapped candidate on a profile that
opens engines to the internet is refused, consent or not, naming the key."""

from __future__ import annotations

import dataclasses

import kubernetes_validate
import pytest
from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.deployment import SeveralModels
from servingbench.resources.model_server import engines
from servingbench.resources.model_server.kube.models import render_models
from servingbench.resources.model_server.kube.render import LOADGEN_LABELS, SWAP_DRIVER_LABELS
from servingbench.resources.model_server.kube.server import KubeModelServer

from tests.support.eks.specs import DIGEST, VLLM_GPU

SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"


def _model(name, placement, share, level=None, requests=0.25):
    return {"name": name, "model": SCOUT, "model_revision": None, "precision": "bf16",
            "placement": placement, "memory_share": share, "request_share": requests,
            "sleep_level": level}


MODELS = [_model("res", "resident", 0.3, requests=0.5), _model("swp", "swapped", 0.6, 1),
          _model("two", "swapped", 0.6, 2)]
CANDIDATE = Candidate(name="p5-two", instance_type="p5.48xlarge", model=SCOUT, precision="bf16",
                      tensor_parallel=8, image_digest=f"vllm/vllm-openai@{DIGEST}",
                      deployment=SeveralModels.of(MODELS))
BEHIND_NLB = dataclasses.replace(VLLM_GPU, expose="load_balancer", source_ranges=("10.0.0.0/16",))


def _objects(kind: str, placement: str, objects: list[dict]) -> dict:
    (out,) = [o for o in objects if o["kind"] == kind
              and o["metadata"]["name"].endswith("-" + placement)]
    return out


def test_a_swapped_models_pod_admits_the_swap_driver_alone():
    objects = render_models(BEHIND_NLB, MODELS, {"bf16": None}, driver_namespace="runs")
    for o in objects:
        kubernetes_validate.validate(o, "1.33", strict=True)
    mode = engines.sleep_mode("vllm")
    swapped = _objects("Deployment", "swp", objects)["spec"]["template"]["spec"]["containers"][0]
    assert all(a in swapped["args"] for a in mode.args)
    assert {(e["name"], e.get("value")) for e in swapped["env"]} >= set(mode.env.items())
    resident = _objects("Deployment", "res", objects)["spec"]["template"]["spec"]["containers"][0]
    assert not set(mode.args) & set(resident["args"])
    assert not {e["name"] for e in resident["env"]} & set(mode.env)
    # the swapped model: no load balancer, ingress from the run's pod in the runs' namespace
    assert _objects("Service", "swp", objects)["spec"]["type"] == "ClusterIP"
    (rule,) = _objects("NetworkPolicy", "swp", objects)["spec"]["ingress"]
    assert rule["from"] == [{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "runs"}},
        "podSelector": {"matchLabels": SWAP_DRIVER_LABELS}}]
    assert SWAP_DRIVER_LABELS != LOADGEN_LABELS
    # the resident one is exposed as a single engine is: its load balancer, its source range
    assert _objects("Service", "res", objects)["spec"]["type"] == "LoadBalancer"
    (rule,) = _objects("NetworkPolicy", "res", objects)["spec"]["ingress"]
    assert rule["from"] == [{"ipBlock": {"cidr": "10.0.0.0/16"}}]


@pytest.mark.parametrize("exposure", [
    {"allow_public": True, "source_ranges": ("10.0.0.0/16",)},
    {"allow_public": True, "lb_scheme": "internet-facing", "source_ranges": ("10.0.0.0/16",)},
    {"allow_public": True, "source_ranges": ("0.0.0.0/0",)},
])
def test_a_swapped_candidate_with_public_exposure_is_refused_naming_the_key(exposure):
    server = KubeModelServer(lambda: pytest.fail("no cluster is touched"), **exposure)
    why = server.refuses(CANDIDATE)
    assert why is not None and why.startswith("models[1].placement: a swapped model runs vllm's "
                                              "development mode (/sleep, /wake_up")
    assert "/collective_rpc" in why and "no API key" in why
    resident_only = dataclasses.replace(CANDIDATE, deployment=SeveralModels.of(
        [MODELS[0], {**MODELS[1], "placement": "resident", "sleep_level": None,
                     "memory_share": 0.3}, {**MODELS[2], "placement": "resident",
                                             "sleep_level": None, "memory_share": 0.3}]))
    assert server.refuses(resident_only) is None
    assert KubeModelServer(lambda: None, source_ranges=("10.0.0.0/16",)).refuses(CANDIDATE) is None


def test_servingbench_run_exits_2_for_a_public_swapped_candidate(tmp_path, monkeypatch, capsys):
    from servingbench.pipelines.cli import main as cli

    from tests.support.eks.aws import OWNER, REGION, ROLE

    models = ", ".join("{" + ", ".join(f"{k}: {v}" for k, v in m.items() if v is not None) + "}"
                       for m in MODELS)
    path = tmp_path / "c.yaml"
    path.write_text(f"candidates:\n  - {{name: p5-two, instance_type: p5.48xlarge, model: {SCOUT}, "
                    f"precision: bf16, tensor_parallel: 8, image_digest: vllm/vllm-openai@{DIGEST}, "
                    f"models: [{models}]}}\n")
    env = {"SERVINGBENCH_EKS_CLUSTER": "bench", "SERVINGBENCH_EKS_REGION": REGION,
           "SERVINGBENCH_EKS_NODE_ROLE_ARN": ROLE, "SERVINGBENCH_EKS_OWNER": OWNER,
           "SERVINGBENCH_EKS_SOURCE_RANGES": "0.0.0.0/0",
           "SERVINGBENCH_EKS_ALLOW_PUBLIC": "plaintext-api-key", "SERVINGBENCH_PROFILE": "eks",
           "SERVINGBENCH_CANDIDATES": str(path), "DAGSTER_HOME": str(tmp_path),
           "SERVINGBENCH_DATA_DIR": str(tmp_path / "data")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert cli(["run", "--candidate", "p5-two"]) == 2
    err = capsys.readouterr().err
    assert "c.yaml" in err and "models[1].placement: a swapped model runs" in err
    assert "Traceback" not in err and not (tmp_path / "data" / "runs").exists()


def test_the_consent_text_names_development_mode():
    from servingbench.pipelines.eks_profile import EksSettings

    from tests.support.eks.aws import OWNER, REGION, ROLE

    with pytest.raises(ValueError, match=r"SERVINGBENCH_EKS_ALLOW_PUBLIC=plaintext-api-key .* "
                                         r"development mode, whose /sleep, /wake_up, "
                                         r"/is_sleeping, /collective_rpc"):
        EksSettings.from_env({"SERVINGBENCH_EKS_CLUSTER": "bench", "SERVINGBENCH_EKS_REGION": REGION,
                              "SERVINGBENCH_EKS_NODE_ROLE_ARN": ROLE, "SERVINGBENCH_EKS_OWNER": OWNER,
                              "SERVINGBENCH_EKS_SOURCE_RANGES": "0.0.0.0/0"})
