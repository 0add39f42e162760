"""The reaper never touches what is not ours, against moto's server: only node groups whose
name prefix, run tag and owner tag all match this installation, older than the TTL and with
a stale heartbeat; a group it may not even describe never stops it reaping the others."""

from __future__ import annotations

import time

import pytest
from servingbench.resources.aws.caller import AwsCallError
from servingbench.resources.cluster.eks import EksNodegroupCluster
from servingbench.resources.cluster.eks_api import (
    HEARTBEAT_TAG,
    OWNER_TAG,
    RUN_TAG,
    EksNodegroups,
    Heartbeat,
    NodegroupSpec,
    check_owner,
    nodegroup_name,
)
from servingbench.resources.cluster.reaper import reap_nodegroups

from tests.support.eks.aws import OWNER, REGION, ROLE, make_cluster
from tests.support.eks.fakes import ErrorProxy

SPEC = NodegroupSpec(candidate="p5-scout-bf16-tp8", instance_type="p5.48xlarge")
HOUR_NS = 3600 * 10**9


def cluster_for(session, endpoint, owner=OWNER):
    return EksNodegroups(session, "bench", REGION, node_role_arn=ROLE, owner=owner,
                      endpoint_url=endpoint, poll_s=0.05)


def groups(eks):
    return sorted(eks.list_nodegroups(clusterName="bench")["nodegroups"])


def template_names(ec2):
    return sorted(t["LaunchTemplateName"]
                  for t in ec2.describe_launch_templates()["LaunchTemplates"])


def test_only_our_expired_dead_runs_are_reaped(moto):
    endpoint, session = moto
    eks, ec2, subnet = make_cluster(endpoint, session)
    ours = cluster_for(session, endpoint)
    dead = ours.create_nodegroup(SPEC, "run-dead", timeout_s=10)
    alive = ours.create_nodegroup(SPEC, "run-alive", timeout_s=10)
    theirs = cluster_for(session, endpoint, owner="another-install").create_nodegroup(
        SPEC, "run-theirs", timeout_s=10)
    # a group that claims our tags but whose name does not come from its run tag
    eks.create_nodegroup(clusterName="bench", nodegroupName="sb-impostor", nodeRole=ROLE,
                         subnets=[subnet], tags={RUN_TAG: "run-x", OWNER_TAG: OWNER})
    eks.create_nodegroup(clusterName="bench", nodegroupName="system", nodeRole=ROLE,
                         subnets=[subnet])
    later = time.time_ns() + 2 * HOUR_NS
    ours.beat(alive)  # the live run refreshes its heartbeat ...
    ours.clock = lambda: later - 60 * 10**9  # ... a minute before the reaper looks
    ours.beat(alive)
    ours.clock = time.time_ns

    with ErrorProxy(endpoint, "GET /clusters/bench/node-groups/system", "AccessDeniedException",
                    times=100, status=403) as proxy:
        reaper = cluster_for(session, proxy.url)
        assert reap_nodegroups(reaper, 3600) == []  # nothing is older than the TTL yet
        assert reap_nodegroups(reaper, 3600, now_ns=later) == [dead.nodegroup]
        assert proxy.remaining == 100  # a group without our prefix is never described
    assert groups(eks) == sorted([alive.nodegroup, theirs.nodegroup, "sb-impostor", "system"])
    assert dead.nodegroup not in template_names(ec2)  # its launch template went with it
    assert alive.nodegroup in template_names(ec2) and theirs.nodegroup in template_names(ec2)


def test_a_group_that_cannot_be_described_does_not_stop_the_others(moto):
    endpoint, session = moto
    eks, _, _ = make_cluster(endpoint, session)
    ours = cluster_for(session, endpoint)
    first = ours.create_nodegroup(SPEC, "run-a", timeout_s=10)
    second = ours.create_nodegroup(SPEC, "run-b", timeout_s=10)
    later = time.time_ns() + 2 * HOUR_NS
    with ErrorProxy(endpoint, f"GET /clusters/bench/node-groups/{first.nodegroup}",
                    "AccessDeniedException", times=100, status=403) as proxy:
        with pytest.raises(AwsCallError, match=f"reaper could not delete: {first.nodegroup}"):
            reap_nodegroups(cluster_for(session, proxy.url), 3600, now_ns=later)
    assert groups(eks) == [first.nodegroup]  # the other one was still reaped
    assert second.nodegroup not in groups(eks)


