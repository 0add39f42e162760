"""The cluster a candidate runs on: one interface, the embedded default beside the real one.

`provision` returns the manifest facts of the scope that will produce the tokens (account,
region, AZ, cluster, node group, instance type and count, instance ids) and the provision
phase's times; `teardown` always runs, also when a later step fails.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.scope import ClusterInfo


class Cluster(ABC):
    emulated: bool = False

    def emulated_for(self, candidate: Candidate) -> bool:
        """Whether runs of `candidate` on this cluster are emulated (their `source`)."""
        return self.emulated

    @abstractmethod
    def provision(self, candidate: Candidate, run_id: str) -> ClusterInfo: ...

    @abstractmethod
    def teardown(self, info: ClusterInfo) -> None: ...
