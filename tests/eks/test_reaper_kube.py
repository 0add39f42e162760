"""The reaper's Kubernetes half and its question to Dagster, against moto's server (node
groups), the fake Kubernetes API on 127.0.0.1 (the runs' objects) and a real Dagster
instance: a run that is over loses its Service (and so its load balancer), Deployment,
NetworkPolicy, Secret and Jobs; nothing without our owner label, nothing whose labels do
not prove the run, nothing of a live run is touched; one object that cannot be deleted
never stops the others."""

from __future__ import annotations

import dataclasses
import time

import dagster as dg
import pytest
from servingbench.assets.benchmark import RUN_TAG as DAGSTER_RUN_TAG
from servingbench.pipelines.liveness import dagster_alive
from servingbench.resources.aws.caller import AwsCallError
from servingbench.resources.cluster.eks_api import EksNodegroups, NodegroupSpec, nodegroup_name
from servingbench.resources.cluster.reaper import EksReaper, reap_nodegroups
from servingbench.resources.model_server.kube.client import KubeClient
from servingbench.resources.model_server.kube.reap import KubeRunObjects
from servingbench.resources.model_server.kube.render import api_key_secret, render
from servingbench.resources.model_server.kube.token import TokenSource

from tests.support.eks.aws import DUMMY_KEY_ID, OWNER, REGION, ROLE, make_cluster
from tests.support.eks.fake_kube import FakeKubeApi
from tests.support.eks.specs import SGLANG_GPU

SPEC = NodegroupSpec(candidate="p5-scout-bf16-tp8", instance_type="p5.48xlarge")
LATER_NS = 2 * 3600 * 10**9  # past the one-hour TTL the tests use


def cluster_for(session, endpoint):
    return EksNodegroups(session, "bench", REGION, node_role_arn=ROLE, owner=OWNER,
                         endpoint_url=endpoint, poll_s=0.05)


def objects_of(kube: KubeClient, run_id: str, owner: str | None = OWNER, **labels) -> list[dict]:
    """The run's Deployment, LoadBalancer Service, NetworkPolicy, Secret and a Job, applied."""
    spec = dataclasses.replace(SGLANG_GPU, run_id=run_id, nodegroup=nodegroup_name(run_id),
                               owner=owner)
    objs = [*render(spec), api_key_secret(spec, "not-a-real-key")]
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": f"{spec.name[:50]}-load", "namespace": spec.namespace,
                        "labels": dict(objs[0]["metadata"]["labels"]),
                        "annotations": {"servingbench/run-id": run_id}},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": []}}}}
    for obj in [*objs, job]:
        obj["metadata"]["labels"].update(labels)
        if owner is None:
            obj["metadata"]["labels"].pop("servingbench/owner", None)
        kube.apply(obj)
    return [*objs, job]


def left(api: FakeKubeApi) -> list[str]:
    return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in api.objects.values())


@pytest.fixture
def kube(moto):
    _, session = moto
    with FakeKubeApi(cluster="bench", key_id=DUMMY_KEY_ID) as api:
        client = KubeClient(api.url, TokenSource.for_eks(session, "bench", REGION),
                            sleep=lambda s: None)
        yield api, client
        client.close()


