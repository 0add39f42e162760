"""The cluster a candidate runs on: one interface, the embedded default beside the real one.

`provision` returns the manifest facts of the scope that will produce the tokens (account,
region, AZ, cluster, node group, instance type and count, instance ids) and the provision
phase's times; `teardown` always runs, also when a later step fails.
"""

from __future__ import annotations

import os
import platform
import socket
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from resources.analysis.manifest import format_ts


@dataclass
class ClusterInfo:
    facts: dict                      # manifest keys: account_id, region, ... instance_ids
    phases: dict = field(default_factory=dict)  # {"provision": {started_at, ended_at}}
    host: dict = field(default_factory=dict)    # where the benchmark ran (metadata only)
    handle: object = None            # what teardown needs (e.g. a node group name)


class Cluster(ABC):
    emulated: bool = False

    def emulated_for(self, candidate) -> bool:
        """Whether runs of `candidate` on this cluster are emulated (their `source`)."""
        return self.emulated

    @abstractmethod
    def provision(self, candidate, run_id: str) -> ClusterInfo: ...

    @abstractmethod
    def teardown(self, info: ClusterInfo) -> None: ...


class LocalHostCluster(Cluster):
    """The embedded default: this machine is the cluster. Nothing is created or billed by a
    cloud. A cloud candidate's instance type is only stood in for by the emulator (EMULATED);
    a candidate on the real local engine (llama.cpp) runs on this host itself, which is then
    the measured scope and is described in the manifest (CPU model, cores, memory)."""

    emulated = True

    def emulated_for(self, candidate) -> bool:
        return candidate.engine != "llama.cpp"

    def provision(self, candidate, run_id: str) -> ClusterInfo:
        now = format_ts(time.time_ns())
        if not self.emulated_for(candidate):
            from resources.model_server.llamacpp import describe_host, host_facts

            host = host_facts()
            # SPEC §2.1 has no host object: the node group is this host, described, and
            # its one "instance" is the hostname.
            facts = {"account_id": None, "region": None, "availability_zone": None,
                     "cluster_name": f"local:{host['hostname']}", "k8s_version": None,
                     "nodegroup": describe_host(host), "instance_type": candidate.instance_type,
                     "node_count": candidate.node_count, "instance_ids": [host["hostname"]],
                     "driver_version": None}
            return ClusterInfo(facts, {"provision": {"started_at": now, "ended_at": now}}, host)
        facts = {"account_id": None, "region": None, "availability_zone": None,
                 "cluster_name": f"local:{socket.gethostname()}", "k8s_version": None,
                 "nodegroup": "local", "instance_type": candidate.instance_type,
                 "node_count": candidate.node_count, "instance_ids": [], "driver_version": None}
        host = {"hostname": socket.gethostname(), "platform": platform.platform(),
                "python": platform.python_version(), "cpus": os.cpu_count()}
        return ClusterInfo(facts, {"provision": {"started_at": now, "ended_at": now}}, host)

    def teardown(self, info: ClusterInfo) -> None:
        return None
