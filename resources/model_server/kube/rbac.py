"""The Kubernetes Role the pipeline's identity needs, instead of the namespace's edit
policy: exactly the verbs the code calls (server-side apply is `patch`, and `create` for a
new object; the reaper lists and deletes by label; the rollout and the load Job's watch read
pods, their logs and events), nothing else, in the one namespace where engines and load pods
run. RBAC cannot narrow `list secrets` by label, so that namespace must hold nothing but
servingbench's own objects: Dagster's secrets live in another one.

`tests/eks/test_kube_role.py` runs the engine's deployment, the load Job and the reaper
against the fake Kubernetes API and checks every request against this Role, verb by verb,
and that the Role grants no verb the code never calls. Nodes are cluster-scoped: their one
verb (`list`) is a ClusterRole's, checked the same way. docs/policies/servingbench-role.yaml
is this, rendered (`python -m servingbench.resources.model_server.kube.rbac`)."""

from __future__ import annotations

import sys

APPLIED = ("list", "create", "patch", "delete")  # applied, listed and deleted by the reaper
RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("", "services", ("get", *APPLIED)),  # read back for the load balancer's name
    ("", "secrets", APPLIED),             # the API keys: written, never read back
    ("apps", "deployments", ("get", *APPLIED)),  # the rollout's status
    ("networking.k8s.io", "networkpolicies", APPLIED),
    ("batch", "jobs", ("get", *APPLIED)),  # the Job's status
    ("", "pods", ("list",)),             # the rollout's and the Job's pods, by label
    ("", "pods/log", ("get",)),          # cold-start phases, a failed pod's last lines
    ("", "events", ("list",)),           # scheduling and image pull times
    ("keda.sh", "scaledobjects", APPLIED),  # an autoscaled candidate's ScaledObject
    ("autoscaling", "horizontalpodautoscalers", APPLIED),  # ... or its HPA
)
# Cluster-scoped: Nodes are not in any namespace, so reading them needs a ClusterRole. Only
# `list` (by the node group's label): node events (kube/events.py), never a write.
CLUSTER_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("", "nodes", ("list",)),
)


def role(namespace: str = "servingbench", name: str = "servingbench") -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": namespace},
            "rules": [{"apiGroups": [group], "resources": [res], "verbs": list(verbs)}
                      for group, res, verbs in RULES]}


def cluster_role(name: str = "servingbench-nodes") -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [{"apiGroups": [group], "resources": [res], "verbs": list(verbs)}
                      for group, res, verbs in CLUSTER_RULES]}


def cluster_role_binding(group: str = "servingbench-pipeline",
                         name: str = "servingbench-nodes") -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                          "name": group}]}


def role_binding(namespace: str = "servingbench", group: str = "servingbench-pipeline",
                 name: str = "servingbench") -> dict:
    """Binds the Role to the Kubernetes group the EKS access entry maps the IAM identity to
    (`aws eks create-access-entry … --kubernetes-groups servingbench-pipeline`)."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                          "name": group}]}


def allows(role_obj: dict, verb: str, group: str, resource: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
               for r in role_obj["rules"])


def main() -> int:
    import yaml

    sys.stdout.write(yaml.safe_dump_all([role(), role_binding(), cluster_role(),
                                         cluster_role_binding()], sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
