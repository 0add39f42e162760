"""What a provisioned cluster is, as the cluster hands it to the model server and the chain
records it: the manifest facts of the scope that produces the tokens, the provision phase,
where the benchmark ran and what teardown needs. In the contract so that the model server
reads it without reaching into the cluster's room."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field


def nodegroup_name(run_id: str) -> str:
    """A valid, unique node group name (≤ 63 chars) for `run_id`: the EKS profile names a
    run's node group so, and labels every Kubernetes object of the run with it, which is how
    the reaper proves an object belongs to a run."""
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:8]
    slug = re.sub(r"[^a-z0-9-]", "-", run_id.lower())[:40].strip("-") or "run"
    return f"sb-{slug}-{digest}"


@dataclass
class ClusterInfo:
    facts: dict                      # manifest keys: account_id, region, ... instance_ids
    phases: dict = field(default_factory=dict)  # {"provision": {started_at, ended_at}}
    host: dict = field(default_factory=dict)    # where the benchmark ran (metadata only)
    handle: object = None            # what teardown needs (e.g. a node group name)
