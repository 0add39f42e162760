"""The EKS cluster resource: one managed node group per run, always torn down.

`EksNodegroups` attaches to an existing cluster and, per candidate, creates a launch
template (so EC2 instances and volumes carry the run's cost-allocation tag: managed
node group tags do not propagate to instances) and a managed node group of the
candidate's instance type; it waits with boto3 waiters under a bounded timeout and
records the scope (account, region, AZ, Kubernetes version, AMI release, instance ids).
`provisioned()` is the context manager that guarantees teardown; the reaper (reaper.py)
deletes what a crashed run left behind, through this class's list, describe and delete.

Never touch what is not ours: everything created carries the run tag and the owner tag (the
installation's id, SERVINGBENCH_EKS_OWNER); a live run refreshes a heartbeat tag on its node
group. The reaper (reaper.py) deletes a node group only when its name has our prefix and derives from its
run tag, its owner tag is this installation's, it is older than the TTL and its heartbeat is
stale; it never describes a group without our prefix (the IAM policy would refuse it), and a
failure on one group never stops it from reaping the others.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import botocore.exceptions
from servingbench.resources.aws.caller import (
    THROTTLING,
    TRANSIENT,
    AwsCallError,
    Caller,
    make_client,
)
from servingbench.resources.contract.scope import nodegroup_name

log = logging.getLogger("servingbench.eks")

RUN_TAG = "servingbench:run-id"
CANDIDATE_TAG = "servingbench:candidate"
OWNER_TAG = "servingbench:owner"
HEARTBEAT_TAG = "servingbench:heartbeat"  # epoch seconds, refreshed while the run lives
NAME_PREFIX = "sb-"
HEARTBEAT_EVERY_S = 120.0
HEARTBEAT_STALE_S = 900.0  # a heartbeat older than this: the run that owned it is gone
OWNER_ID = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?$")


def check_owner(owner: str | None, where: str = "owner") -> str:
    """The installation id tagged on every resource: 1–40 of [a-z0-9-], no edge hyphen."""
    if not owner or not OWNER_ID.match(owner):
        raise ValueError(f"{where}={owner!r}: expected 1-40 characters of a-z, 0-9 and '-' "
                         f"(not at either end), the id that names this installation")
    return owner
AMI_TYPES = {"nvidia": "AL2023_x86_64_NVIDIA", "neuron": "AL2023_x86_64_NEURON"}
CAPACITY_TYPES = ("ON_DEMAND", "SPOT", "CAPACITY_BLOCK")
# contract §2.1 `capacity` -> the node group's capacityType
CAPACITY = {"on_demand": "ON_DEMAND", "spot": "SPOT"}


class ProvisionError(RuntimeError):
    """The node group could not be created or did not become ACTIVE in time."""


@dataclass(frozen=True)
class NodegroupSpec:
    """What a candidate needs from the cluster."""

    candidate: str
    instance_type: str
    node_count: int = 1
    accelerator: str = "nvidia"  # nvidia | neuron
    capacity_type: str = "ON_DEMAND"  # ON_DEMAND | SPOT | CAPACITY_BLOCK
    disk_size_gib: int = 500
    ami_type: str | None = None  # default: AMI_TYPES[accelerator]
    capacity_reservation_id: str | None = None  # an ODCR or a Capacity Block (cr-…)
    # The Cluster Autoscaler scales the group between these (an autoscaled candidate's
    # replicas.min..max in nodes); None: fixed at node_count.
    min_nodes: int | None = None
    max_nodes: int | None = None
    # Fallback instance types after `instance_type`, same accelerators per node: a SPOT group
    # draws from all of them (capacity-optimized), so one type's empty spot pool does not
    # stop the run.
    fallback_types: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.accelerator not in AMI_TYPES:
            raise ValueError(f"accelerator must be one of {sorted(AMI_TYPES)}, got {self.accelerator!r}")
        if self.node_count < (0 if (self.max_nodes or 0) >= 1 else 1):
            # an autoscaled group may start empty (scale from zero): its max is >= 1
            raise ValueError(f"node_count must be >= 1, got {self.node_count}")
        if self.capacity_type == "CAPACITY_BLOCK" and not self.capacity_reservation_id:
            raise ValueError("capacity_type CAPACITY_BLOCK needs capacity_reservation_id")
        if self.capacity_type not in CAPACITY_TYPES:
            raise ValueError(f"capacity_type must be one of {', '.join(CAPACITY_TYPES)}, "
                             f"got {self.capacity_type!r}")
        lo, hi = self.scaling
        if not 0 <= lo <= self.node_count <= hi:
            raise ValueError(f"nodes: need 0 <= min_nodes <= node_count <= max_nodes, got "
                             f"{lo} <= {self.node_count} <= {hi}")
        if self.fallback_types and self.capacity_reservation_id:
            raise ValueError("fallback_types: a capacity reservation holds one instance type")

    @property
    def scaling(self) -> tuple[int, int]:
        """(minSize, maxSize) of the group."""
        lo = self.node_count if self.min_nodes is None else self.min_nodes
        return lo, self.node_count if self.max_nodes is None else self.max_nodes

    @property
    def instance_types(self) -> list[str]:
        return [self.instance_type, *(t for t in self.fallback_types if t != self.instance_type)]


@dataclass
class NodegroupInfo:
    """A node group this run created, and what the manifest needs from it."""

    cluster_name: str
    nodegroup: str
    instance_type: str
    node_count: int
    ami_type: str
    capacity_type: str
    k8s_version: str | None
    ami_release: str | None
    launch_template_id: str | None
    arn: str | None = None
    phases: dict[str, tuple[int, int]] = field(default_factory=dict)  # name → (start_ns, end_ns)


@dataclass
class Scope:
    """contract §1 scope of a run, as AWS reports it (unknown values None)."""

    account_id: str | None
    region: str
    availability_zone: str | None
    availability_zones: list[str]
    cluster_name: str
    k8s_version: str | None
    nodegroup: str
    ami_release: str | None
    instance_type: str
    instance_ids: list[str]
    node_count: int | None = None

    def manifest_fields(self) -> dict:
        """The run manifest's scope keys (contract §2.1), unknowns None."""
        return {"account_id": self.account_id, "region": self.region,
                "availability_zone": self.availability_zone, "cluster_name": self.cluster_name,
                "k8s_version": self.k8s_version, "nodegroup": self.nodegroup,
                "instance_type": self.instance_type, "node_count": self.node_count,
                "instance_ids": list(self.instance_ids)}



