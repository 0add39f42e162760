"""The Kubernetes half of the reaper: a dead run's namespaced objects (its Service, which
takes its load balancer with it, Deployment, NetworkPolicy, API-key Secret and Jobs).

Which runs are dead is decided by the cluster's reaper (node group tags, age, heartbeat,
the Dagster run status); this side only finds the objects and deletes them. It looks at
objects labelled with this installation's owner only, checks the label again on what the
API returns (never trusting the selector alone), and hands the node-group label and the
run-id annotation to `dead` to decide. One object that cannot be deleted never stops the
others: every failure is collected and returned."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from servingbench.resources.model_server.kube.client import KubeClient, KubeError
from servingbench.resources.model_server.kube.render import (
    NODEGROUP_LABEL,
    OWNER_LABEL,
    RUN_ANNOTATION,
)

log = logging.getLogger("servingbench.kube")

# The Service first: deleting it is what releases the load balancer (and its hourly cost).
# An autoscaler before its Deployment: it would scale a Deployment that is going.
KINDS = ("Service", "ScaledObject", "HorizontalPodAutoscaler", "Deployment", "NetworkPolicy",
         "Secret", "Job")

# dead(nodegroup label, run-id annotation, created at in epoch ns or None) -> may it go?
Dead = Callable[[str, str, "int | None"], bool]


class KubeRunObjects:
    """A run's objects in one namespace of one cluster, deletable by the reaper."""

    def __init__(self, kube: KubeClient, owner: str) -> None:
        if not owner:
            raise ValueError("the Kubernetes reaper needs this installation's owner id")
        self.kube, self.owner = kube, owner

    def reap(self, dead: Dead) -> tuple[list[str], list[str]]:
        """Delete every object of ours whose run `dead` says may go.
        Returns (deleted "Kind/name", failures "Kind/name: why")."""
        deleted: list[str] = []
        failed: list[str] = []
        for kind in KINDS:
            try:
                items = self.kube.list(kind, label_selector=f"{OWNER_LABEL}={self.owner}")
            except KubeError as exc:
                failed.append(f"{kind}: {exc}")
                continue
            for obj in items:
                meta = obj.get("metadata") or {}
                name = meta.get("name", "?")
                if not self._ours_and_dead(meta, dead):
                    continue
                try:
                    log.warning("reaping %s/%s (run %s)", kind, name,
                                meta["annotations"][RUN_ANNOTATION])
                    self.kube.delete(kind, name, meta.get("namespace"))
                except KubeError as exc:
                    failed.append(f"{kind}/{name}: {exc}")
                    continue
                deleted.append(f"{kind}/{name}")
        return deleted, failed

    def _ours_and_dead(self, meta: dict, dead: Dead) -> bool:
        labels = meta.get("labels") or {}
        if labels.get(OWNER_LABEL) != self.owner:
            return False  # the selector said so; the object must say so too
        group = labels.get(NODEGROUP_LABEL)
        run_id = (meta.get("annotations") or {}).get(RUN_ANNOTATION)
        if not group or not run_id:
            return False  # not an object of a run: left alone
        return dead(group, run_id, _created_ns(meta.get("creationTimestamp")))


def _created_ns(stamp: str | None) -> int | None:
    if not stamp:
        return None
    try:
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1e9)
    except ValueError:
        return None
