"""The reaper the eks profile schedules: deletes servingbench node groups older than the
TTL, so no node is ever forgotten, and the Kubernetes objects of the runs that are gone (the
Service takes its load balancer with it). The local profile creates nothing and reaps
nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from resources.aws.caller import AwsCallError
from resources.cluster.eks_api import Alive, RunObjects

log = logging.getLogger("servingbench.reaper")


@dataclass
class EksReaper:
    cluster: object
    ttl_hours: float
    # Builds the Kubernetes side when the reaper runs (a DescribeCluster and a token), never
    # when the definitions load; None: node groups and launch templates only.
    objects: Callable[[], RunObjects] | None = None

    def reap(self, alive: Alive | None = None) -> list[str]:
        objects, problem = None, None
        if self.objects is not None:
            try:
                objects = self.objects()
            except Exception as exc:  # noqa: BLE001 - the node groups are reaped all the same
                problem = f"Kubernetes objects not reaped: {type(exc).__name__}: {exc}"
                log.error("reaper: %s", problem)
        reaped = self.cluster.reap(self.ttl_hours * 3600, objects=objects, alive=alive)
        if problem:
            raise AwsCallError(f"{problem} (node groups reaped: {', '.join(reaped) or 'none'})")
        return reaped


class NothingToReap:
    """The local profile creates no cloud resource, so the reaper has nothing to delete."""

    def reap(self, alive: Alive | None = None) -> list[str]:
        return []
