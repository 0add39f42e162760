"""The eks profile behind the pipeline's interfaces (Cluster, ModelServer, BillSource):
moto for AWS, the fake Kubernetes API for the deployment."""

from __future__ import annotations

import dataclasses
import os

import httpx
import pytest
from servingbench.resources.billing.cost_explorer import CostExplorerBill
from servingbench.resources.cluster.eks import EksNodegroupCluster
from servingbench.resources.cluster.eks_api import EksNodegroups
from servingbench.resources.contract import manifest as mf
from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.model_server.kube.client import KubeClient
from servingbench.resources.model_server.kube.deploy import EngineDeployment
from servingbench.resources.model_server.kube.server import (
    LOAD_API_KEY_ENV,
    KubeModelServer,
    engine_spec_for,
)
from servingbench.resources.model_server.kube.token import TokenSource

from tests.support.eks.aws import DUMMY_KEY_ID, OWNER, REGION, ROLE, make_cluster
from tests.support.eks.billdata import ACCOUNT, PAGES, RUN_ID
from tests.support.eks.fake_kube import LB_HOST, FakeKubeApi
from tests.support.eks.specs import DIGEST, VLLM_GPU

IMAGE = f"vllm/vllm-openai@{DIGEST}"
SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"


def candidate(**kw):
    base = dict(name="p5-scout-bf16-tp8", instance_type="p5.48xlarge", model=SCOUT,
                precision="bf16", tensor_parallel=8, image_digest=IMAGE)
    return Candidate(**{**base, **kw})


@pytest.mark.parametrize("kw, tp, devices, accel, quant", [
    ({}, 8, 8, "nvidia", None),
    ({"precision": "fp8", "expert_parallel": True}, 8, 8, "nvidia", "fp8"),
    ({"instance_type": "trn2.48xlarge", "tensor_parallel": 16, "engine": "vllm-neuron"}, 64, 16, "neuron", None),
    ({"instance_type": "inf2.48xlarge", "tensor_parallel": 12, "engine": "vllm-neuron"}, 24, 12, "neuron", None),
])
def test_engine_spec_for_candidates(kw, tp, devices, accel, quant):
    spec = engine_spec_for(candidate(**kw), RUN_ID, "sb-ng")
    assert (spec.tensor_parallel, spec.devices, spec.accelerator, spec.quantization) == (
        tp, devices, accel, quant)


@pytest.mark.parametrize("kw, message", [
    ({"image_digest": None}, "image_digest is null"),
    ({"precision": "int4"}, "pre-quantized checkpoint"),
    ({"instance_type": "p5.48xlarge", "engine": "vllm-neuron"}, "not a Neuron instance"),
])
def test_engine_spec_refuses_what_eks_cannot_run(kw, message):
    with pytest.raises(ValueError, match=message):
        engine_spec_for(candidate(**kw), RUN_ID, "sb-ng")


def test_provision_deploy_teardown_through_the_pipeline_interfaces(moto, tmp_path):
    endpoint, session = moto
    eks_api, _, _ = make_cluster(endpoint, session)
    eks = EksNodegroups(session, "bench", REGION, node_role_arn=ROLE, owner=OWNER, endpoint_url=endpoint,
                     poll_s=0.1)
    cluster = EksNodegroupCluster(eks, timeout_s=10)
    cand = candidate()
    info = cluster.provision(cand, RUN_ID)
    m = mf.empty(RUN_ID, "measured", 0)
    m.update(info.facts)
    m["phases"].update(info.phases)
    mf.validate(m)
    assert info.facts["account_id"] == ACCOUNT and info.facts["node_count"] == 1
    with FakeKubeApi(cluster="bench", key_id=DUMMY_KEY_ID, ready_after=2) as api:
        def kube():
            return KubeClient(api.url, TokenSource.for_eks(session, "bench", REGION),
                              sleep=lambda s: None)

        server = KubeModelServer(kube, expose="cluster_ip", poll_s=0)
        run_dir = tmp_path / RUN_ID
        try:
            with server.deploy(cand, info, run_dir) as dep:
                assert dep.emulated is False and dep.served_model == SCOUT
                assert dep.endpoint.endswith(".servingbench.svc.cluster.local:8000")
                assert set(dep.phases) == {"deploy", "image_pull", "weights_load", "compile", "ready"}
                m["phases"].update(dep.phases)
                m.update(dep.facts)
                mf.validate(m)
                kinds = sorted(o["kind"] for o in api.objects.values())
                assert kinds == ["Deployment", "NetworkPolicy", "Secret", "Service"]
                secret = next(o for o in api.objects.values() if o["kind"] == "Secret")
                key = secret["stringData"]["key"]
                assert len(key) >= 32 and dep.api_key_env == LOAD_API_KEY_ENV
                assert os.environ[dep.api_key_env] == key  # what the load generator sends
            assert api.objects == {}
            assert LOAD_API_KEY_ENV not in os.environ
        finally:
            cluster.teardown(info)
    assert eks_api.list_nodegroups(clusterName="bench")["nodegroups"] == []


def test_load_balancer_address_is_awaited(moto):
    _, session = moto
    spec = dataclasses.replace(VLLM_GPU, expose="load_balancer", source_ranges=("10.0.0.0/16",))
    with FakeKubeApi(cluster="bench", key_id=DUMMY_KEY_ID) as api:
        kube = KubeClient(api.url, TokenSource.for_eks(session, "bench", REGION),
                          sleep=lambda s: None)
        EngineDeployment(kube, spec).apply()
        svc = next(o for o in api.objects.values() if o["kind"] == "Service")
        assert svc["spec"]["type"] == "LoadBalancer"
        assert svc["spec"]["loadBalancerSourceRanges"] == ["10.0.0.0/16"]
        assert svc["metadata"]["annotations"][
            "service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal"
        assert kube.wait_load_balancer(spec.name, timeout_s=60, poll_s=0) == LB_HOST


def test_load_balancer_needs_source_ranges():
    with pytest.raises(ValueError, match="needs source_ranges"):
        dataclasses.replace(VLLM_GPU, expose="load_balancer")


def test_cost_explorer_bill_source_fetches_the_runs_window(moto, monkeypatch):
    endpoint, session = moto
    from servingbench.resources.billing.cost_explorer import CostExplorerApi

    httpx.post(f"{endpoint}/moto-api/static/ce/cost-and-usage-results", json={"results": PAGES})
    billing = CostExplorerApi(session, endpoint_url=endpoint,
                                  clock=lambda: mf.parse_ts("2026-11-29T12:00:00Z"))
    m = mf.empty(RUN_ID, "measured", 0)
    m.update(instance_type="p5.48xlarge", region=REGION, account_id=ACCOUNT, node_count=1)
    m["phases"]["provision"] = {"started_at": "2026-11-29T02:10:00Z", "ended_at": "2026-11-29T02:19:00Z"}
    m["phases"]["steady"] = {"started_at": "2026-11-29T02:45:00Z", "ended_at": "2026-11-29T03:05:00Z"}
    bill = CostExplorerBill(billing).fetch_bill(m)
    assert bill.num_rows == 3 and set(bill.column("source").to_pylist()) == {"cost_explorer"}
