"""Node group lifecycle against moto's server: create, scope, teardown on failure, reaper."""

from __future__ import annotations

import time

import pytest
from servingbench.resources.aws.caller import AwsCallError, Caller
from servingbench.resources.cluster.eks_api import (
    RUN_TAG,
    EksNodegroups,
    NodegroupSpec,
    nodegroup_name,
)
from servingbench.resources.cluster.reaper import reap_nodegroups
from servingbench.resources.contract import manifest as mf

from tests.support.eks.aws import OWNER, REGION, ROLE, make_cluster


def launch_nodes(ec2, nodegroup, count, instance_type="p5.48xlarge"):
    """What EKS does after the node group is created: start tagged instances."""
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24",
                               AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    image = "ami-0123456789abcdef0"  # any id: moto does not check it
    tags = [{"Key": "eks:cluster-name", "Value": "bench"},
            {"Key": "eks:nodegroup-name", "Value": nodegroup}]
    out = ec2.run_instances(ImageId=image, MinCount=count, MaxCount=count, SubnetId=subnet,
                            InstanceType=instance_type,
                            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])
    return sorted(i["InstanceId"] for i in out["Instances"])


def names(eks):
    return eks.list_nodegroups(clusterName="bench")["nodegroups"]


def templates(ec2):
    return [t["LaunchTemplateName"] for t in ec2.describe_launch_templates()["LaunchTemplates"]]


SPEC = NodegroupSpec(candidate="p5-scout-bf16-tp8", instance_type="p5.48xlarge", node_count=2)


def test_create_describe_delete(moto):
    endpoint, session = moto
    eks, ec2, subnet = make_cluster(endpoint, session)
    cluster = EksNodegroups(session, "bench", REGION, node_role_arn=ROLE, owner=OWNER, endpoint_url=endpoint,
                         poll_s=0.1)
    run_id = "20261129T020000Z-p5.48xlarge-scout-bf16-7f3a"
    info = cluster.create_nodegroup(SPEC, run_id, timeout_s=10)
    assert info.nodegroup == nodegroup_name(run_id) and len(info.nodegroup) <= 63
    ng = eks.describe_nodegroup(clusterName="bench", nodegroupName=info.nodegroup)["nodegroup"]
    assert ng["tags"] == {RUN_TAG: run_id, "servingbench:candidate": "p5-scout-bf16-tp8",
                          "servingbench:owner": OWNER,
                          "servingbench:heartbeat": ng["tags"]["servingbench:heartbeat"]}
    assert ng["scalingConfig"] == {"minSize": 2, "maxSize": 2, "desiredSize": 2}
    assert ng["instanceTypes"] == ["p5.48xlarge"] and ng["amiType"] == "AL2023_x86_64_NVIDIA"
    assert ng["subnets"] == [subnet]
    # the launch template tags instances and volumes with the run (cost allocation)
    lt = ec2.describe_launch_template_versions(LaunchTemplateId=info.launch_template_id)
    specs = [s for s in lt["LaunchTemplateVersions"][0]["LaunchTemplateData"]["TagSpecifications"]
             if s["ResourceType"] in ("instance", "volume")]
    assert {s["ResourceType"] for s in specs} == {"instance", "volume"}
    assert all({"Key": RUN_TAG, "Value": run_id} in s["Tags"] for s in specs)
    start, end = info.phases["provision"]
    assert start <= end

    ids = launch_nodes(ec2, info.nodegroup, 2)
    launch_nodes(ec2, "someone-elses-nodegroup", 1)
    scope = cluster.describe_scope(info)
    assert scope.instance_ids == ids
    assert scope.availability_zone == "us-east-1a" and scope.region == REGION
    assert scope.account_id == "123456789012" and scope.nodegroup == info.nodegroup
    assert scope.ami_release == ng["releaseVersion"] and scope.k8s_version == ng["version"]
    fields = scope.manifest_fields()
    m = mf.empty(run_id, "measured", 0)
    m.update(fields)
    mf.validate(m)  # the scope fits the strict manifest as it is
    assert fields["instance_ids"] == ids and fields["node_count"] == 2

    assert cluster.delete_nodegroup(info.nodegroup, info.launch_template_id, timeout_s=10)
    assert names(eks) == [] and templates(ec2) == []
    assert not cluster.delete_nodegroup(info.nodegroup, info.launch_template_id)  # idempotent


def test_failure_after_provisioning_still_tears_down(moto):
    endpoint, session = moto
    eks, ec2, _ = make_cluster(endpoint, session)
    cluster = EksNodegroups(session, "bench", REGION, node_role_arn=ROLE, owner=OWNER, endpoint_url=endpoint,
                         poll_s=0.1)
    seen = []
    with pytest.raises(RuntimeError, match="deploy failed"):
        with cluster.provisioned(SPEC, "run-fails", timeout_s=10) as info:
            seen = names(eks)
            raise RuntimeError("deploy failed")
    assert seen == [info.nodegroup]
    assert names(eks) == [] and templates(ec2) == []


