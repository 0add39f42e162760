"""The eks profile's cluster: one managed node group per run, deleted at teardown."""

from __future__ import annotations

from servingbench.resources.cluster.eks_api import (
    CAPACITY,
    EksNodegroups,
    Heartbeat,
    NodegroupInfo,
    NodegroupSpec,
)
from servingbench.resources.cluster.interface import Cluster, ClusterInfo
from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.deployment import Replicas, Replicated
from servingbench.resources.contract.timestamps import format_ts
from servingbench.resources.model_server import engines


def accelerator_of(candidate: Candidate) -> str:
    """The node group's accelerator for the candidate's engine (nvidia | neuron)."""
    engine = engines.get(candidate.engine)
    if engine.where != "eks":
        raise ValueError(f"candidate {candidate.name}: engine {engine.name} runs on this host "
                         f"only (the local profile), not on eks")
    return engine.accelerator


class EksNodegroupCluster(Cluster):
    """One managed node group per run; `teardown` deletes it (and its launch template). While
    it lives, a heartbeat thread keeps its heartbeat tag fresh so no reaper takes it."""

    emulated = False

    def __init__(self, eks: EksNodegroups, *, capacity_type: str = "ON_DEMAND",
                 capacity_reservation_id: str | None = None, timeout_s: float = 1800.0,
                 fallback_types: tuple[str, ...] = ()):
        self.eks, self.timeout_s = eks, timeout_s
        self.capacity_type, self.capacity_reservation_id = capacity_type, capacity_reservation_id
        self.fallback_types = fallback_types
        self.heartbeats: dict[str, Heartbeat] = {}

    def spec_for(self, candidate: Candidate) -> NodegroupSpec:
        """The candidate's node group: its `capacity` (contract §2.1; spot overrides the
        profile's capacity type), and for `replicas` the node range the Cluster Autoscaler
        may scale it over (one engine pod per node_count nodes)."""
        capacity = candidate.capacity or "on_demand"  # checked with the plan
        capacity_type = CAPACITY[capacity] if capacity == "spot" else self.capacity_type
        plan = candidate.deployment
        r = plan.replicas if isinstance(plan, Replicated) else Replicas()
        lo, initial, hi = r.min, r.initial, r.max
        per = candidate.node_count
        return NodegroupSpec(candidate.name, candidate.instance_type, per * initial,
                             accelerator=accelerator_of(candidate),
                             capacity_type=capacity_type,
                             capacity_reservation_id=None if capacity == "spot"
                             else self.capacity_reservation_id,
                             min_nodes=per * lo, max_nodes=per * hi,
                             fallback_types=self.fallback_types if capacity == "spot" else ())

    def provision(self, candidate: Candidate, run_id: str) -> ClusterInfo:
        spec = self.spec_for(candidate)
        ng = self.eks.create_nodegroup(spec, run_id, timeout_s=self.timeout_s)
        self.heartbeats[ng.nodegroup] = Heartbeat(self.eks, ng)
        try:
            scope = self.eks.describe_scope(ng)
        except BaseException:
            self.heartbeats.pop(ng.nodegroup).stop()
            self.eks.delete_nodegroup(ng.nodegroup, ng.launch_template_id, timeout_s=self.timeout_s)
            raise
        start, end = ng.phases["provision"]
        return ClusterInfo(
            facts={**scope.manifest_fields(), "driver_version": None},
            phases={"provision": {"started_at": format_ts(start), "ended_at": format_ts(end)}},
            host={"ami_type": ng.ami_type, "ami_release": ng.ami_release,
                  "availability_zones": ",".join(scope.availability_zones),
                  "capacity_type": ng.capacity_type,
                  "capacity": "spot" if ng.capacity_type == "SPOT" else "on_demand"},
            handle=ng)

    def teardown(self, info: ClusterInfo) -> None:
        ng: NodegroupInfo = info.handle
        beat = self.heartbeats.pop(ng.nodegroup, None)
        if beat is not None:
            beat.stop()
        self.eks.delete_nodegroup(ng.nodegroup, ng.launch_template_id, timeout_s=self.timeout_s)
