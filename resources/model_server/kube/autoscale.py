"""Autoscaling manifests for one candidate's engine Deployment (contract §2.1 `replicas`,
`autoscaling`): a KEDA ScaledObject with a Prometheus trigger (policy `keda`), or an
autoscaling/v2 HorizontalPodAutoscaler on a pods metric served by prometheus-adapter
(policy `hpa`). Both read the engine's own gauges; their names come from the engine's file
(engines/<engine>.py GAUGES, COUNTERS), never from here.

Node scale-out is the Cluster Autoscaler's, on the run's own managed node group (its
scalingConfig spans the nodes `replicas.min..max` need): docs/eks.md says why not Karpenter.

The rule both autoscalers apply: desired = ceil(current × reading / target) where the
reading is the per-replica mean (metricType AverageValue: the query sums over the
Deployment's pods, the HPA divides by the replica count); `activation_target` decides
0 ↔ 1 (KEDA only); the cooldowns are the HPA's stabilization windows.
"""

from __future__ import annotations

from servingbench.resources.contract.deployment import Autoscaling, Replicas, Replicated
from servingbench.resources.model_server import engines
from servingbench.resources.model_server.kube.render import RUN_ANNOTATION, EngineSpec, labels

POLICIES = ("keda", "hpa")  # of the plan's policies, those a Kubernetes autoscaler runs
KEDA_POLL_S = 15
RPS_WINDOW = "1m"


def metric_names(s: EngineSpec, metric: str) -> tuple[str, ...]:
    """The engine's Prometheus names for a contract metric (the first present wins)."""
    engine = s.runtime
    if metric == "rps":
        if engine.counters is None or engine.counters.finished is None:
            raise ValueError(f"engine {engine.name} has no finished-requests counter for rps")
        return (engine.counters.finished,)
    found = engine.gauges.get(metric)
    if not found:
        raise ValueError(f"engine {engine.name} exposes no {metric} gauge")
    return tuple(found)


def query(s: EngineSpec, metric: str) -> str:
    """PromQL: the metric summed over the Deployment's pods (engines that renamed a gauge:
    each name, joined by `or`, so whichever the image serves is read)."""
    where = f'{{namespace="{s.namespace}",pod=~"{s.name}-.*"}}'
    parts = [f"sum(rate({n}{where}[{RPS_WINDOW}]))" if metric == "rps" else f"sum({n}{where})"
             for n in metric_names(s, metric)]
    return " or ".join(parts)


def _behavior(a: Autoscaling) -> dict:
    # whole seconds: `unwired` refuses a plan whose windows are not
    return {"scaleUp": {"stabilizationWindowSeconds": int(a.scale_up_cooldown_s)},
            "scaleDown": {"stabilizationWindowSeconds": int(a.scale_down_cooldown_s)}}


def _meta(s: EngineSpec) -> dict:
    return {"name": s.name, "namespace": s.namespace, "labels": labels(s),
            "annotations": {RUN_ANNOTATION: s.run_id}}


def _number(x: float) -> str:
    return f"{x:g}"


def scaled_object(s: EngineSpec, r: Replicas, a: Autoscaling, prometheus_url: str) -> dict:
    """A KEDA ScaledObject on the engine Deployment, one Prometheus trigger."""
    return {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": _meta(s),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": s.name},
            "minReplicaCount": r.min, "maxReplicaCount": r.max,
            "pollingInterval": KEDA_POLL_S,
            # KEDA's own cooldown is the 1 -> 0 step; the HPA's windows do the rest
            "cooldownPeriod": int(a.scale_down_cooldown_s),
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(a)}},
            "triggers": [{"type": "prometheus", "metricType": "AverageValue", "metadata": {
                "serverAddress": prometheus_url, "query": query(s, a.metric),
                "threshold": _number(a.target),
                "activationThreshold": _number(a.activation_target)}}],
        },
    }


def hpa(s: EngineSpec, r: Replicas, a: Autoscaling) -> dict:
    """An autoscaling/v2 HPA on a pods metric (prometheus-adapter serves the engine's gauge
    under its Prometheus name). The HPA cannot scale to zero: min is at least 1."""
    if a.metric == "rps":
        raise ValueError("autoscaling.metric rps: policy hpa reads per-pod gauges only; use keda")
    return {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": _meta(s),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": s.name},
            "minReplicas": max(1, r.min), "maxReplicas": r.max,
            "metrics": [{"type": "Pods", "pods": {
                "metric": {"name": metric_names(s, a.metric)[0]},
                "target": {"type": "AverageValue", "averageValue": _number(a.target)}}}],
            "behavior": _behavior(a),
        },
    }


def autoscaler(s: EngineSpec, r: Replicas, a: Autoscaling | None,
               prometheus_url: str) -> dict | None:
    """The candidate's autoscaler object, or None for a fixed replica count."""
    if a is None:
        return None
    return scaled_object(s, r, a, prometheus_url) if a.policy == "keda" else hpa(s, r, a)


def with_replicas(deployment: dict, r: Replicas) -> dict:
    """The Deployment starting at `replicas.initial`, rolled one pod at a time (Recreate
    would stop every replica for a change)."""
    deployment["spec"]["replicas"] = r.initial
    deployment["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {
        "maxSurge": 1, "maxUnavailable": 0}}
    return deployment


def nodes_for(replicas: int, pods_per_node: int = 1) -> int:
    """Nodes `replicas` engine pods need (each pod takes a node's accelerators)."""
    return -(-replicas // pods_per_node)


def unwired(engine: str, plan: Replicated) -> str | None:
    """Why the eks profile cannot honour a replicated plan as written, naming the key (None
    when it can): each key is either rendered into the Deployment, the node group and the
    ScaledObject / HPA above, or refused here, before anything is created. A key the
    manifests would drop or change silently (the HPA has no activation threshold and never
    scales to zero; behavior windows are whole seconds) is refused, as is what would fail
    only at deploy, after the node group is up (policy local, rps under an HPA, a gauge the
    engine does not serve). The numbers themselves are the plan's (finite, bounded)."""
    a = plan.autoscaling
    if a is None:
        return None
    if a.policy not in POLICIES:
        return (f"autoscaling.policy: {a.policy!r} does not run on eks (one of "
                f"{', '.join(POLICIES)}; local is the embedded default's)")
    for key in ("scale_up_cooldown_s", "scale_down_cooldown_s"):
        v = getattr(a, key)
        if v != int(v):
            return (f"autoscaling.{key}: {v:g} s; the HPA's stabilization windows and KEDA's "
                    "cooldownPeriod are whole seconds on eks")
    if a.policy == "hpa":
        if a.activation_target != 0:
            return ("autoscaling.activation_target: policy hpa has no activation threshold "
                    "(KEDA's activationThreshold); set 0 or use policy keda")
        if plan.replicas.min == 0:
            return "replicas.min: 0 needs policy keda (the HPA never scales to zero)"
        if a.metric == "rps":
            return "autoscaling.metric: rps is a rate over the pods; policy hpa reads per-pod gauges (use keda)"
    runtime = engines.get(engine)
    if a.metric == "rps":
        if runtime.counters is None or runtime.counters.finished is None:
            return f"autoscaling.metric: engine {runtime.name} has no finished-requests counter for rps"
    elif not runtime.gauges.get(a.metric):
        return f"autoscaling.metric: engine {runtime.name} exposes no {a.metric} gauge"
    return None
