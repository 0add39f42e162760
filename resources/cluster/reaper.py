"""The reaper the eks profile schedules: deletes servingbench node groups older than the
TTL, so no node is ever forgotten, and the Kubernetes objects of the runs that are gone (the
Service takes its load balancer with it). The local profile creates nothing and reaps
nothing.

The policy is here, the AWS calls in eks_api.py: a node group goes only when its name has
our prefix and derives from its run tag, its owner tag is this installation's, it is older
than the TTL, its heartbeat is stale and its run is not alive (the Dagster run status); it
is never described without our prefix, and a failure on one never stops the others."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from servingbench.resources.aws.caller import AwsCallError
from servingbench.resources.cluster.eks_api import (
    HEARTBEAT_STALE_S,
    HEARTBEAT_TAG,
    NAME_PREFIX,
    OWNER_TAG,
    RUN_TAG,
    EksNodegroups,
    ProvisionError,
)
from servingbench.resources.contract.digits import is_digits
from servingbench.resources.contract.scope import nodegroup_name

log = logging.getLogger("servingbench.reaper")


# alive(run_id) -> why the run still lives (e.g. "Dagster run 1a2b STARTED"), or None
Alive = Callable[[str], "str | None"]


class RunObjects(Protocol):
    """The Kubernetes objects of runs (resources/model_server/kube/reap.py), handed to the
    reaper by the composition: `dead(nodegroup, run_id, created_ns)` says which may go."""

    def reap(self, dead: Callable[[str, str, int | None], bool]) -> tuple[list[str], list[str]]:
        ...


def alive_reason(alive: Alive | None, run_id: str) -> str | None:
    """Why `run_id` must be kept by `alive`'s word; a lookup that fails keeps it too (a run
    is only ever reaped on evidence that it is over)."""
    if alive is None:
        return None
    try:
        return alive(run_id)
    except Exception as exc:  # noqa: BLE001 - any failure of the lookup means "keep"
        return f"its run status could not be read ({type(exc).__name__}); kept"


def reap_nodegroups(eks: EksNodegroups, ttl_s: float, *,
                    heartbeat_stale_s: float = HEARTBEAT_STALE_S, now_ns: int | None = None,
                    objects: RunObjects | None = None, alive: Alive | None = None,
                    fis: RunObjects | None = None) -> list[str]:
    """Delete this installation's expired node groups (and their launch templates), then
    its launch templates left without a node group, then (with `objects`) the
    Kubernetes objects of the runs that are gone, and (with `fis`) their FIS experiment
    templates (cluster/fis.py `reap`). `alive(run_id)` says why a run still
    lives (the Dagster run status), or None. Returns what was deleted; raises
    AwsCallError naming every one that failed, after trying all of them."""
    now_ns = eks.clock() if now_ns is None else now_ns
    reaped: list[str] = []
    failed: list[str] = []
    names = eks.list_nodegroups()
    for name in names:
        if not name.startswith(NAME_PREFIX):
            continue  # not ours by name: never even described
        try:
            ng = eks.describe_nodegroup(name)
            why = keep_reason(eks, name, ng, ttl_s, heartbeat_stale_s, now_ns, alive)
            if why:
                log.info("reaper: keeping node group %s (%s)", name, why)
                continue
            log.warning("reaping node group %s (run %s)", name, ng["tags"][RUN_TAG])
            eks.delete_nodegroup(name, _our_template(eks, (ng.get("launchTemplate") or {})
                                                     .get("id")))
        except (AwsCallError, ProvisionError) as exc:
            failed.append(f"{name}: {exc}")
            continue
        reaped.append(name)
    try:
        _reap_templates(eks, set(names) - set(reaped), ttl_s, now_ns)
    except AwsCallError as exc:
        failed.append(f"launch templates: {exc}")
    gone: list[str] = []
    dead = dead_run(set(reaped), set(names), ttl_s, now_ns, alive)
    for leftovers in (objects, fis):
        if leftovers is not None:
            more, more_failed = leftovers.reap(dead)
            gone += more
            failed += more_failed
    if failed:  # the others were still reaped; say which ones were not, and why
        raise AwsCallError("reaper could not delete: " + "; ".join(failed))
    return reaped + gone


def dead_run(reaped: set[str], listed: set[str], ttl_s: float, now_ns: int,
             alive: Alive | None) -> Callable[[str, str, int | None], bool]:
    """Whether a Kubernetes object of run `run_id` (labelled with node group `group`)
    may go: its node group was reaped just now; or it has none any more (a run that
    died before its objects were deleted), is older than the TTL, and is not alive."""
    def dead(group: str, run_id: str, created_ns: int | None) -> bool:
        if not group.startswith(NAME_PREFIX) or nodegroup_name(run_id) != group:
            return False  # label and annotation disagree: not provably one of our runs
        if group in reaped:
            return True
        if group in listed or created_ns is None:
            return False  # its node group is kept (alive, young, another's), or undated
        if (now_ns - created_ns) / 1e9 <= ttl_s:
            return False
        return alive_reason(alive, run_id) is None
    return dead


def keep_reason(eks: EksNodegroups, name: str, ng: dict, ttl_s: float, heartbeat_stale_s: float,
                now_ns: int, alive: Alive | None = None) -> str | None:
    """Why the reaper must leave this node group alone, or None when it may go."""
    tags = ng.get("tags") or {}
    run_id = tags.get(RUN_TAG)
    if not run_id or nodegroup_name(run_id) != name:
        return "no run tag matching its name"
    if tags.get(OWNER_TAG) != eks.owner:
        return f"owner {tags.get(OWNER_TAG)!r} is not this installation ({eks.owner!r})"
    if ng.get("status") == "DELETING":
        return "already deleting"
    age_s = (now_ns - int(ng["createdAt"].timestamp() * 1e9)) / 1e9
    if age_s <= ttl_s:
        return f"age {age_s:.0f}s within the TTL {ttl_s:.0f}s"
    beat = tags.get(HEARTBEAT_TAG, "")
    if is_digits(beat) and now_ns / 1e9 - int(beat) < heartbeat_stale_s:
        return f"its run is alive (heartbeat {now_ns / 1e9 - int(beat):.0f}s ago)"
    return alive_reason(alive, run_id)


def _our_template(eks: EksNodegroups, template_id: str | None) -> str | None:
    """`template_id` if that launch template carries this installation's owner tag."""
    if not template_id:
        return None
    found = eks.call(eks.ec2, "describe_launch_templates", LaunchTemplateIds=[template_id])
    for t in found.get("LaunchTemplates", []):
        if {"Key": OWNER_TAG, "Value": eks.owner} in (t.get("Tags") or []):
            return template_id
    return None


