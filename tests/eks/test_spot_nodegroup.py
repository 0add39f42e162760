"""A spot and an autoscaled candidate's node group, on moto's server: capacity type SPOT
with the instance type and its fallbacks, and the scaling range the Cluster Autoscaler
works in (replicas.min..max engine pods, node_count nodes each)."""

from __future__ import annotations

import dataclasses

import pytest
from servingbench.resources.cluster.eks import EksNodegroupCluster
from servingbench.resources.cluster.eks_api import EksNodegroups, NodegroupSpec
from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.deployment import MAX_NODES, plan_of

from tests.support.eks.aws import OWNER, REGION, ROLE, make_cluster

RUN = "20261129T020000Z-p5.48xlarge-scout-bf16-spot"
BASE = Candidate(name="p5-scout-bf16-tp8", instance_type="p5.48xlarge",
                 model="meta-llama/Llama-4-Scout-17B-16E-Instruct", precision="bf16",
                 tensor_parallel=8)


def candidate(capacity: str | None = None, node_count: int = 1, **keys) -> Candidate:
    """`keys`: the candidates file's deployment keys, read into the plan as it reads them."""
    plan = plan_of({"capacity": capacity, "node_count": node_count, **keys})
    return dataclasses.replace(BASE, capacity=capacity, node_count=node_count, deployment=plan)


def test_spot_candidate_gets_a_spot_group_with_fallbacks(moto):
    endpoint, session = moto
    eks, _, _ = make_cluster(endpoint, session)
    api = EksNodegroups(session, "bench", REGION, node_role_arn=ROLE, owner=OWNER,
                        endpoint_url=endpoint, poll_s=0.1)
    cluster = EksNodegroupCluster(api, timeout_s=10, capacity_reservation_id="cr-0123",
                                  fallback_types=("p5e.48xlarge", "p5.48xlarge"))
    spec = cluster.spec_for(candidate(capacity="spot", replicas={"min": 1, "max": 3}))
    assert spec.capacity_reservation_id is None  # a reservation is on-demand capacity
    info = api.create_nodegroup(spec, RUN, timeout_s=10)
    ng = eks.describe_nodegroup(clusterName="bench", nodegroupName=info.nodegroup)["nodegroup"]
    assert ng["capacityType"] == "SPOT"
    assert ng["instanceTypes"] == ["p5.48xlarge", "p5e.48xlarge"]
    assert ng["scalingConfig"] == {"minSize": 1, "maxSize": 3, "desiredSize": 1}
    api.delete_nodegroup(info.nodegroup, info.launch_template_id, timeout_s=10)


def test_on_demand_is_the_default_and_keeps_the_profile():
    cluster = EksNodegroupCluster(None, capacity_type="CAPACITY_BLOCK",
                                  capacity_reservation_id="cr-0123", fallback_types=("p5e.48xlarge",))
    spec = cluster.spec_for(BASE)
    assert (spec.capacity_type, spec.instance_types, spec.scaling) == (
        "CAPACITY_BLOCK", ["p5.48xlarge"], (1, 1))
    two_node = candidate(replicas={"min": 0, "max": 4, "initial": 0}, node_count=2)
    spec = EksNodegroupCluster(None).spec_for(two_node)
    assert (spec.node_count, spec.scaling) == (0, (0, 8))  # scale from zero


@pytest.mark.parametrize("keys, match", [
    ({"capacity": "preemptible"}, "capacity: 'preemptible' is not one of on_demand, spot"),
    ({"replicas": {"min": 2, "max": 1}}, "replicas: expected min <= initial <= max"),
    ({"replicas": {"max": 100_000}}, r"replicas.max: expected an integer in \[1, 64\]"),
    ({"replicas": {"max": 40}, "node_count": 2}, "replicas.max: 40 replicas of 2 node"),
])
def test_bad_keys_name_themselves_before_a_node_group_is_sized(keys, match):
    with pytest.raises(ValueError, match=match):
        candidate(**keys)


def test_the_largest_plan_fits_the_node_cap():
    # every node group the plan allows stays within the node_count cap, replicas included
    spec = EksNodegroupCluster(None).spec_for(candidate(replicas={"max": MAX_NODES // 2},
                                                        node_count=2))
    assert spec.scaling == (2, MAX_NODES)


def test_spec_checks():
    with pytest.raises(ValueError, match="capacity_type"):
        NodegroupSpec("c", "p5.48xlarge", capacity_type="spot")
    with pytest.raises(ValueError, match="min_nodes <= node_count"):
        NodegroupSpec("c", "p5.48xlarge", node_count=3, max_nodes=2)
