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

    @abstractmethod
    def provision(self, candidate, run_id: str) -> ClusterInfo: ...

    @abstractmethod
    def teardown(self, info: ClusterInfo) -> None: ...


class LocalHostCluster(Cluster):
    """The embedded default: this machine is the cluster. Nothing is created or billed by a
    cloud; the instance type is the candidate's, served by the emulator (EMULATED)."""

    emulated = True

    def provision(self, candidate, run_id: str) -> ClusterInfo:
        now = format_ts(time.time_ns())
        facts = {"account_id": None, "region": None, "availability_zone": None,
                 "cluster_name": f"local:{socket.gethostname()}", "k8s_version": None,
                 "nodegroup": "local", "instance_type": candidate.instance_type,
                 "node_count": candidate.node_count, "instance_ids": [], "driver_version": None}
        host = {"hostname": socket.gethostname(), "platform": platform.platform(),
                "python": platform.python_version(), "cpus": os.cpu_count()}
        return ClusterInfo(facts, {"provision": {"started_at": now, "ended_at": now}}, host)

    def teardown(self, info: ClusterInfo) -> None:
        return None