def test_launch_templates_left_without_a_group_are_reaped_if_ours(moto):
    endpoint, session = moto
    _, ec2, _ = make_cluster(endpoint, session)

    def template(run_id, owner):
        tags = [{"Key": RUN_TAG, "Value": run_id}, {"Key": OWNER_TAG, "Value": owner}]
        ec2.create_launch_template(
            LaunchTemplateName=nodegroup_name(run_id), LaunchTemplateData={},
            TagSpecifications=[{"ResourceType": "launch-template", "Tags": tags}])

    template("run-orphan", OWNER)  # a create that died between template and node group
    template("run-foreign", "another-install")
    ec2.create_launch_template(LaunchTemplateName="unrelated", LaunchTemplateData={})
    ours = cluster_for(session, endpoint)
    assert reap_nodegroups(ours, 3600) == [] and len(template_names(ec2)) == 3  # young: kept
    assert reap_nodegroups(ours, 3600, now_ns=time.time_ns() + 2 * HOUR_NS) == []
    assert template_names(ec2) == sorted([nodegroup_name("run-foreign"), "unrelated"])


def test_everything_created_carries_the_owner_and_a_heartbeat(moto):
    endpoint, session = moto
    eks, ec2, _ = make_cluster(endpoint, session)
    ours = cluster_for(session, endpoint)
    info = ours.create_nodegroup(SPEC, "run-tags", timeout_s=10)
    tags = eks.describe_nodegroup(clusterName="bench", nodegroupName=info.nodegroup)[
        "nodegroup"]["tags"]
    assert tags[OWNER_TAG] == OWNER and tags[RUN_TAG] == "run-tags"
    assert abs(int(tags[HEARTBEAT_TAG]) - time.time()) < 3600
    lt = ec2.describe_launch_templates(LaunchTemplateIds=[info.launch_template_id])
    assert {"Key": OWNER_TAG, "Value": OWNER} in lt["LaunchTemplates"][0]["Tags"]
    data = ec2.describe_launch_template_versions(LaunchTemplateId=info.launch_template_id)[
        "LaunchTemplateVersions"][0]["LaunchTemplateData"]
    for spec in data["TagSpecifications"]:  # instances and volumes: run and owner
        assert {"Key": OWNER_TAG, "Value": OWNER} in spec["Tags"]


def test_the_heartbeat_thread_refreshes_the_tag_until_stopped(moto):
    endpoint, session = moto
    eks, _, _ = make_cluster(endpoint, session)
    ours = cluster_for(session, endpoint)
    info = ours.create_nodegroup(SPEC, "run-beat", timeout_s=10)
    ours.clock = lambda: 4_000_000_000 * 10**9  # a clock far from the creation time
    beat = Heartbeat(ours, info, every_s=0.05)
    deadline = time.monotonic() + 30
    while beat.beats < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    beat.stop()
    tags = eks.describe_nodegroup(clusterName="bench", nodegroupName=info.nodegroup)[
        "nodegroup"]["tags"]
    assert beat.beats >= 2 and tags[HEARTBEAT_TAG] == "4000000000"


def test_the_pipeline_cluster_beats_while_provisioned_and_stops_at_teardown(moto):
    from tests.support.eks.billdata import RUN_ID

    endpoint, session = moto
    make_cluster(endpoint, session)

    from servingbench.resources.contract.candidate import Candidate

    cluster = EksNodegroupCluster(cluster_for(session, endpoint), timeout_s=10)
    info = cluster.provision(Candidate("c", "p5.48xlarge", "m", "bf16", 8), RUN_ID)
    beat = cluster.heartbeats[info.facts["nodegroup"]]
    assert beat._thread.is_alive()
    cluster.teardown(info)
    assert not beat._thread.is_alive() and cluster.heartbeats == {}


@pytest.mark.parametrize("owner", ["", "UPPER", "-edge", "edge-", "a/b", "x" * 41, None])
def test_bad_owner_ids_are_refused(owner):
    with pytest.raises(ValueError, match="installation"):
        check_owner(owner)
