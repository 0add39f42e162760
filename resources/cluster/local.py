"""The embedded default's cluster: this host, recorded as the scope. EMULATED for a cloud
candidate (the emulator stands in for its instance type); MEASURED for a candidate on a
real engine on this host (llama.cpp, or vLLM's CPU build on `local.host`), which runs on
this host itself."""

from __future__ import annotations

import os
import platform
import socket
import time

from servingbench.resources.cluster.host import describe_host, host_facts
from servingbench.resources.cluster.interface import Cluster, ClusterInfo
from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.timestamps import format_ts
from servingbench.resources.model_server import engines


class LocalHostCluster(Cluster):
    """The embedded default: this machine is the cluster. Nothing is created or billed by a
    cloud. A cloud candidate's instance type is only stood in for by the emulator (EMULATED);
    a candidate on the real local engine runs on this host itself, which is then the
    measured scope and is described in the manifest (CPU model, cores, memory)."""

    emulated = True

    def emulated_for(self, candidate: Candidate) -> bool:
        return not engines.runs_here(candidate.engine, candidate.instance_type)

    def provision(self, candidate: Candidate, run_id: str) -> ClusterInfo:
        now = format_ts(time.time_ns())
        phases = {"provision": {"started_at": now, "ended_at": now}}
        if not self.emulated_for(candidate):
            host = host_facts()
            # The manifest has no host object: the node group is this host, described, and
            # its one "instance" is the hostname.
            facts = {"account_id": None, "region": None, "availability_zone": None,
                     "cluster_name": f"local:{host['hostname']}", "k8s_version": None,
                     "nodegroup": describe_host(host), "instance_type": candidate.instance_type,
                     "node_count": candidate.node_count, "instance_ids": [host["hostname"]],
                     "driver_version": None}
            return ClusterInfo(facts, phases, host)
        facts = {"account_id": None, "region": None, "availability_zone": None,
                 "cluster_name": f"local:{socket.gethostname()}", "k8s_version": None,
                 "nodegroup": "local", "instance_type": candidate.instance_type,
                 "node_count": candidate.node_count, "instance_ids": [], "driver_version": None}
        host = {"hostname": socket.gethostname(), "platform": platform.platform(),
                "python": platform.python_version(), "cpus": os.cpu_count()}
        return ClusterInfo(facts, phases, host)

    def teardown(self, info: ClusterInfo) -> None:
        return None