def test_create_failure_removes_the_launch_template(moto):
    endpoint, session = moto
    eks, ec2, subnet = make_cluster(endpoint, session)
    cluster = EksNodegroups(session, "no-such-cluster", REGION, node_role_arn=ROLE, owner=OWNER,
                         subnet_ids=[subnet], endpoint_url=endpoint, poll_s=0.1)
    with pytest.raises(AwsCallError, match="eks:CreateNodegroup failed: ResourceNotFound"):
        cluster.create_nodegroup(SPEC, "run-a", timeout_s=10)
    assert templates(ec2) == []  # the launch template made before the failure is gone


def test_reaper_deletes_only_old_servingbench_nodegroups(moto):
    endpoint, session = moto
    eks, ec2, subnet = make_cluster(endpoint, session)
    cluster = EksNodegroups(session, "bench", REGION, node_role_arn=ROLE, owner=OWNER, endpoint_url=endpoint,
                         poll_s=0.1)
    eks.create_nodegroup(clusterName="bench", nodegroupName="system", nodeRole=ROLE,
                         subnets=[subnet])  # not ours: never touched
    old = cluster.create_nodegroup(SPEC, "run-old", timeout_s=10)
    assert reap_nodegroups(cluster, 3600) == []  # young: kept
    later = time.time_ns() + 2 * 3600 * 10**9
    assert reap_nodegroups(cluster, 3600, now_ns=later) == [old.nodegroup]
    assert names(eks) == ["system"] and templates(ec2) == []


def test_calls_are_counted(moto):
    endpoint, session = moto
    make_cluster(endpoint, session)
    caller = Caller()
    cluster = EksNodegroups(session, "bench", REGION, node_role_arn=ROLE, owner=OWNER, endpoint_url=endpoint,
                         poll_s=0.1, caller=caller)
    cluster.create_nodegroup(SPEC, "run-count", timeout_s=10)
    assert caller.calls["eks:CreateNodegroup"] == 1
    assert caller.calls["ec2:CreateLaunchTemplate"] == 1


def test_capacity_block_goes_into_the_launch_template(moto):
    endpoint, session = moto
    eks, ec2, _ = make_cluster(endpoint, session)
    cluster = EksNodegroups(session, "bench", REGION, node_role_arn=ROLE, owner=OWNER, endpoint_url=endpoint,
                         poll_s=0.1)
    spec = NodegroupSpec("trn2-scout", "trn2.48xlarge", accelerator="neuron",
                         capacity_type="CAPACITY_BLOCK", capacity_reservation_id="cr-0123456789abcdef0")
    info = cluster.create_nodegroup(spec, "run-cb", timeout_s=10)
    ng = eks.describe_nodegroup(clusterName="bench", nodegroupName=info.nodegroup)["nodegroup"]
    assert ng["amiType"] == "AL2023_x86_64_NEURON" and ng["capacityType"] == "CAPACITY_BLOCK"
    data = ec2.describe_launch_template_versions(LaunchTemplateId=info.launch_template_id)[
        "LaunchTemplateVersions"][0]["LaunchTemplateData"]
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"]["CapacityReservationTarget"] == {
        "CapacityReservationId": "cr-0123456789abcdef0"}
    with pytest.raises(ValueError, match="needs capacity_reservation_id"):
        NodegroupSpec("x", "p5.48xlarge", capacity_type="CAPACITY_BLOCK")


def test_teardown_by_run_id_from_another_process(moto):
    endpoint, session = moto
    eks, ec2, _ = make_cluster(endpoint, session)
    cluster = EksNodegroups(session, "bench", REGION, node_role_arn=ROLE, owner=OWNER, endpoint_url=endpoint,
                         poll_s=0.1)
    cluster.create_nodegroup(SPEC, "run-hook", timeout_s=10)
    other = EksNodegroups(session, "bench", REGION, node_role_arn=ROLE, owner=OWNER, endpoint_url=endpoint,
                       poll_s=0.1)  # e.g. a Dagster failure hook: knows only the run id
    assert other.teardown("run-hook", timeout_s=10) is True
    assert names(eks) == [] and templates(ec2) == []
    assert other.teardown("run-hook", timeout_s=10) is False


def test_a_throttled_poll_while_waiting_does_not_fail_the_run(moto):
    from tests.support.eks.fakes import ErrorProxy

    endpoint, session = moto
    eks, _, _ = make_cluster(endpoint, session)
    with ErrorProxy(endpoint, "GET /clusters/bench/node-groups/sb-", "ThrottlingException",
                    times=2, status=429) as proxy:
        cluster = EksNodegroups(session, "bench", REGION, node_role_arn=ROLE, owner=OWNER,
                             endpoint_url=proxy.url, poll_s=0.05)
        info = cluster.create_nodegroup(SPEC, "run-throttled", timeout_s=10)
        assert proxy.remaining == 0  # both throttles were served, and waited through
        assert names(eks) == [info.nodegroup]
