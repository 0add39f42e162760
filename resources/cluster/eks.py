"""The eks profile's cluster: one managed node group per run, deleted at teardown."""

from __future__ import annotations

from servingbench.resources.cluster.eks_api import (
    EksNodegroups,
    Heartbeat,
    NodegroupInfo,
    NodegroupSpec,
)
from servingbench.resources.cluster.interface import Cluster, ClusterInfo
from servingbench.resources.contract.candidate import Candidate
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
                 capacity_reservation_id: str | None = None, timeout_s: float = 1800.0):
        self.eks, self.timeout_s = eks, timeout_s
        self.capacity_type, self.capacity_reservation_id = capacity_type, capacity_reservation_id
        self.heartbeats: dict[str, Heartbeat] = {}

    def provision(self, candidate: Candidate, run_id: str) -> ClusterInfo:
        spec = NodegroupSpec(candidate.name, candidate.instance_type, candidate.node_count,
                             accelerator=accelerator_of(candidate),
                             capacity_type=self.capacity_type,
                             capacity_reservation_id=self.capacity_reservation_id)
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
                  "capacity_type": ng.capacity_type},
            handle=ng)

    def teardown(self, info: ClusterInfo) -> None:
        ng: NodegroupInfo = info.handle
        beat = self.heartbeats.pop(ng.nodegroup, None)
        if beat is not None:
            beat.stop()
        self.eks.delete_nodegroup(ng.nodegroup, ng.launch_template_id, timeout_s=self.timeout_s)
