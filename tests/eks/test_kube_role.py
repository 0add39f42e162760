"""The Kubernetes Role that replaces the namespace's edit policy
(resources/model_server/kube/rbac.py, rendered in docs/policies/servingbench-role.yaml) is a
tested artifact: the engine's deployment (cluster IP and load balancer), the load Job and
the reaper run against the fake Kubernetes API, every request is checked against the Role
verb by verb, and the Role grants no verb the code never calls."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import boto3
import yaml
from servingbench.resources.loadjob.job import LoadJob
from servingbench.resources.loadjob.render import LoadJobSpec
from servingbench.resources.model_server.kube import autoscale, rbac
from servingbench.resources.model_server.kube.autoscale import Autoscaling, Replicas
from servingbench.resources.model_server.kube.client import KINDS, KubeClient
from servingbench.resources.model_server.kube.deploy import EngineDeployment
from servingbench.resources.model_server.kube.events import RunEvents
from servingbench.resources.model_server.kube.reap import KubeRunObjects
from servingbench.resources.model_server.kube.token import TokenSource

from tests.support.eks.aws import DUMMY_KEY_ID, OWNER, REGION
from tests.support.eks.fake_kube import FakeKubeApi
from tests.support.eks.specs import DIGEST, VLLM_GPU

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SCOPED = {(g, r) for g, r, _ in rbac.CLUSTER_RULES}
GROUP_OF = {path: path.split("/")[1] if path.startswith("apis/") else ""
            for path, _, _ in KINDS.values()}


def verb_of(request: dict, existed: bool) -> tuple[str, str, str]:
    """(verb, apiGroup, resource) of one request the fake API saw, as RBAC names them."""
    parts = request["path"].strip("/").split("/")
    core = parts[0] == "api"
    group = "" if core else parts[1]
    rest = parts[2:] if core else parts[3:]
    if rest[:1] == ["namespaces"]:
        rest = rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    method = request["method"]
    if method == "PATCH":  # server-side apply: create when the object is new, else patch
        return ("patch" if existed else "create"), group, resource
    if method == "DELETE":
        return "delete", group, resource
    return ("get" if len(rest) > 1 else "list"), group, resource


def used(api: FakeKubeApi) -> set[tuple[str, str, str]]:
    seen: set[str] = set()
    out = set()
    for r in api.requests:
        out.add(verb_of(r, r["path"] in seen))
        if r["method"] == "PATCH":
            out.add(("patch", *verb_of(r, True)[1:]))  # an apply re-run patches
            seen.add(r["path"])
    return out


def test_every_call_of_the_code_is_granted_and_nothing_more(aws_env):
    s3_bucket_uri = "s3://b/p"
    token = TokenSource.for_eks(boto3.Session(), "bench", REGION)
    with FakeKubeApi(cluster="bench", key_id=DUMMY_KEY_ID) as api:
        kube = KubeClient(api.url, token, sleep=lambda s: None)
        for spec in (VLLM_GPU, dataclasses.replace(VLLM_GPU, expose="load_balancer",
                                                   source_ranges=("10.0.0.0/16",))):
            with EngineDeployment(kube, spec).deployed(timeout_s=60, poll_s=0):
                if spec.expose == "load_balancer":  # what KubeModelServer waits for
                    kube.wait_load_balancer(spec.name, timeout_s=10, poll_s=0)
        # an autoscaled candidate of each policy, its node and replica events polled
        for policy in ("keda", "hpa"):
            scaling = Autoscaling(policy, "requests_waiting", 4)
            with EngineDeployment(kube, VLLM_GPU, replicas=Replicas(1, 3, 1), autoscaling=scaling,
                                  prometheus_url="http://prom:9090").deployed(timeout_s=60, poll_s=0):
                RunEvents(kube, VLLM_GPU, VLLM_GPU.nodegroup, clock=lambda: 0).poll()
        job = LoadJobSpec(run_id=VLLM_GPU.run_id, pods=1, image=f"r.example/sb@{DIGEST}",
                          upload_uri=f"{s3_bucket_uri}/runs/{VLLM_GPU.run_id}",
                          start_at="2026-11-29T02:30:00Z", owner=OWNER, api_key=True)
        with LoadJob(kube, job, api_key="not-a-real-key").running(timeout_s=60, poll_s=0):
            pass
        # the reaper finds an autoscaler a crashed run left, and deletes it
        kube.apply(autoscale.scaled_object(VLLM_GPU, Replicas(1, 3, 1),
                                           Autoscaling("keda", "rps", 2), "http://prom:9090"))
        kube.apply(autoscale.hpa(VLLM_GPU, Replicas(1, 3, 1),
                                 Autoscaling("hpa", "requests_running", 8)))
        KubeRunObjects(kube, OWNER).reap(lambda *a: True)
    assert {"ScaledObject/" + VLLM_GPU.name, "HorizontalPodAutoscaler/" + VLLM_GPU.name} <= set(api.deleted)
    role, cluster_role = rbac.role(), rbac.cluster_role()
    calls = used(api)
    cluster_calls = {c for c in calls if c[1:] in CLUSTER_SCOPED}
    calls -= cluster_calls
    assert sorted(c for c in cluster_calls if not rbac.allows(cluster_role, *c)) == []
    assert {(v, g, r) for rule in cluster_role["rules"] for g in rule["apiGroups"]
            for r in rule["resources"] for v in rule["verbs"]} == cluster_calls
    denied = sorted(c for c in calls if not rbac.allows(role, *c))
    assert denied == [], f"the Role lacks {denied}"
    granted = {(v, g, r) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    assert sorted(granted - calls) == [], f"the Role grants {sorted(granted - calls)}, never called"


def test_the_documented_role_is_the_rendered_one():
    docs = list(yaml.safe_load_all((ROOT / "docs/policies/servingbench-role.yaml").read_text()))
    assert docs == [rbac.role(), rbac.role_binding(), rbac.cluster_role(),
                    rbac.cluster_role_binding()]


def test_the_check_catches_a_missing_verb():
    role = rbac.role()
    assert rbac.allows(role, "delete", "batch", "jobs")
    assert not rbac.allows(role, "delete", "", "pods")
    assert not rbac.allows(role, "get", "", "configmaps")
    assert GROUP_OF["apis/batch/v1"] == "batch"


def test_what_reading_secrets_exposes_is_documented():
    """RBAC cannot narrow `list secrets` by label and a list returns every Secret's data,
    so a Role that reads Secrets at all can read `hf-token` in the same namespace: the setup
    guide must say so, and how to limit what that token can do."""
    from pathlib import Path

    from servingbench.resources.model_server.kube.rbac import RULES

    reads = {v for group, res, verbs in RULES if (group, res) == ("", "secrets")
             for v in verbs if v in ("get", "list", "watch")}
    if not reads:
        return
    guide = (Path(__file__).resolve().parents[2] / "docs/eks.md").read_text()
    assert "can read `hf-token`" in guide
    assert "fine-grained Hugging Face token" in guide
