"""Spot interruptions as a run condition on EKS, through AWS Fault Injection Service.

A candidate's `interruptions` key (`{at: [s, ...]}` or `{rate_per_hour: R, seed: S}`) is a
list of times, in seconds from the start of the steady phase. The run creates one FIS
experiment template (`aws:ec2:send-spot-instance-interruptions`, two minutes' notice)
whose target is one running spot instance carrying the run's tag
(`servingbench:run-id=<run_id>`): it can reach no other run's instance. Each due time starts
an experiment from it; the template is deleted when the run ends, however it ends, and a
run killed before it could (SIGKILL, an OOM kill) leaves it to the reaper (`reap`).

What happens next is EKS's: the managed node group, told by the rebalance recommendation
or the interruption notice, cordons and drains the node (kube/events.py records that as
`interruption_notice`, then `interruption` when the node is gone), and the Cluster
Autoscaler brings a replacement into the same node group (same tags: in the bill's scope).
`notices` reads the experiments back: the instance each one hit and when its notice went.

The IAM rights (docs/iam-policy.json, statements `Fis*`) and the experiment's own role
(docs/policies/fis-role.json) are in docs/spot.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from servingbench.resources.aws.caller import AwsCallError, Caller, make_client
from servingbench.resources.cluster.eks_api import OWNER_TAG, RUN_TAG, check_owner
from servingbench.resources.contract.scope import nodegroup_name

log = logging.getLogger("servingbench.fis")

ACTION = "aws:ec2:send-spot-instance-interruptions"
NOTICE = "PT2M"  # the notice a real spot interruption gives; FIS allows 2 to 15 minutes
TARGET = "RunSpotInstances"


def template(run_id: str, owner: str, role_arn: str) -> dict:
    """CreateExperimentTemplate's parameters: one running spot instance of the run."""
    tags = {RUN_TAG: run_id, OWNER_TAG: owner}
    return {
        "clientToken": f"sb-{run_id}"[:64],
        "description": f"servingbench: spot interruption of run {run_id}"[:512],
        "roleArn": role_arn,
        "stopConditions": [{"source": "none"}],
        "targets": {TARGET: {
            "resourceType": "aws:ec2:spot-instance",
            "resourceTags": dict(tags),
            "filters": [{"path": "State.Name", "values": ["running"]}],
            "selectionMode": "COUNT(1)"}},
        "actions": {"interrupt": {
            "actionId": ACTION,
            "parameters": {"durationBeforeInterruption": NOTICE},
            "targets": {"SpotInstances": TARGET}}},
        "tags": tags,
    }


class FisInterruptions:
    """One run's experiment template and the experiments started from it."""

    def __init__(self, session: Any, region: str, *, role_arn: str, owner: str,
                 endpoint_url: str | None = None, caller: Caller | None = None):
        self.region, self.role_arn = region, role_arn
        self.owner = check_owner(owner)
        self.call = caller or Caller()
        self.fis = make_client(session, "fis", region, endpoint_url)
        self.experiments: list[str] = []

    def __repr__(self) -> str:
        return f"FisInterruptions({self.region!r})"

    def create(self, run_id: str) -> str:
        out = self.call(self.fis, "create_experiment_template",
                        **template(run_id, self.owner, self.role_arn))
        template_id = out["experimentTemplate"]["id"]
        log.info("FIS experiment template %s for run %s", template_id, run_id)
        return template_id

    def start(self, template_id: str, run_id: str) -> str:
        """Start one interruption now; returns the experiment's id."""
        out = self.call(self.fis, "start_experiment", experimentTemplateId=template_id,
                        clientToken=f"sb-{run_id}-{len(self.experiments)}"[:64],
                        tags={RUN_TAG: run_id, OWNER_TAG: self.owner})
        experiment = out["experiment"]["id"]
        self.experiments.append(experiment)
        log.warning("spot interruption %s started (run %s)", experiment, run_id)
        return experiment

    def delete(self, template_id: str) -> bool:
        """Delete the template; a missing one is fine. True if it existed."""
        try:
            self.call(self.fis, "delete_experiment_template", id=template_id)
        except AwsCallError as exc:
            if exc.code != "ResourceNotFoundException":
                raise
            return False
        return True

    @contextmanager
    def template_for(self, run_id: str) -> Iterator[str]:
        """The run's template for the block; deleted however the block ends."""
        template_id = self.create(run_id)
        try:
            yield template_id
        finally:
            self.delete(template_id)

    def start_due(self, template_id: str, run_id: str, times: list[float],
                  elapsed_s: float) -> list[str]:
        """Start every interruption whose time has come and that has not started yet (call
        on the run's cadence with the seconds since the steady phase began)."""
        due = sum(1 for t in times if t <= elapsed_s)
        return [self.start(template_id, run_id) for _ in range(due - len(self.experiments))]

    def reap(self, dead: Callable[[str, str, int | None], bool]) -> tuple[list[str], list[str]]:
        """Delete this installation's experiment templates whose run is gone (a run killed
        before its `template_for` block could delete its own): `dead(node group, run id,
        created ns)` is the reaper's rule for a run's leftovers. Returns (what was deleted,
        what failed and why); one failure never stops the others."""
        deleted, failed = [], []
        token = None
        while True:
            page = self.call(self.fis, "list_experiment_templates", maxResults=100,
                             **({"nextToken": token} if token else {}))
            for t in page.get("experimentTemplates", []):
                tags = t.get("tags") or {}
                run_id = tags.get(RUN_TAG)
                if tags.get(OWNER_TAG) != self.owner or not run_id:
                    continue  # not ours: never touched
                created = t.get("creationTime")
                created_ns = None if created is None else int(created.timestamp() * 1e9)
                if not dead(nodegroup_name(run_id), run_id, created_ns):
                    continue
                try:
                    self.delete(t["id"])
                    deleted.append(f"experiment template {t['id']} (run {run_id})")
                except AwsCallError as exc:
                    failed.append(f"experiment template {t['id']}: {exc}")
            token = page.get("nextToken")
            if not token:
                return deleted, failed

    def notices(self) -> list[tuple[str, str | None, Any]]:
        """(experiment id, instance id, the action's start time as FIS reports it) of each
        experiment started: the instance that got the notice, and when."""
        out = []
        for experiment in self.experiments:
            got = self.call(self.fis, "get_experiment", id=experiment)["experiment"]
            started = (got.get("actions", {}).get("interrupt") or {}).get("startTime")
            targets = self.call(self.fis, "list_experiment_resolved_targets",
                                experimentId=experiment).get("resolvedTargets", [])
            for t in targets:
                info = t.get("targetInformation") or {}
                # an instance's ARN ends with its id (arn:aws:ec2:R:A:instance/i-...)
                instance = (info.get("arn") or info.get("identifier") or "").rsplit("/", 1)[-1]
                out.append((experiment, instance or None, started))
        return out


def node_of(instance_id: str, nodes: list[dict]) -> str | None:
    """The Kubernetes Node an EC2 instance is (its providerID ends with the instance id)."""
    for n in nodes:
        if (n.get("spec") or {}).get("providerID", "").rsplit("/", 1)[-1] == instance_id:
            return n["metadata"]["name"]
    return None
