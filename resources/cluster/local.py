"""The embedded default's cluster: this host, recorded as the scope (EMULATED)."""

from __future__ import annotations

import os
import platform
import socket
import time

from resources.cluster.interface import Cluster, ClusterInfo
from resources.contract.timestamps import format_ts


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
