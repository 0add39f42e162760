"""An autoscaled spot candidate through the eks ModelServer (resources/model_server/kube/
server.py), against the fake Kubernetes API: its ScaledObject is applied with the engine
and deleted first, the Deployment starts at replicas.initial, and the run's node and
replica events land in events.parquet while the engine is up and after it goes."""

from __future__ import annotations

import boto3
import pyarrow.parquet as pq
import pytest
from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.deployment import plan_of
from servingbench.resources.contract.schemas import EVENTS
from servingbench.resources.contract.scope import ClusterInfo
from servingbench.resources.model_server.kube.client import KubeClient
from servingbench.resources.model_server.kube.server import KubeModelServer, writes_events
from servingbench.resources.model_server.kube.token import TokenSource

from tests.support.eks.aws import DUMMY_KEY_ID, REGION
from tests.support.eks.fake_kube import FakeKubeApi
from tests.support.eks.specs import DIGEST

RUN_ID = "20261129T020000Z-p5.48xlarge-scout-bf16-7f3a"
NG = "sb-20261129T020000Z-p5-48xlarge-scout-bf16-e8eff455"
PROM = "http://prometheus-server.monitoring.svc.cluster.local"


def candidate(capacity: str | None = None, **keys) -> Candidate:
    """`keys`: the candidates file's deployment keys (replicas, autoscaling, ...)."""
    return Candidate(name="p5-scout-bf16-tp8", instance_type="p5.48xlarge",
                     model="meta-llama/Llama-4-Scout-17B-16E-Instruct", precision="bf16",
                     tensor_parallel=8, image_digest=f"vllm/vllm-openai@{DIGEST}",
                     capacity=capacity, deployment=plan_of({"capacity": capacity, **keys}))


SCALED = candidate(replicas={"min": 1, "max": 4, "initial": 2}, capacity="spot",
                   autoscaling={"policy": "keda", "metric": "requests_waiting", "target": 4,
                                "activation_target": 1, "scale_down_cooldown_s": 120})


def test_an_autoscaled_spot_candidate_deploys_with_its_scaler_and_writes_events(aws_env, tmp_path):
    info = ClusterInfo(facts={"nodegroup": NG}, phases={}, host={}, handle=None)
    with FakeKubeApi(cluster="bench", key_id=DUMMY_KEY_ID, ready_after=2) as api:
        api.nodes["n1"] = {"metadata": {"name": "n1", "creationTimestamp": "2026-11-29T02:05:00Z",
                                        "labels": {"eks.amazonaws.com/nodegroup": NG}},
                           "status": {"conditions": [{"type": "Ready", "status": "True",
                                                      "lastTransitionTime": "2026-11-29T02:06:00Z"}]}}

        def kube():
            return KubeClient(api.url, TokenSource.for_eks(boto3.Session(),
                                                           "bench", REGION), sleep=lambda s: None)

        server = KubeModelServer(kube, expose="cluster_ip", poll_s=0, prometheus_url=PROM,
                                 events_every_s=3600)
        run_dir = tmp_path / RUN_ID
        with server.deploy(SCALED, info, run_dir) as dep:
            kinds = sorted(o["kind"] for o in api.objects.values())
            assert kinds == ["Deployment", "NetworkPolicy", "ScaledObject", "Secret", "Service"]
            deployment = next(o for o in api.objects.values() if o["kind"] == "Deployment")
            assert deployment["spec"]["replicas"] == 2
            so = next(o for o in api.objects.values() if o["kind"] == "ScaledObject")
            assert so["spec"]["triggers"][0]["metadata"]["serverAddress"] == PROM
            assert dep.details["compile_cache"] is None  # vLLM on GPU: no compile cache markers
        assert api.objects == {}
        assert api.deleted.index(f"ScaledObject/{so['metadata']['name']}") < \
            api.deleted.index(f"Deployment/{so['metadata']['name']}")
    table = pq.read_table(run_dir / "events.parquet")
    assert table.schema.equals(EVENTS)
    kinds = table.column("kind").to_pylist()
    assert kinds.count("node_ready") == 1 and kinds.count("replica_ready") == 1
    assert kinds.count("replica_stopped") == 1  # the last poll, after the Deployment went
    assert set(table.column("run_id").to_pylist()) == {RUN_ID}


def test_a_fixed_candidate_writes_no_events_and_keeps_one_pod():
    fixed = candidate()
    assert not writes_events(fixed)
    assert writes_events(candidate(capacity="spot"))
    assert writes_events(candidate(replicas={"min": 2, "max": 2}))


def test_what_eks_cannot_run_is_refused_naming_the_key_and_deploy_stops_before_kube():
    bad = candidate(autoscaling={"policy": "local", "metric": "requests_waiting", "target": 1})
    server = KubeModelServer(lambda: pytest.fail("asked for a kube client"))
    assert server.refuses(bad).startswith("autoscaling.policy: 'local' does not run on eks")
    assert server.refuses(SCALED) is None
    info = ClusterInfo(facts={"nodegroup": NG}, phases={}, host={}, handle=None)
    with pytest.raises(ValueError, match="candidate p5-scout-bf16-tp8: autoscaling.policy"), \
            server.deploy(bad, info, "/nonexistent/run"):
        pass
