"""The reaper the eks profile schedules: deletes servingbench node groups older than the
TTL, so no node is ever forgotten. The local profile creates nothing and reaps nothing."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EksReaper:
    cluster: object
    ttl_hours: float

    def reap(self) -> list[str]:
        return self.cluster.reap(self.ttl_hours * 3600)


class NothingToReap:
    """The local profile creates no cloud resource, so the reaper has nothing to delete."""

    def reap(self) -> list[str]:
        return []