class EksNodegroups:
    """The node groups (and their launch templates) of one existing EKS cluster, through
    boto3: create, scope, list, delete (the reaper's policy is reaper.py). The pipeline's `Cluster` over it is
    `servingbench.resources.cluster.eks.EksNodegroupCluster`."""

    def __init__(self, session: Any, cluster_name: str, region: str, *, node_role_arn: str,
                 owner: str, subnet_ids: list[str] | None = None,
                 endpoint_url: str | None = None, caller: Caller | None = None,
                 poll_s: float = 15.0, clock: Callable[[], int] = time.time_ns):
        self.cluster_name, self.region = cluster_name, region
        self.owner = check_owner(owner)
        self.node_role_arn, self.subnet_ids = node_role_arn, subnet_ids
        self.call = caller or Caller()
        self.poll_s, self.clock = poll_s, clock
        self.eks = make_client(session, "eks", region, endpoint_url)
        self.ec2 = make_client(session, "ec2", region, endpoint_url)
        self.sts = make_client(session, "sts", region, endpoint_url)

    def __repr__(self) -> str:
        return f"EksNodegroups({self.cluster_name!r}, {self.region!r})"

    # -- cluster ---------------------------------------------------------------------
    def describe_cluster(self) -> dict:
        return self.call(self.eks, "describe_cluster", name=self.cluster_name)["cluster"]

    def _subnets(self) -> list[str]:
        if self.subnet_ids:
            return list(self.subnet_ids)
        return list(self.describe_cluster()["resourcesVpcConfig"]["subnetIds"])

    # -- node group lifecycle --------------------------------------------------------
    def create_nodegroup(self, spec: NodegroupSpec, run_id: str, *,
                         timeout_s: float = 1800.0) -> NodegroupInfo:
        """Create a tagged node group for `spec` and wait until it is ACTIVE.

        On any failure the half-made node group and launch template are deleted
        before the error is raised.
        """
        name = nodegroup_name(run_id)
        started = self.clock()
        tags = {RUN_TAG: run_id, CANDIDATE_TAG: spec.candidate, OWNER_TAG: self.owner,
                HEARTBEAT_TAG: str(started // 10**9)}
        # instances and volumes carry the run and owner tags; the heartbeat lives on the group
        template_id = self._create_launch_template(
            name, spec, {k: v for k, v in tags.items() if k != HEARTBEAT_TAG})
        info = NodegroupInfo(self.cluster_name, name, spec.instance_type, spec.node_count,
                             spec.ami_type or AMI_TYPES[spec.accelerator], spec.capacity_type,
                             None, None, template_id)
        try:
            self.call(
                self.eks, "create_nodegroup", clusterName=self.cluster_name, nodegroupName=name,
                scalingConfig={"minSize": spec.scaling[0], "maxSize": spec.scaling[1],
                               "desiredSize": spec.node_count},
                subnets=self._subnets(), instanceTypes=spec.instance_types,
                amiType=info.ami_type, capacityType=spec.capacity_type,
                nodeRole=self.node_role_arn, launchTemplate={"id": template_id},
                labels={"servingbench/nodegroup": name}, tags=tags,
            )
            self._wait("nodegroup_active", name, timeout_s)
            ng = self.describe_nodegroup(name)
        except BaseException:
            log.error("node group %s failed to provision; tearing it down", name)
            self.delete_nodegroup(name, template_id, timeout_s=timeout_s)
            raise
        info.k8s_version, info.ami_release = ng.get("version"), ng.get("releaseVersion")
        info.arn = ng.get("nodegroupArn")
        info.phases["provision"] = (started, self.clock())
        log.info("node group %s ACTIVE (%s x%d)", name, spec.instance_type, spec.node_count)
        return info

    def describe_nodegroup(self, name: str) -> dict:
        return self.call(self.eks, "describe_nodegroup", clusterName=self.cluster_name,
                         nodegroupName=name)["nodegroup"]

    def delete_nodegroup(self, name: str, launch_template_id: str | None = None, *,
                         timeout_s: float = 1800.0) -> bool:
        """Delete the node group (and its launch template); idempotent. True if it existed."""
        existed = True
        try:
            self.call(self.eks, "delete_nodegroup", clusterName=self.cluster_name,
                      nodegroupName=name)
        except AwsCallError as exc:
            if exc.code != "ResourceNotFoundException":
                raise
            existed = False
        if existed:
            self._wait("nodegroup_deleted", name, timeout_s)
            log.info("node group %s deleted", name)
        if launch_template_id:
            self.delete_launch_template(launch_template_id)
        return existed

    def delete_launch_template(self, template_id: str) -> None:
        try:
            self.call(self.ec2, "delete_launch_template", LaunchTemplateId=template_id)
        except AwsCallError as exc:
            if "NotFound" not in (exc.code or ""):
                raise

    @contextmanager
    def provisioned(self, spec: NodegroupSpec, run_id: str, *,
                    timeout_s: float = 1800.0) -> Iterator[NodegroupInfo]:
        """A node group for the block's duration; deleted however the block ends."""
        info = self.create_nodegroup(spec, run_id, timeout_s=timeout_s)
        heartbeat = Heartbeat(self, info)
        try:
            yield info
        finally:
            heartbeat.stop()
            self.delete_nodegroup(info.nodegroup, info.launch_template_id, timeout_s=timeout_s)

    def beat(self, info: NodegroupInfo) -> None:
        """Refresh the node group's heartbeat tag: the run that owns it is alive."""
        self.call(self.eks, "tag_resource", resourceArn=info.arn,
                  tags={HEARTBEAT_TAG: str(self.clock() // 10**9)})

    def teardown(self, run_id: str, *, timeout_s: float = 1800.0) -> bool:
        """Delete the run's node group and launch template knowing only `run_id`
        (for a failure hook in another process); idempotent. True if the group existed."""
        name = nodegroup_name(run_id)
        existed = self.delete_nodegroup(name, timeout_s=timeout_s)
        try:
            found = self.call(self.ec2, "describe_launch_templates", LaunchTemplateNames=[name])
        except AwsCallError as exc:
            if "NotFound" not in (exc.code or ""):
                raise
            found = {}
        for template in found.get("LaunchTemplates", []):
            self.delete_launch_template(template["LaunchTemplateId"])
        return existed

    # -- scope -----------------------------------------------------------------------
    def describe_scope(self, info: NodegroupInfo) -> Scope:
        """Account, region, AZ, k8s version, AMI release and the node group's instances."""
        account = self.call(self.sts, "get_caller_identity").get("Account")
        instances = self._instances(info.nodegroup)
        zones = sorted({i["Placement"]["AvailabilityZone"] for i in instances})
        return Scope(
            account_id=account, region=self.region,
            availability_zone=zones[0] if len(zones) == 1 else None, availability_zones=zones,
            cluster_name=self.cluster_name, k8s_version=info.k8s_version,
            nodegroup=info.nodegroup, ami_release=info.ami_release,
            instance_type=info.instance_type,
            instance_ids=sorted(i["InstanceId"] for i in instances), node_count=info.node_count,
        )

    def _instances(self, nodegroup: str) -> list[dict]:
        filters = [{"Name": "tag:eks:cluster-name", "Values": [self.cluster_name]},
                   {"Name": "tag:eks:nodegroup-name", "Values": [nodegroup]},
                   {"Name": "instance-state-name", "Values": ["pending", "running"]}]
        found: list[dict] = []
        token: str | None = None
        while True:
            page = self.call(self.ec2, "describe_instances", Filters=filters,
                             **({"NextToken": token} if token else {}))
            found += [i for r in page["Reservations"] for i in r["Instances"]]
            token = page.get("NextToken")
            if not token:
                return found

    def list_nodegroups(self) -> list[str]:
        names: list[str] = []
        token: str | None = None
        while True:
            page = self.call(self.eks, "list_nodegroups", clusterName=self.cluster_name,
                             **({"nextToken": token} if token else {}))
            names += page.get("nodegroups", [])
            token = page.get("nextToken")
            if not token:
                return names

    def _create_launch_template(self, name: str, spec: NodegroupSpec, tags: dict) -> str:
        tag_list = [{"Key": k, "Value": v} for k, v in tags.items()]
        data = {
            "BlockDeviceMappings": [{"DeviceName": "/dev/xvda", "Ebs": {
                "VolumeSize": spec.disk_size_gib, "VolumeType": "gp3",
                "DeleteOnTermination": True}}],
            "TagSpecifications": [{"ResourceType": kind, "Tags": tag_list}
                                  for kind in ("instance", "volume")],
            "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 2},
        }
        if spec.capacity_reservation_id:
            data["CapacityReservationSpecification"] = {
                "CapacityReservationTarget": {"CapacityReservationId": spec.capacity_reservation_id}}
        if spec.capacity_type == "CAPACITY_BLOCK":
            data["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
        out = self.call(self.ec2, "create_launch_template", LaunchTemplateName=name,
                        LaunchTemplateData=data, TagSpecifications=[
                            {"ResourceType": "launch-template", "Tags": tag_list}])
        return out["LaunchTemplate"]["LaunchTemplateId"]

    def _wait(self, waiter_name: str, name: str, timeout_s: float) -> None:
        """A boto3 waiter under a bounded timeout; a throttled poll waits on, it does not
        fail the run (botocore's waiter would stop at the first unexpected error)."""
        delay = max(0.05, self.poll_s)
        deadline = time.monotonic() + timeout_s
        waiter = self.eks.get_waiter(waiter_name)
        while True:
            attempts = max(1, math.ceil((deadline - time.monotonic()) / delay))
            try:
                waiter.wait(clusterName=self.cluster_name, nodegroupName=name,
                            WaiterConfig={"Delay": delay, "MaxAttempts": attempts})
                return
            except botocore.exceptions.WaiterError as exc:
                last = exc.last_response or {}
                code = last.get("Error", {}).get("Code", "")
                if (code in THROTTLING or code in TRANSIENT) and time.monotonic() < deadline:
                    log.warning("waiting for node group %s: %s; polling on", name, code)
                    time.sleep(delay)
                    continue
                status = last.get("nodegroup", {}).get("status") or code or exc.reason
            break
        health = ""
        if waiter_name == "nodegroup_active":
            try:
                issues = self.describe_nodegroup(name).get("health", {}).get("issues", [])
                health = "; ".join(f"{i.get('code')}: {i.get('message')}" for i in issues)
            except AwsCallError:
                pass
        raise ProvisionError(
            f"node group {name}: {waiter_name} not reached within {timeout_s:.0f}s ({status})"
            + (f": {health}" if health else ""))


class Heartbeat:
    """Refreshes a node group's heartbeat tag every `every_s` in a daemon thread, so the
    reaper of any process can tell a live run from a crashed one. A failed refresh is
    logged and retried at the next tick: it must never fail the run it watches."""

    def __init__(self, cluster: EksNodegroups, info: NodegroupInfo,
                 every_s: float = HEARTBEAT_EVERY_S):
        self.cluster, self.info, self.every_s = cluster, info, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{info.nodegroup}",
                                        daemon=True)
        self.beats = 0
        if info.arn:
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.cluster.beat(self.info)
                self.beats += 1
            except Exception as exc:  # noqa: BLE001 - logged; the run goes on
                log.warning("heartbeat of %s failed: %s", self.info.nodegroup, exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
