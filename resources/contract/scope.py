"""What a provisioned cluster is, as the cluster hands it to the model server and the chain
records it: the manifest facts of the scope that produces the tokens, the provision phase,
where the benchmark ran and what teardown needs. In the contract so that the model server
reads it without reaching into the cluster's room."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ClusterInfo:
    facts: dict                      # manifest keys: account_id, region, ... instance_ids
    phases: dict = field(default_factory=dict)  # {"provision": {started_at, ended_at}}
    host: dict = field(default_factory=dict)    # where the benchmark ran (metadata only)
    handle: object = None            # what teardown needs (e.g. a node group name)