def test_a_reaped_runs_objects_go_and_nothing_else(moto, kube):
    endpoint, session = moto
    eks, _, _ = make_cluster(endpoint, session)
    api, client = kube
    ours = cluster_for(session, endpoint)
    dead = ours.create_nodegroup(SPEC, "run-dead", timeout_s=10)
    alive = ours.create_nodegroup(SPEC, "run-alive", timeout_s=10)
    dead_objs = objects_of(client, "run-dead")
    objects_of(client, "run-alive")                      # its node group is kept: so are they
    gone_objs = objects_of(client, "run-gone")          # no node group any more: expired
    objects_of(client, "run-busy")                       # no node group, but Dagster runs it
    theirs = objects_of(client, "run-theirs", owner="another-install")
    unowned = objects_of(client, "run-unowned", owner=None)
    # our owner label, but the node-group label does not come from the run id
    impostor = objects_of(client, "run-impostor", **{"servingbench/nodegroup": dead.nodegroup})
    before = set(left(api))
    policy = f"NetworkPolicy/{dead_objs[2]['metadata']['name']}"
    api.fail_delete.update(p for p, o in api.objects.items()
                           if f"{o['kind']}/{o['metadata']['name']}" == policy)
    later = time.time_ns() + LATER_NS
    ours.clock = lambda: later - 60 * 10**9  # the live run beat a minute before the reaper
    ours.beat(alive)

    with pytest.raises(AwsCallError, match=r"NetworkPolicy/\S+: .*HTTP 500") as exc:
        reap_nodegroups(ours, 3600, now_ns=later, objects=KubeRunObjects(client, OWNER),
                  alive=lambda run_id: "Dagster run 0000 STARTED" if run_id == "run-busy" else None)
    assert "run-alive" not in str(exc.value)  # the message names what failed, only that

    # deleted: the dead run's objects but the failing one, and the expired orphan run's
    assert before - set(left(api)) == (names(dead_objs) - {policy}) | names(gone_objs)
    for kept in (theirs, unowned, impostor):
        assert names(kept) <= set(left(api))
    # the failure did not stop the node group either
    listed = eks.list_nodegroups(clusterName="bench")["nodegroups"]
    assert dead.nodegroup not in listed and alive.nodegroup in listed


def names(objs: list[dict]) -> set[str]:
    return {f"{o['kind']}/{o['metadata']['name']}" for o in objs}


def test_the_reaper_keeps_a_run_whose_dagster_run_is_going(moto, kube):
    """A real Dagster instance: the reaper runs inside a Dagster run tagged with the run id
    (as the benchmark asset tags its own run), so that run is STARTED while it looks."""
    endpoint, session = moto
    eks, _, _ = make_cluster(endpoint, session)
    api, client = kube
    ours = cluster_for(session, endpoint)
    info = ours.create_nodegroup(SPEC, "run-live", timeout_s=10)
    objects_of(client, "run-live")
    later = time.time_ns() + LATER_NS
    reaper = EksReaper(ours, ttl_hours=1, objects=lambda: KubeRunObjects(client, OWNER))
    ours.clock = lambda: later  # the heartbeat went stale long ago: only Dagster knows

    @dg.op
    def reap_now(context) -> list:
        return reaper.reap(alive=dagster_alive(context.instance))

    @dg.job
    def live():
        reap_now()

    instance = dg.DagsterInstance.ephemeral()
    during = live.execute_in_process(instance=instance, tags={DAGSTER_RUN_TAG: "run-live"})
    assert during.success and during.output_for_node("reap_now") == []  # kept: STARTED
    assert info.nodegroup in eks.list_nodegroups(clusterName="bench")["nodegroups"]
    assert len(api.objects) == 5
    # the Dagster run is over (SUCCESS): nothing keeps the run now
    after = reaper.reap(alive=dagster_alive(instance))
    assert info.nodegroup in after and len(api.objects) == 0
    assert {a.split("/")[0] for a in after if "/" in a} == {
        "Service", "Deployment", "NetworkPolicy", "Secret", "Job"}


def test_a_failing_status_lookup_keeps_the_run(moto):
    endpoint, session = moto
    make_cluster(endpoint, session)
    ours = cluster_for(session, endpoint)
    info = ours.create_nodegroup(SPEC, "run-unknown", timeout_s=10)

    def broken(run_id):
        raise RuntimeError("database is locked")

    later = time.time_ns() + LATER_NS
    assert reap_nodegroups(ours, 3600, now_ns=later, alive=broken) == []
    assert reap_nodegroups(ours, 3600, now_ns=later, alive=lambda run_id: None) == [info.nodegroup]