def _reap_templates(eks: EksNodegroups, live_nodegroups: set[str], ttl_s: float, now_ns: int) -> None:
    """Our launch templates whose node group is gone (a create that died half-way)."""
    found = eks.call(eks.ec2, "describe_launch_templates", Filters=[
        {"Name": f"tag:{OWNER_TAG}", "Values": [eks.owner]},
        {"Name": "launch-template-name", "Values": [f"{NAME_PREFIX}*"]}])
    for t in found.get("LaunchTemplates", []):
        tags = {x["Key"]: x["Value"] for x in t.get("Tags") or []}
        run_id = tags.get(RUN_TAG)
        if (not run_id or nodegroup_name(run_id) != t["LaunchTemplateName"]
                or t["LaunchTemplateName"] in live_nodegroups):
            continue
        if (now_ns - int(t["CreateTime"].timestamp() * 1e9)) / 1e9 <= ttl_s:
            continue
        log.warning("reaping launch template %s (run %s)", t["LaunchTemplateName"], run_id)
        eks.delete_launch_template(t["LaunchTemplateId"])


@dataclass
class EksReaper:
    cluster: EksNodegroups
    ttl_hours: float
    # Builds the Kubernetes side when the reaper runs (a DescribeCluster and a token), never
    # when the definitions load; None: node groups and launch templates only.
    objects: Callable[[], RunObjects] | None = None
    heartbeat_stale_s: float = HEARTBEAT_STALE_S
    # the FIS experiment templates of dead runs (cluster/fis.py `FisInterruptions`)
    fis: Callable[[], RunObjects] | None = None

    def reap(self, alive: Alive | None = None) -> list[str]:
        objects, problem = None, None
        if self.objects is not None:
            try:
                objects = self.objects()
            except Exception as exc:  # noqa: BLE001 - the node groups are reaped all the same
                problem = f"Kubernetes objects not reaped: {type(exc).__name__}: {exc}"
                log.error("reaper: %s", problem)
        reaped = reap_nodegroups(self.cluster, self.ttl_hours * 3600, objects=objects,
                                 alive=alive, heartbeat_stale_s=self.heartbeat_stale_s,
                                 fis=None if self.fis is None else self.fis())
        if problem:
            raise AwsCallError(f"{problem} (node groups reaped: {', '.join(reaped) or 'none'})")
        return reaped


class NothingToReap:
    """The local profile creates no cloud resource, so the reaper has nothing to delete."""

    def reap(self, alive: Alive | None = None) -> list[str]:
        return []
