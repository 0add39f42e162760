"""The autoscaling manifests (resources/model_server/kube/autoscale.py) are valid against the
real schemas: KEDA's ScaledObject CRD (vendored in tests/fixtures/crds/, checked strictly:
a field the CRD does not declare is an error, as `kubectl apply --validate=strict` makes it),
and Kubernetes' own autoscaling/v2 HPA (kubernetes-validate). They read the engine's own
gauges and follow the candidate's replicas and autoscaling keys."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from servingbench.resources.contract.deployment import METRICS, Autoscaling, Replicas
from servingbench.resources.model_server import engines
from servingbench.resources.model_server.kube import autoscale
from servingbench.resources.model_server.kube.deploy import EngineDeployment

from tests.support.eks.specs import VLLM_GPU, VLLM_NEURON

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "tests/fixtures/crds"
K8S = "1.33"
PROM = "http://prometheus-server.monitoring.svc.cluster.local:80"
R = Replicas(min=1, max=4, initial=2)
A = Autoscaling(policy="keda", metric="requests_waiting", target=5, activation_target=1,
                scale_up_cooldown_s=30, scale_down_cooldown_s=600)


def strict(schema: dict) -> dict:
    """The CRD schema with every declared object closed (additionalProperties: false) unless
    it preserves unknown fields or declares a map: a misspelt key fails, as the API server's
    strict field validation fails it."""
    out = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(out)
    return out


def crd(name: str) -> dict:
    path = CRDS / name
    assert "source: github.com/" in path.read_text().splitlines()[1]  # the header names it
    return strict(yaml.safe_load(path.read_text()))


SCALED_OBJECT = crd("keda.sh_scaledobjects.v1alpha1.yaml")


@pytest.mark.parametrize("spec", [VLLM_GPU, VLLM_NEURON], ids=["vllm", "vllm-neuron"])
@pytest.mark.parametrize("metric", METRICS)
def test_scaled_object_is_valid_against_kedas_crd(spec, metric):
    obj = autoscale.scaled_object(spec, R, Autoscaling("keda", metric, 0.8), PROM)
    jsonschema.validate(obj, SCALED_OBJECT)
    assert obj["spec"]["scaleTargetRef"]["name"] == spec.name


def test_the_crd_check_can_fail():
    obj = autoscale.scaled_object(VLLM_GPU, R, A, PROM)
    bad = copy.deepcopy(obj)
    bad["spec"]["minReplicas"] = 1  # the HPA's spelling, not KEDA's
    with pytest.raises(jsonschema.ValidationError, match="minReplicas"):
        jsonschema.validate(bad, SCALED_OBJECT)
    bad = copy.deepcopy(obj)
    bad["spec"]["triggers"][0]["metadata"]["threshold"] = 5  # metadata values are strings
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCALED_OBJECT)
    bad = copy.deepcopy(obj)
    del bad["spec"]["scaleTargetRef"]["name"]
    with pytest.raises(jsonschema.ValidationError, match="name"):
        jsonschema.validate(bad, SCALED_OBJECT)


def test_scaled_object_follows_the_candidate_keys():
    spec = autoscale.scaled_object(VLLM_GPU, R, A, PROM)["spec"]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 4)
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleUp"]["stabilizationWindowSeconds"] == 30
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 600
    trigger = spec["triggers"][0]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    assert trigger["metadata"]["threshold"] == "5"
    assert trigger["metadata"]["activationThreshold"] == "1"
    waiting = engines.get("vllm").gauges["requests_waiting"][0]
    assert trigger["metadata"]["query"] == (
        f'sum({waiting}{{namespace="servingbench",pod=~"{VLLM_GPU.name}-.*"}})')


def test_the_query_reads_every_name_the_engine_gives_a_gauge():
    """vLLM renamed its KV gauge: the query reads both names, whichever the image serves."""
    q = autoscale.query(VLLM_GPU, "kv_cache_usage")
    for name in engines.get("vllm").gauges["kv_cache_usage"]:
        assert f"sum({name}{{" in q
    assert " or " in q
    rps = autoscale.query(VLLM_NEURON, "rps")
    assert rps.startswith(f"sum(rate({engines.get('vllm-neuron').counters.finished}{{")


def test_no_gauge_name_is_spelled_outside_the_engines_package():
    text = (ROOT / "resources/model_server/kube/autoscale.py").read_text()
    assert not re.search(r"vllm:|sglang:", text)


@pytest.mark.parametrize("metric", ["requests_waiting", "requests_running", "kv_cache_usage"])
def test_hpa_is_valid_autoscaling_v2(metric):
    obj = autoscale.hpa(VLLM_GPU, Replicas(0, 3, 1), Autoscaling("hpa", metric, 0.75, 0, 0, 120))
    kubernetes_validate.validate(obj, K8S, strict=True)
    assert obj["spec"]["minReplicas"] == 1  # an HPA cannot scale to zero
    assert obj["spec"]["metrics"][0]["pods"]["metric"]["name"] == \
        engines.get("vllm").gauges[metric][0]


def test_hpa_check_can_fail():
    obj = autoscale.hpa(VLLM_GPU, R, Autoscaling("hpa", "requests_running", 8))
    obj["spec"]["minReplicaCount"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, K8S, strict=True)


def test_rps_needs_keda():
    with pytest.raises(ValueError, match="rps"):
        autoscale.hpa(VLLM_GPU, R, Autoscaling("hpa", "rps", 2))


def test_the_deployment_starts_at_initial_and_the_autoscaler_goes_last():
    dep = EngineDeployment(None, VLLM_GPU, replicas=R, autoscaling=A, prometheus_url=PROM)
    kinds = [o["kind"] for o in dep.objects]
    assert kinds == ["Secret", "NetworkPolicy", "Deployment", "Service", "ScaledObject"]
    deployment = dep.objects[2]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    kubernetes_validate.validate(deployment, K8S, strict=True)
    fixed = EngineDeployment(None, VLLM_GPU)
    assert [o["kind"] for o in fixed.objects][-1] == "Service"
    assert fixed.objects[2]["spec"]["replicas"] == 1
    with pytest.raises(ValueError, match="Prometheus"):
        EngineDeployment(None, VLLM_GPU, replicas=R, autoscaling=A)
